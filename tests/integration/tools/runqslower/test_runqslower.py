"""runqslower against the real kernel. Two spinners pinned to one CPU keep its run queue busy;
a third task pinned there sleeps in read() on a pipe and is woken by this test writing a
byte. The kernel's own account of each task (/proc/PID/schedstat: the time it waited runnable,
how often it was switched in) is the ground truth for the waits the tool reports, and the
test, which writes, is the waker."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pytest

from helpers import (RunningTool, blocked_reading_stdin, bpf_objects_held_by, ek, pinned_python, reap,
                     schedstat_fields, spinner_code, still_in_kernel, wait_for, wait_moved_between_cpus)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

CPU = max(os.sched_getaffinity(0))
SPIN_SECONDS = 1.5
WAKEUPS = 40
WAKE_EVERY = 0.02  # s: the sleeper is asleep again well before the next byte

SLEEPER = """
while os.read(0, 1) == b"w":
    pass
"""


@dataclass
class Waited:
    """What schedstat says a task waited in the run queue while the workload ran."""
    pid: int
    run_delay_us: float
    switched_in: int


def run_workload(started=None) -> tuple[dict[str, int], dict[int, Waited]]:
    """Spin two tasks on CPU and wake the sleeper there WAKEUPS times; the pids by role, and
    each one's run-queue waits from its schedstat (from just before it starts to its exit,
    read from the zombie). ``started(pids)`` runs once all exist, before they run."""
    with ExitStack() as stack:
        procs = {"spinner1": pinned_python(spinner_code(SPIN_SECONDS), CPU),
                 "spinner2": pinned_python(spinner_code(SPIN_SECONDS), CPU),
                 "sleeper": pinned_python(SLEEPER, CPU)}
        for proc in procs.values():
            stack.callback(reap, proc)
        pids = {role: p.pid for role, p in procs.items()}
        # each interpreter started and blocked in its read() (a slow machine's start-up waits
        # would otherwise fall between the tool's start and the schedstat baseline)
        assert wait_for(lambda: all(blocked_reading_stdin(pid) for pid in pids.values()), 60)
        if started:
            stack.enter_context(started(pids))
        before = {p.pid: schedstat_fields(p.pid) for p in procs.values()}
        for proc in procs.values():
            proc.stdin.write(b"w" if proc is procs["sleeper"] else b"g")
            proc.stdin.flush()
        for _ in range(WAKEUPS - 1):
            time.sleep(WAKE_EVERY)
            procs["sleeper"].stdin.write(b"w")
            procs["sleeper"].stdin.flush()
        procs["sleeper"].stdin.write(b"q")
        procs["sleeper"].stdin.flush()
        waited = {}
        for proc in procs.values():
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            _, delay, runs = schedstat_fields(proc.pid)
            _, delay0, runs0 = before[proc.pid]
            waited[proc.pid] = Waited(proc.pid, (delay - delay0) / 1000, runs - runs0)
    return pids, waited


def traced(*args: str) -> tuple[dict[str, int], dict[int, Waited], str]:
    """The workload under `ebpfkit ARGS`, started once the workload's processes are blocked
    (their start-up waits, seconds of them under emulation, are before schedstat's baseline
    and must not be reported either): (pids, schedstat's waits, the tool's stdout)."""
    out = []

    @contextmanager
    def running(pids):
        tool = RunningTool(*args)
        try:
            yield
            out.append(tool.stop())
        finally:
            tool.kill()

    pids, waited = run_workload(started=running)
    return pids, waited, out[0]


def from_json(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def from_csv(text: str) -> list[dict]:
    return [{k: (int(v) if v.isdigit() else v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]


@pytest.mark.parametrize("fmt, parse", [("json", from_json), ("csv", from_csv)])
def test_waits_over_min_us_name_the_spinners_with_the_kernels_delays(fmt, parse):
    min_us = 1000  # a spinner waits a whole slice of the other (ms) each time it is preempted
    pids, waited, out = traced("--format", fmt, "runqslower", str(min_us), "-P")
    events = parse(out)
    assert events, "no event at all"
    assert all(ev["delay_us"] >= min_us for ev in events)
    for role in ("spinner1", "spinner2"):
        truth = waited[pids[role]]
        ours = [ev for ev in events if ev["pid"] == pids[role]]
        assert ours, f"no event for {role} {pids[role]}"
        assert all(ev["tid"] == ev["pid"] for ev in ours)
        # on CPU, but for its very first wait (when forked, before the child pinned itself)
        assert sum(ev["cpu"] != CPU for ev in ours) <= 1, [(ev["cpu"], ev["delay_us"]) for ev in ours]
        reported = sum(ev["delay_us"] for ev in ours)
        # the waits reported are some of those the kernel counted (those >= min_us) ...
        assert reported <= truth.run_delay_us * 1.05 + 1000, (reported, truth)
        # ... and most of its waiting time: a spinner waits in slices of milliseconds
        assert reported >= truth.run_delay_us * 0.5, (reported, truth)
    # -P: the task replaced on the CPU is named (a spinner got the CPU from one of ours, mostly)
    assert any(ev["prev_tid"] in pids.values() for ev in events if ev["pid"] in pids.values())


def test_pid_filter_reports_exactly_that_process_and_its_waker():
    sleeper_events: list[dict] = []


    @contextmanager
    def trace_sleeper(pids):
        tool = RunningTool("--format", "json", "runqslower", "0", "-p", str(pids["sleeper"]))
        try:
            yield
            sleeper_events.extend(from_json(tool.stop()))
        finally:
            tool.kill()

    pids, waited = run_workload(started=trace_sleeper)
    truth = waited[pids["sleeper"]]
    assert sleeper_events and {ev["pid"] for ev in sleeper_events} == {pids["sleeper"]}
    check_sleeper(sleeper_events, truth)


def check_sleeper(events: list[dict], truth: Waited) -> None:
    """With MIN_US 0 every wait is reported: as many as schedstat counts switch-ins, adding
    up to its run_delay; those woken name this test, which wrote the bytes, as the waker."""
    assert abs(len(events) - truth.switched_in) <= 2, (len(events), truth)
    reported = sum(ev["delay_us"] for ev in events)  # each truncated to the µs below
    assert reported <= truth.run_delay_us * 1.05 + 50, (reported, truth)
    assert reported >= truth.run_delay_us * 0.95 - len(events) - 50, (reported, truth)
    woken = [ev for ev in events if ev["waker_pid"]]
    assert {ev["waker_pid"] for ev in woken} == {os.getpid()}, woken
    assert WAKEUPS - 2 <= len(woken) <= WAKEUPS + 1, len(woken)  # the bytes written, and the "q"


def test_session_for_one_thread():
    """The session, as a notebook uses it, with -t's setting: only that thread's waits."""

    from ebpfkit.tools import runqslower

    seen: list = []

    @contextmanager
    def trace_sleeper(pids):
        with runqslower.open(min_us=0, tid=pids["sleeper"]) as session:
            assert session.hook in (runqslower.session.TYPED_HOOK, runqslower.session.RAW_HOOK)
            yield
            seen.extend(session.events(timeout=0.5))
            assert session.lost == 0

    pids, waited = run_workload(started=trace_sleeper)
    assert seen and all(isinstance(w, runqslower.Wakeup) for w in seen)
    assert {w.tid for w in seen} == {pids["sleeper"]}
    assert all(abs(w.time - time.time()) < 60 for w in seen)  # wall-clock time
    check_sleeper([w.to_dict() for w in seen], waited[pids["sleeper"]])


def test_a_wait_moved_to_another_cpu_counts_from_its_first_queue():
    """A wait behind a SCHED_FIFO spinner, then moved to the other CPU, where the task runs at
    once: its one wait is the time from the wakeup to the move, not the µs in its second queue."""
    from ebpfkit.tools import runqslower

    waits = []

    @contextmanager
    def tracing(pid):
        with runqslower.open(min_us=40000, pid=pid) as session:
            yield
            waits.extend(session.events(timeout=0.5))

    truth_us, until_moved_us = wait_moved_between_cpus(tracing, held_ms=60)
    assert len(waits) == 1, waits
    wait = waits[0]
    assert wait.cpu == min(os.sched_getaffinity(0)) and wait.waker_pid == os.getpid()
    assert 55000 <= wait.delay_us <= until_moved_us + 1000, (wait, until_moved_us)
    assert abs(wait.delay_us - truth_us) <= 200, (wait.delay_us, truth_us)


def test_min_us_far_above_every_wait_reports_nothing():
    _, waited, out = traced("--format", "json", "runqslower", "10000000")
    assert max(w.run_delay_us for w in waited.values()) > 1000  # there were waits
    assert out == ""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 0), (signal.SIGTERM, 0),
                                       (signal.SIGKILL, -signal.SIGKILL)])
def test_a_signal_leaves_nothing_attached(sig, code):
    tool = RunningTool("runqslower", "100000")
    try:
        held = bpf_objects_held_by(tool.pid)
        # sched_waking, sched_wakeup_new, sched_switch
        assert sum(kind == "link" for kind, _ in held) == 3, held
        tool.stop(sig)
    finally:
        tool.kill()
    assert tool.returncode == code, tool.stderr
    assert "Traceback" not in tool.stderr
    assert still_in_kernel(held) == set()


@pytest.mark.parametrize("args, message", [
    (["-5"], "No such option"),
    (["abc"], "'abc' is not a valid integer"),
    (["-t", "0"], "no thread with TID 0"),
    (["-p", "0"], "no process with PID 0"),
    (["--bogus"], "No such option"),
])
def test_bad_options_exit_2(capsys, args, message):
    rc, _, err = ek(capsys, "runqslower", *args)
    assert rc == 2 and message in err and "Traceback" not in err, err
