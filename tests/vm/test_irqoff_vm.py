"""irqoff in VM kernels (6.1 and 6.12, one boot each), against interrupt-off and softirq-off
sections that a test kernel module makes (tests/vm/kmod/irqoff_test.c, built on the host
against each VM kernel's Debian headers before the boot, loaded with insmod): writing N to
/proc/ebpfkit_irqoff_hard spins N ms (by ktime) in local_irq_save()..local_irq_restore(), to
/proc/ebpfkit_irqoff_soft in local_bh_disable()..local_bh_enable(), in the writer's context;
reading the file gives how long that section really lasted by the kernel's clock, which is
the ground truth (under TCG the emulated CPU is stalled now and then, so a spin of N ms may
last longer). Each writer is a shell of its
own pinned to one CPU, so its pid (its only thread) and its CPU are known.

These VMs have no PMU and no preemptirq tracepoints: irqoff runs in software mode (hrtimer
ticks), the mode tested end to end. One run (-t 20, JSON, into a -f log file rotated at 1K)
sees every section; the tests then check their own part of it. TCG stalls the guest's CPUs
for 20 ms and more now and then, which irqoff rightly reports as late ticks of whatever ran:
the tests look only at the sections their shell made (its tid, the module's function in the
stack)."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time

import pytest

from helpers import RunningTool

pytestmark = [pytest.mark.vm(kernel=["6.1"], timeout=1500), pytest.mark.host_kmod]

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


def section(kind: str, ms: int) -> tuple[int, float]:
    """An N-ms section of ``kind`` made by a shell pinned to CPU: (the shell's pid (= tid),
    how many ms the section really lasted)."""
    proc = subprocess.Popen(["sh", "-c", f"echo {ms} > /proc/ebpfkit_irqoff_{kind}"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {CPU}))
    assert proc.wait(timeout=120) == 0
    with open(f"/proc/ebpfkit_irqoff_{kind}") as f:
        return proc.pid, int(f.read()) / 1e6


@pytest.fixture(scope="module")
def run(irqoff_module, tmp_path_factory):
    """One irqoff run over every section: ((pid, measured ms) by (kind, ms, n), the reported
    sections, its stderr, the log files)."""
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


def check(run, kind, ms, n) -> str:
    """The section's report against its measured length: reported once, on its CPU and task,
    with its function in the stack and its length within ±20%, when it lasted over 1.2x the
    threshold; not reported when under 0.8x; either way, in between (within a tick of it).
    Which of these it was."""
    (pid, measured_ms), events = run[0][kind, ms, n], run[1]
    mine = [e for e in events if e["tid"] == pid and e["kind"] == KIND[kind]
            and any(frame.startswith(FUNCTION[kind] + "+") for frame in e["stack"])]
    what = f"a {kind} section of {ms} ms (measured {measured_ms:.1f} ms) by {pid}"
    assert len(mine) <= 1, f"{what}: {mine}"
    if measured_ms < 0.8 * THRESHOLD_MS:
        assert not mine, f"{what} was reported: {mine}"
        return "below"
    if not mine:
        assert measured_ms <= 1.2 * THRESHOLD_MS, f"{what} was not reported: {events}"
        return "between"
    event = mine[0]
    assert (event["cpu"], event["comm"], event["pid"]) == (CPU, "sh", pid), f"{what}: {event}"
    assert 0.8 * measured_ms <= event["lat_us"] / 1000 <= 1.2 * measured_ms, f"{what}: {event}"
    # hard: the late tick interrupts the module right after local_irq_restore(); soft: the
    # first tick inside the section interrupts its mdelay()
    assert event["stack_note"] == (TICK_NOTE if kind == "hard" else ""), event
    return "above"


@pytest.mark.parametrize("kind", ["hard", "soft"])
@pytest.mark.parametrize("n, ms", list(enumerate(ABOVE)))
def test_a_section_above_the_threshold_is_reported(run, kind, n, ms):
    assert check(run, kind, ms, n) == "above"


@pytest.mark.parametrize("kind", ["hard", "soft"])
def test_sections_below_the_threshold_are_not(run, kind):
    """Unless the emulated CPU stalled inside one: then it did last longer, and is reported."""
    outcomes = [check(run, kind, ms, n) for n, ms in enumerate(BELOW, start=len(ABOVE))]
    assert "below" in outcomes, outcomes  # at least one of the two really short


def test_it_says_its_mode_and_watches_softirqs(run):
    stderr = run[2]
    assert "irqoff mode: software: hrtimer sampling" in stderr, stderr
    assert "not watched" not in stderr, stderr


def test_the_log_file_rotated_and_every_line_is_json(run):
    _, events, _, files = run
    assert len(files) >= 2, files  # the file and at least one rotated one (json.loads read all)
    assert len(events) >= 2 * len(ABOVE), events
