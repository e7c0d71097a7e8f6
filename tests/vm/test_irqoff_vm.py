"""irqoff in VM kernels (6.1 and 6.12, one boot each), against interrupt-off and softirq-off
sections of known length that a test kernel module makes (tests/vm/kmod/irqoff_test.c, built
on the host against each VM kernel's Debian headers before the boot, loaded with insmod):
writing N to /proc/ebpfkit_irqoff_hard spins N ms in local_irq_save()..local_irq_restore(),
to /proc/ebpfkit_irqoff_soft in local_bh_disable()..local_bh_enable(), in the writer's
context. Each writer is a shell of its own pinned to one CPU, so its pid (its only thread)
and its CPU are known.

These VMs have no PMU and no preemptirq tracepoints: irqoff runs in software mode (hrtimer
ticks), the mode tested end to end. One run (-t 20, JSON, into a -f log file rotated at 1K)
sees every section; the tests then check their own part of it."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import RunningTool

pytestmark = [pytest.mark.vm(kernel=["6.1", "6.12"], timeout=1500), pytest.mark.host_kmod]

THRESHOLD_MS = 20
ABOVE = (40, 80)  # ms: reported, each within ±20%
BELOW = (5, 5)    # ms: never reported
CPU = max(os.sched_getaffinity(0))
FUNCTION = {"hard": "irqoff_test_hard", "soft": "irqoff_test_soft"}  # the module's, in the stack
KIND = {"hard": "hardirq", "soft": "softirq"}
TICK_NOTE = "(stack when the tick ran, not the culprit's)"


@pytest.fixture(scope="module")
def irqoff_module(kmod_path):
    release = os.uname().release
    path = kmod_path("irqoff_test", release)
    assert os.path.exists(path), (f"no test module for {release} at {path}: the host builds it before "
                                  f"the boot (tests/vm/conftest.py) against /usr/src/linux-headers-{release}")
    subprocess.run(["insmod", path], check=True, capture_output=True, timeout=120)
    try:
        yield
    finally:
        subprocess.run(["rmmod", "irqoff_test"], check=False, timeout=120)


def section(kind: str, ms: int) -> int:
    """An N-ms section of ``kind`` made by a shell pinned to CPU; the shell's pid (= tid)."""
    proc = subprocess.Popen(["sh", "-c", f"echo {ms} > /proc/ebpfkit_irqoff_{kind}"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {CPU}))
    assert proc.wait(timeout=120) == 0
    return proc.pid


@pytest.fixture(scope="module")
def run(irqoff_module, tmp_path_factory):
    """One irqoff run over every section: (pids by (kind, ms, n), the reported sections, its
    stderr, the log files)."""
    log = tmp_path_factory.mktemp("irqoff") / "irqoff.log"
    tool = RunningTool("irqoff", "-t", str(THRESHOLD_MS), "--format", "json", "-f", str(log),
                       "--log-file-size", "1K", "--log-file-backups", "100")
    try:
        pids = {}
        for kind in ("hard", "soft"):
            for n, ms in enumerate(ABOVE + BELOW):
                time.sleep(0.3)
                pids[kind, ms, n] = section(kind, ms)
        time.sleep(1.0)  # the last tick's event reaches the ring buffer and the file
        tool.stop(signal.SIGINT)
    finally:
        tool.kill()
    assert tool.returncode == 0, tool.stderr
    files = sorted(glob.glob(f"{log}*"))
    events = [json.loads(line) for path in files for line in open(path) if line.strip()]
    return pids, events, tool.stderr, files


def reported(run, kind, ms, n):
    pids, events, _, _ = run
    pid = pids[kind, ms, n]
    return pid, [e for e in events if e["tid"] == pid]


@pytest.mark.parametrize("kind", ["hard", "soft"])
@pytest.mark.parametrize("n, ms", list(enumerate(ABOVE)))
def test_a_section_above_the_threshold_is_reported(run, kind, n, ms):
    pid, mine = reported(run, kind, ms, n)
    assert len(mine) == 1, f"{kind} {ms} ms by {pid}: {mine} (all: {run[1]})"
    event = mine[0]
    assert (event["kind"], event["cpu"], event["comm"], event["pid"]) == (KIND[kind], CPU, "sh", pid), event
    assert 0.8 * ms * 1000 <= event["lat_us"] <= 1.2 * ms * 1000, event
    # hard: the late tick interrupts the module right after local_irq_restore(); soft: the
    # first tick inside the section interrupts its mdelay()
    assert any(frame.startswith(FUNCTION[kind] + "+") for frame in event["stack"]), event
    assert event["stack_note"] == (TICK_NOTE if kind == "hard" else ""), event


@pytest.mark.parametrize("kind", ["hard", "soft"])
def test_sections_below_the_threshold_are_not(run, kind):
    for n, ms in enumerate(BELOW, start=len(ABOVE)):
        pid, mine = reported(run, kind, ms, n)
        assert not mine, f"a {ms} ms {kind} section by {pid} was reported: {mine}"


def test_it_says_its_mode_and_watches_softirqs(run):
    stderr = run[2]
    assert "irqoff mode: software: hrtimer sampling" in stderr, stderr
    assert "not watched" not in stderr, stderr


def test_the_log_file_rotated_and_every_line_is_json(run):
    _, events, _, files = run
    assert len(files) >= 2, files  # the file and at least one rotated one (json.loads read all)
    assert len(events) >= 2 * len(ABOVE), events
