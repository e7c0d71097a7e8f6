"""Tools as a user's shell, a script and systemd signal them: a tool stops on SIGTERM as on
Ctrl-C (its final histogram printed, exit 0), also where it inherited SIGINT ignored (a
script's background job); and the suite's own children get SIGINT at its default, whatever
disposition the suite was started with (tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import stop

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root")]


def _ignored_signals(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)


def test_children_get_sigint_at_its_default():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not _ignored_signals(child.pid) & (1 << (signal.SIGINT - 1))
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_stops_a_tool_as_ctrl_c_does(sigint):
    """runqlat with no interval prints its one histogram when stopped: on SIGTERM too, even
    with SIGINT ignored, where Ctrl-C could not stop it."""
    def child_setup():
        if sigint == "ignored":
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "runqlat"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=child_setup,
                            env=dict(os.environ, NO_COLOR="1"))
    still_running = True
    try:
        for line in proc.stderr:
            if "Hit Ctrl-C" in line:
                break
        if sigint == "ignored":
            assert _ignored_signals(proc.pid) & (1 << (signal.SIGINT - 1))
            proc.send_signal(signal.SIGINT)
            time.sleep(0.5)
            still_running = proc.poll() is None  # as the shell left it: Ctrl-C does not reach it
        time.sleep(0.5)
    finally:
        out, err = stop(proc, signal.SIGTERM, 60)
    assert still_running
    assert proc.returncode == 0, err
    assert "usecs" in out and "distribution" in out, out
    assert "Traceback" not in err
