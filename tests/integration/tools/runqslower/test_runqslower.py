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

from ebpfkit.tools.session import per_cpu_preempt_count
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
    check_sleeper(sleeper_events, truth, pids)


def check_sleeper(events: list[dict], truth: Waited, pids: dict[str, int]) -> None:
    """With MIN_US 0 every wait is reported: as many as schedstat counts switch-ins, adding
    up to its run_delay; those woken by a task name this test, which wrote the bytes."""
    assert abs(len(events) - truth.switched_in) <= 2, (len(events), truth)
    reported = sum(ev["delay_us"] for ev in events)  # each truncated to the µs below
    assert reported <= truth.run_delay_us * 1.05 + 50, (reported, truth)
    assert reported >= truth.run_delay_us * 0.95 - len(events) - 50, (reported, truth)
    by_us = [ev for ev in events if ev["waker_pid"] == os.getpid()]
    assert WAKEUPS - 2 <= len(by_us) <= WAKEUPS + 1, len(by_us)  # the bytes written, and the "q"
    # the others: preempted (no waker), or woken by an interrupt (a fault on an emulated disk),
    # which runqslower names; where it cannot read preempt_count (5.10), the interrupt names
    # the task it came in: one on the sleeper's CPU
    others = [ev for ev in events if ev["waker_pid"] != os.getpid() and (ev["waker_pid"] or ev["waker_comm"])]
    if per_cpu_preempt_count()[0] is not False:
        assert all(ev["waker_comm"] in INTERRUPTS and ev["waker_pid"] == 0 for ev in others), others
    else:
        on_its_cpu = {pids["spinner1"], pids["spinner2"], 0}
        assert all(ev["waker_pid"] in on_its_cpu or ev["waker_comm"].startswith(KERNEL_THREADS)
                   for ev in others), others


KERNEL_THREADS = ("kworker/", "ksoftirqd/", "swapper/")


INTERRUPTS = ("[hardirq]", "[softirq]")
TIMER_SLEEPS = 20


def test_a_timer_wakeup_names_the_interrupt_not_the_task_it_came_in():
    """A sleeper woken by this test once, then only by its timers (nanosleep: an hrtimer, a
    hard interrupt, which comes in whatever task runs there, often the idle one): where the
    kernel lets runqslower read preempt_count, those wakeups name the interrupt, with no pid;
    where it cannot (x86 without CONFIG_KALLSYMS_ALL), the session says so."""
    from ebpfkit.tools import runqslower

    sleeper = pinned_python(f"os.read(0, 1)\nfor _ in range({TIMER_SLEEPS}):\n    time.sleep(0.01)\n", CPU)
    try:
        assert wait_for(lambda: blocked_reading_stdin(sleeper.pid), 60)
        with runqslower.open(min_us=0, pid=sleeper.pid) as session:
            sleeper.stdin.write(b"g")
            sleeper.stdin.flush()
            assert sleeper.wait(timeout=60) == 0
            events = list(session.events(timeout=0.5))
    finally:
        reap(sleeper)
    by_task = [ev.waker_pid for ev in events if ev.waker_pid]
    by_interrupt = [ev for ev in events if ev.waker_comm in INTERRUPTS]
    if session.interrupts_named:
        assert by_task == [os.getpid()], events  # the byte
        assert len(by_interrupt) >= TIMER_SLEEPS - 2, events
        assert {ev.waker_pid for ev in by_interrupt} == {0}
    else:  # each timer names the task it came in (pid 0 when that was the idle task)
        assert os.getpid() in by_task and not by_interrupt, events


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
    check_sleeper([w.to_dict() for w in seen], waited[pids["sleeper"]], pids)


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


def test_finish_stops_tracing_then_hands_out_what_was_buffered():
    """What the CLI does at its end: with every wait reported (MIN_US 0), events keep coming
    as long as the programs run; finish() detaches them first, so it ends, and nothing comes
    after it."""
    from ebpfkit.tools import runqslower

    with runqslower.open(min_us=0) as session:
        time.sleep(0.2)  # this test's own sleep ends in a wait, among the machine's
        events = session.finish()
        assert events and all(isinstance(e, runqslower.Wakeup) for e in events)
        assert session.poll(50) == []
