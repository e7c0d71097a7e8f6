"""The wheel ships prebuilt CO-RE objects, and a machine without clang loads them."""

import logging
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ebpfkit
from ebpfkit.engine import compiler

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "-q", "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    return next(out.glob("ebpfkit-*.whl"))


def test_wheel_contains_an_object_for_every_program(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for src in sorted((ROOT / "ebpfkit" / "programs").glob("*.bpf.c")):
        assert f"ebpfkit/programs/prebuilt/{src.name[:-2]}.o" in names, names


def test_without_clang_the_engine_loads_the_prebuilt_object(wheel, tmp_path, monkeypatch, caplog):
    prebuilt = tmp_path / "prebuilt"
    prebuilt.mkdir()
    with zipfile.ZipFile(wheel) as zf:
        (prebuilt / "runqlat.bpf.o").write_bytes(zf.read("ebpfkit/programs/prebuilt/runqlat.bpf.o"))
    monkeypatch.setattr(compiler, "PREBUILT_DIR", prebuilt)
    monkeypatch.setenv("EBPFKIT_CLANG", "none")
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="ebpfkit.engine.compiler"):
        spec = ebpfkit.compile("runqlat.bpf.c")
    assert any("prebuilt CO-RE object" in r.getMessage() for r in caplog.records)
    with spec.load() as obj:
        assert len(obj.attach()) == 6  # CO-RE relocated and attached on this kernel (tp_btf and raw_tp)
        import time

        time.sleep(0.2)
        assert sum(obj.maps["hists"][0].slots) > 0  # the scheduler ran; latencies were recorded
