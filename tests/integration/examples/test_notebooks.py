"""The notebooks in examples/ run headlessly, as a user's Jupyter would run them (nbclient and
an ipykernel of this interpreter), and what their cells computed matches the work each notebook
made itself: the check cell (tagged "check") prints one JSON line, read here, and the plots are
real images. Once the last cell ran, the notebook's kernel holds no BPF program, link or map:
the notebook closed everything itself, not the kernel's exit.

Nothing is written outside a temporary directory: the kernel spec, the connection file,
IPython's and matplotlib's state live there, and the notebooks' outputs are not saved."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from helpers import bpf_objects_held_by

nbformat = pytest.importorskip("nbformat", reason="pip install 'ebpfkit[test,notebook]'")
nbclient = pytest.importorskip("nbclient", reason="pip install 'ebpfkit[test,notebook]'")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
KERNEL = "ebpfkit-test"
CELL_TIMEOUT = 60      # seconds, any one cell
NOTEBOOK_SECONDS = 30  # the whole notebook, kernel start included


def check_engine(check: dict, outputs: list[dict]) -> None:
    """01-engine: the thread's row counts every open the notebook made, and the histogram one
    latency per open; the histogram cell showed the rendered histogram."""
    assert check["opens_made"] >= 100, check
    assert check["opens_counted"] == check["opens_made"], check
    assert check["histogram_total"] == check["opens_made"], check
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("nsecs" in h and "distribution" in h for h in html), "no rendered histogram"


def check_sessions(check: dict, outputs: list[dict]) -> None:
    """02-sessions: for each spinner, the session's waits agree with the kernel's schedstat
    (the tolerances of tests/integration/tools/runqlat), over several samples, and the
    heatmap is an image."""
    assert check["samples"] >= 3, check
    for spinner in check["spinners"]:
        # they really waited for each other (each spun 1 s of CPU on the shared CPU)
        assert spinner["waited_us"] >= 0.5e6, spinner
        assert abs(spinner["waits_seen"] - spinner["runs"]) <= max(2, spinner["runs"] // 100), spinner
        assert (spinner["seen_us_low"] * 0.95 - 100 <= spinner["waited_us"]
                <= spinner["seen_us_high"] * 1.05 + 100), spinner
    assert any("image/png" in o.get("data", {}) for o in outputs), "the heatmap cell drew no image"


CHECKS = {"01-engine.ipynb": check_engine, "02-sessions.ipynb": check_sessions}


def test_every_notebook_is_checked_and_committed_without_outputs():
    """A new notebook gets a check here; a committed one carries no outputs (they would show
    another machine's numbers, and churn every diff)."""
    notebooks = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
    assert notebooks == sorted(CHECKS)
    for name in notebooks:
        nb = nbformat.read(EXAMPLES / name, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), name
        assert sum("check" in c.metadata.get("tags", []) for c in code) == 1, name


@pytest.fixture
def jupyter_home(tmp_path, monkeypatch):
    """A kernel spec for this interpreter, and every Jupyter/IPython/matplotlib directory, in
    tmp_path: nothing lands in ~/.local, ~/.ipython or /usr/local."""
    from ipykernel.kernelspec import install

    for var, sub in [("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("JUPYTER_CONFIG_DIR", "config"), ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl")]:
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    # "user": the JUPYTER_DATA_DIR just set; argv: sys.executable -m ipykernel_launcher
    install(kernel_name=KERNEL, user=True)
    return tmp_path


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root")
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_notebook_computes_what_its_own_work_made(jupyter_home, name):
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    nb = nbformat.read(EXAMPLES / name, as_version=4)
    specs = KernelSpecManager(kernel_dirs=[str(jupyter_home / "data/kernels")])
    assert specs.get_kernel_spec(KERNEL).argv[0] == sys.executable
    # local sockets (in tmp), not TCP ports on a shared machine
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs, transport="ipc",
                       ip=str(jupyter_home / "runtime/kernel"),
                       connection_file=str(jupyter_home / "runtime/kernel.json"))
    work_dir = jupyter_home / "cwd"
    work_dir.mkdir()
    client = nbclient.NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(work_dir)}})
    began = time.monotonic()
    with client.setup_kernel(cleanup_kc=True):  # shut the kernel down at the end
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)  # raises CellExecutionError with the traceback
        kernel_pid = km.provisioner.pid
        assert bpf_objects_held_by(kernel_pid) == set(), "the notebook left BPF objects open"
    seconds = time.monotonic() - began
    assert not km.is_alive()
    if os.environ.get("EBPFKIT_KEEP_NOTEBOOKS"):  # a directory: see what the cells showed
        nbformat.write(nb, Path(os.environ["EBPFKIT_KEEP_NOTEBOOKS"]) / name)
    print(f"{name}: {seconds:.1f} s")

    code = [c for c in nb.cells if c.cell_type == "code"]
    (check_cell,) = [c for c in code if "check" in c.metadata.get("tags", [])]
    printed = "".join(o["text"] for o in check_cell.outputs if o.get("name") == "stdout")
    (line,) = printed.splitlines()
    CHECKS[name](json.loads(line), [o for c in code for o in c.outputs])
    assert seconds < NOTEBOOK_SECONDS, f"{name} took {seconds:.1f} s"
    assert list(work_dir.iterdir()) == [], "the notebook wrote files"
