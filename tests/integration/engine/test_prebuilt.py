"""Prebuilt CO-RE objects: the README's install path (an editable install, as scripts/setup.sh
makes) and the wheel both leave one per shipped program where the engine looks, `ebpfkit
build` writes them, and with no clang every one of them loads from there and every program
this kernel allows attaches. (What this host refuses, fentry/fexit and LSM programs, is
loaded and attached in a VM kernel: tests/vm/test_prebuilt_vm.py.)"""

import logging
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import ebpfkit
from ebpfkit.engine import compiler, features
from ebpfkit.engine.pinned import link_info
from ebpfkit.engine.prebuilt import program_sources
from ebpfkit.errors import NotSupportedError

pytestmark = pytest.mark.integration

ROOT = Path(ebpfkit.__file__).resolve().parents[1]
SOURCES = {src.name: src for src in program_sources()}  # each tool keeps its own
PROGRAMS = list(SOURCES)
RUNQLAT = SOURCES["runqlat.bpf.c"]
ELF_BPF = 247  # e_machine of a BPF object


def object_names(directory: Path) -> set:
    return {p.name for p in directory.glob("*.bpf.o")}


def expected_names() -> set:
    return {Path(compiler.prebuilt_object(name)).name for name in PROGRAMS}


def is_bpf_elf(path: Path) -> bool:
    head = path.read_bytes()[:20]
    return head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == ELF_BPF


def run_cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "ebpfkit", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


# --- the wheel ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "-q", "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    return next(out.glob("ebpfkit-*.whl"))


def test_wheel_contains_an_object_for_every_program(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for src in program_sources():
        assert f"ebpfkit/programs/prebuilt/{src.name[:-2]}.o" in names, names


def test_without_clang_the_engine_loads_the_prebuilt_object(wheel, tmp_path, monkeypatch, caplog):
    prebuilt = tmp_path / "prebuilt"
    prebuilt.mkdir()
    with zipfile.ZipFile(wheel) as zf:
        (prebuilt / "runqlat.bpf.o").write_bytes(zf.read("ebpfkit/programs/prebuilt/runqlat.bpf.o"))
    monkeypatch.setattr(compiler, "PREBUILT_DIR", str(prebuilt))
    monkeypatch.setenv("EBPFKIT_CLANG", "none")
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="ebpfkit.engine.compiler"):
        spec = ebpfkit.compile(RUNQLAT)
    assert any("prebuilt CO-RE object" in r.getMessage() for r in caplog.records)
    assert spec.path == str(prebuilt / "runqlat.bpf.o")
    with spec.load() as obj:
        assert len(obj.attach()) == 2  # CO-RE relocated and attached on this kernel (tp_btf and raw_tp)
        time.sleep(0.2)
        assert sum(obj.maps["hists"][0].slots) > 0  # the scheduler ran; latencies were recorded


# --- the README's install path: an editable install -----------------------------------------

def _copy_project(dest: Path) -> Path:
    """What an editable install reads, without build output (objects, the C module, caches)."""
    dest.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "ebpfkit", dest / "ebpfkit",
                    ignore=shutil.ignore_patterns("prebuilt", "*.so", "__pycache__", "*.egg-info"))
    return dest


def _editable_install(venv: Path, project: Path) -> None:
    """scripts/setup.sh's pip command (without the dependencies, already on this machine)."""
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "--no-deps",
                          "-e", str(project), "--config-settings", "editable_mode=compat"],
                         capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr


def test_editable_install_leaves_every_object_where_the_engine_looks(tmp_path):
    project = _copy_project(tmp_path / "project")
    prebuilt = project / "ebpfkit" / "programs" / "prebuilt"
    assert not prebuilt.exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    _editable_install(venv, project)
    assert object_names(prebuilt) == expected_names()
    assert all(is_bpf_elf(p) for p in prebuilt.iterdir())

    # the installed package is the source tree: without clang, a tool uses these objects
    env = dict(os.environ, EBPFKIT_CLANG="none", PYTHONPATH=str(project),
               EBPFKIT_CACHE_DIR=str(tmp_path / "cache"))
    run = run_cli("-v", "--format", "json", "runqlat", "0.3", "1", env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"using the prebuilt CO-RE object {prebuilt / 'runqlat.bpf.o'}" in run.stderr, run.stderr

    # setup.sh reinstalls on every run: current objects are left as they are
    stamps = {p.name: p.stat().st_mtime_ns for p in prebuilt.iterdir()}
    _editable_install(venv, project)
    assert {p.name: p.stat().st_mtime_ns for p in prebuilt.iterdir()} == stamps


# --- ebpfkit build --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prebuilt_dir():
    """The objects where the engine looks, made current by `ebpfkit build` (the editable
    install made them; this only rewrites what a program changed since)."""
    build = run_cli("build")
    assert build.returncode == 0, build.stderr
    directory = Path(compiler.PREBUILT_DIR)
    assert object_names(directory) == expected_names()
    return directory


def test_build_writes_one_bpf_object_per_program_into_out_dir(prebuilt_dir, tmp_path):
    out = tmp_path / "new" / "objs"  # created, parents too
    build = run_cli("--format", "json", "build", "--out-dir", str(out))
    assert build.returncode == 0, build.stderr
    assert object_names(out) == expected_names()
    for obj in out.iterdir():
        assert is_bpf_elf(obj), obj
        # the same compile as the objects the engine loads below (which all load)
        assert obj.read_bytes() == (prebuilt_dir / obj.name).read_bytes(), obj.name
    again = run_cli("--format", "json", "build", "--out-dir", str(out))
    assert again.returncode == 0 and '"written": "yes"' not in again.stdout, again.stdout


@pytest.mark.parametrize("out_dir", ["{file}/objs", "/proc/ebpfkit-objs/x"])
def test_build_into_a_directory_that_cannot_be_made_is_a_usage_error(out_dir, tmp_path):
    regular = tmp_path / "a-file"
    regular.write_text("")
    path = out_dir.format(file=regular)
    build = run_cli("build", "--out-dir", path)
    assert build.returncode == 2, build.stderr
    assert f"cannot create directory {path}" in build.stderr, build.stderr
    assert "Traceback" not in build.stderr and "unexpected" not in build.stderr


# --- no clang: every shipped object, from the prebuilt directory ------------------------------

@pytest.fixture
def no_clang(monkeypatch, tmp_path):
    """The engine's no-clang switch, and a PATH without the directories holding a clang."""
    monkeypatch.setenv("EBPFKIT_CLANG", "none")
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))  # no compiled object to find
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not os.path.exists(os.path.join(d, "clang"))]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    features.clear_cache()
    assert not features.probe("clang").supported
    with pytest.raises(NotSupportedError, match="no clang"):  # nothing can be compiled
        ebpfkit.compile(text="char LICENSE[] SEC(\"license\") = \"GPL\";", name="any.bpf.c")
    yield
    features.clear_cache()


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_shipped_object_loads_from_the_prebuilt_dir_and_attaches(program, prebuilt_dir, no_clang,
                                                                        every_program):
    spec = ebpfkit.compile(SOURCES[program])
    assert spec.path == str(prebuilt_dir / f"{program[:-2]}.o")  # loaded from there, not compiled
    if program == "guard.bpf.c":
        from ebpfkit.tools.guard.agent import match_kernel

        match_kernel(spec)  # one of its two inode_setattr programs, the one for this kernel
    if program == "irqoff.bpf.c":
        from ebpfkit.tools.irqoff.session import select_programs

        # as the tool takes them here: no PMU, no preemptirq tracepoints, and the tick this
        # kernel's kallsyms allows (without CONFIG_KALLSYMS_ALL, not the __preempt_count one)
        select_programs(spec, "software")
    if program == "runqslower.bpf.c":
        from ebpfkit.tools.runqslower.session import choose_waking_program

        choose_waking_program(spec)  # the same: its sched_waking reading __preempt_count, or not
    if program == "memleak_kernel.bpf.c":
        from ebpfkit.tools.memleak.kernel import KINDS, select_programs

        select_programs(spec, KINDS)  # not the tracepoints this kernel lacks (kmalloc_node: before 6.1)
    if program == "detect.bpf.c":
        from ebpfkit.tools.detect.session import select_programs

        select_programs(spec, files=True)  # not init_module/finit_module without modules (this host)
    obj, links, refused = every_program(spec)
    assert set(links) | set(refused) == {name for name, prog in spec.programs.items()
                                         if prog.autoload or name in refused}
    for name, reason in refused.items():  # left to the VM test, for a reason the kernel gave
        assert reason.split(":")[0] in ("fentry", "fexit", "lsm", "kprobe"), (name, reason)
    for name, link in links.items():
        if link.is_bpf_link:  # the kernel holds a link running this very program
            assert link_info(link.fd).prog_id == obj.programs[name].info().id, name
    if program != "guard.bpf.c" or features.probe("lsm").supported:
        assert links, f"nothing of {program} attached here: {refused}"
    print(f"{program}: {len(links)} attached, {len(refused)} left to the VM: {sorted(refused)}")
