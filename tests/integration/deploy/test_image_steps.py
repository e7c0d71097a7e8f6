"""deploy/Containerfile's install steps, run outside a container (this machine has no container
runtime, and no registry to pull debian:bookworm from): scripts/image.sh builds the wheels from
the build context the Containerfile copies, installs them into a fresh venv with no index, and
that venv runs `ebpfkit doctor` and a real tool with no clang: the wheel carries the prebuilt
CO-RE objects. (The builder stage's first step, scripts/setup.sh, is the README's install that
made this machine's .venv; it relinks /usr/local/bin/ebpfkit, so it is not run again here.)"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ebpfkit
from ebpfkit.engine.prebuilt import program_sources

pytestmark = pytest.mark.integration

ROOT = Path(ebpfkit.__file__).resolve().parents[1]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"


def build_context(dest: Path) -> Path:
    """The repository as `COPY . .` sees it: .containerignore's patterns left out."""
    patterns = [line.strip().removeprefix("**/").rstrip("/") for line in
                (ROOT / ".containerignore").read_text().splitlines() if line.strip() and not line.startswith("#")]
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(*patterns), symlinks=True)
    return dest


def image_step(context: Path, *args: str, **env: str) -> str:
    run = subprocess.run(["bash", str(context / "scripts" / "image.sh"), *args], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, **env))
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_the_containerfile_runs_the_readme_install_then_image_sh():
    runs = [line.split(None, 1)[1] for line in CONTAINERFILE.read_text().splitlines() if line.startswith("RUN ")]
    assert runs[0] == "bash scripts/setup.sh && bash scripts/image.sh wheels /wheels", runs
    assert runs[1].startswith("bash /usr/local/share/ebpfkit/scripts/image.sh install /tmp/wheels /opt/ebpfkit"), runs
    assert "ENV PATH=/opt/ebpfkit/bin:$PATH" in CONTAINERFILE.read_text()


def test_runtime_packages_are_part_of_the_readme_install_and_have_no_clang():
    listed = subprocess.run(["bash", "-c", f'source {ROOT}/scripts/packages.sh; echo "${{runtime_packages[@]}}"; '
                                           f'echo "${{build_packages[@]}}"'],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    runtime, build = listed[0].split(), listed[1].split()
    assert "libbpf1" in runtime and "python3" in runtime
    assert not any(p.startswith(("clang", "llvm", "gcc")) for p in runtime), runtime
    assert "clang" in build
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert 'packages=("${runtime_packages[@]}" "${build_packages[@]}")' in setup


def test_image_steps_build_a_wheel_that_runs_without_clang(tmp_path):
    context = build_context(tmp_path / "context")
    assert not list(context.rglob("*.bpf.o")), "the build context carries no objects: the build makes them"
    wheels = tmp_path / "wheels"
    # the builder's step; PYTHON is the venv scripts/setup.sh made (.venv/bin/python in the image)
    out = image_step(context, "wheels", str(wheels), PYTHON=sys.executable)
    assert f"a prebuilt CO-RE object for each of {len(program_sources())} programs" in out, out

    venv = tmp_path / "opt-ebpfkit"
    out = image_step(context, "install", str(wheels), str(venv))
    assert f"ready: ebpfkit, version {ebpfkit.__version__}" in out, out

    # no clang anywhere the engine looks (EBPFKIT_CLANG=none also stops the /usr/lib/llvm-*/bin search)
    path = [str(venv / "bin")] + [d for d in os.environ["PATH"].split(os.pathsep)
                                  if d and not os.path.exists(os.path.join(d, "clang"))]
    env = dict(os.environ, PATH=os.pathsep.join(path), EBPFKIT_CLANG="none",
               EBPFKIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTHONPATH", None)
    assert shutil.which("clang", path=env["PATH"]) is None
    site = next((venv / "lib").glob("python3*/site-packages"))
    prebuilt = site / "ebpfkit" / "programs" / "prebuilt"

    doctor = subprocess.run(["ebpfkit", "--format", "json", "doctor"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=120)
    assert doctor.returncode == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    n = len(program_sources())
    assert report["features"]["clang"]["status"] == "unsupported"
    assert f"{n} of {n} prebuilt, in {prebuilt}" in report["features"]["clang"]["reason"], report["features"]["clang"]
    assert report["tools"]["runqlat"]["runs"] is True

    runqlat = subprocess.run(["ebpfkit", "-v", "--format", "json", "runqlat", "0.3", "1"], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=120)
    assert runqlat.returncode == 0, runqlat.stderr
    assert f"using the prebuilt CO-RE object {prebuilt / 'runqlat.bpf.o'}" in runqlat.stderr, runqlat.stderr
    result = json.loads(runqlat.stdout.strip().splitlines()[-1])
    assert sum(bucket["count"] for bucket in result["histograms"][0]["buckets"]) > 0, result  # the scheduler ran
