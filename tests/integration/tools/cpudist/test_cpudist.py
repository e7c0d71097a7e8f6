"""cpudist against the real kernel. A process pinned to one CPU runs a worker thread that
alternates BUSY of CPU time and SLEEP asleep, ROUNDS times. It runs SCHED_FIFO, so that no
ordinary task on this shared machine cuts a busy stretch into slices: each one is a single
time on CPU, and each sleep a single time off it. The test knows those lengths, the worker's
tid (not its pid) and, from the kernel's own account of the thread (/proc/PID/task/TID/
schedstat: its time on CPU, how often it was switched in), what the tool must have seen.

On this shared host a sched_switch program misses the odd switch: one run in four to six of
these (~80 switches each) has a program see one switch in of the worker fewer than schedstat
counts, with no recursion miss counted and its map updates all successful (runqlat's tests on
main show the same); the cause is not established. Each missed switch costs at most one time
on (or off) CPU, so counts may fall short by MISSED and sums by MISSED stretches."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from helpers import ek, pinned_python, reap, signalled_run_leaves_nothing, traced_while, wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

CPU = max(os.sched_getaffinity(0))
ROUNDS = 40
BUSY = 0.010   # s of CPU time per round
SLEEP = 0.010  # s asleep per round
MISSED = 2  # switches a run may miss (see above)
MS_BUCKET = (8, 15)        # where 10 ms falls in msecs (log2: 8 -> 15)
US_BUCKET = (8192, 16383)  # and in usecs

# The worker says its tid, waits for a byte, does its rounds, says "done" and blocks again
# until its stdin closes; the main thread only waits for it (asleep all along).
WORKLOAD = f"""
import threading
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # the worker inherits it

def work():
    print(threading.get_native_id(), flush=True)
    os.read(0, 1)
    for _ in range({ROUNDS}):
        end = time.thread_time() + {BUSY}
        while time.thread_time() < end:
            pass
        time.sleep({SLEEP})
    print("done", flush=True)
    os.read(0, 1)

worker = threading.Thread(target=work)
worker.start()
worker.join()
"""


@dataclass
class Truth:
    pid: int
    tid: int           # the worker's
    on_cpu_ns: int     # the worker's time on CPU while traced (schedstat)
    switched_in: int   # and how often it got the CPU
    elapsed_ns: int    # from "go" to "done", wall clock


@contextmanager
def workload():
    """The pinned workload, started and waiting: yields ``run()``, which does the rounds and
    returns the Truth."""
    proc = pinned_python(WORKLOAD, CPU, stdout=subprocess.PIPE)
    try:
        tid = int(proc.stdout.readline())
        schedstat = f"/proc/{proc.pid}/task/{tid}/schedstat"
        # asleep in its first read() before any tracing starts: on a busy machine it could
        # still be on its way there, and its time off CPU would then begin before "go"
        assert wait_for(lambda: _state(proc.pid, tid) == "S"), _state(proc.pid, tid)

        def run() -> Truth:
            on0, _, runs0 = _read(schedstat)
            start = time.monotonic_ns()
            proc.stdin.write(b"g")
            proc.stdin.flush()
            assert proc.stdout.readline() == b"done\n"
            elapsed = time.monotonic_ns() - start
            # blocked in read() again (it may still be on its way there): every slice has ended
            assert wait_for(lambda: _state(proc.pid, tid) == "S"), _state(proc.pid, tid)
            on1, _, runs1 = _read(schedstat)
            return Truth(proc.pid, tid, on1 - on0, runs1 - runs0, elapsed)

        yield proc.pid, run
    finally:
        reap(proc)


def _state(pid: int, tid: int) -> str:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _read(path: str) -> tuple[int, int, int]:
    with open(path) as f:
        on_cpu, run_delay, pcount = map(int, f.read().split())
    return on_cpu, run_delay, pcount


def traced(*options: str, fmt: str = "json") -> tuple[Truth, str]:
    """The workload under `ebpfkit --format FMT cpudist OPTIONS -p PID`: (truth, stdout)."""
    with workload() as (pid, run):
        return traced_while(run, "--format", fmt, "cpudist", *options, "-p", str(pid))


def from_json(text: str) -> dict[str | None, dict]:
    """{label: {(low, high): count}} of the one result cpudist printed at Ctrl-C."""
    (line,) = text.splitlines()
    result = {}
    for h in json.loads(line)["histograms"]:
        result[h.get("label")] = {(b["low"], b["high"]): b["count"] for b in h["buckets"] if b["count"]}
    return result


def from_csv(text: str) -> dict[str | None, dict]:
    result: dict[str | None, dict] = {}
    for row in csv.DictReader(io.StringIO(text)):
        if int(row["count"]):
            result.setdefault(row["label"] or None, {})[(int(row["low"]), int(row["high"]))] = int(row["count"])
    return result


def mode(buckets: dict) -> tuple[int, int]:
    return max(buckets, key=buckets.get)


def keys(histograms: dict, kind: str) -> set[int]:
    """The ids the labels name ("tid = 1234 python3" -> 1234), all of ``kind``."""
    assert all(label.split()[0] == kind for label in histograms), histograms
    return {int(label.split()[2]) for label in histograms}


@pytest.mark.parametrize("unit_option, bucket, fmt, parse", [
    ("-m", MS_BUCKET, "json", from_json), (None, US_BUCKET, "csv", from_csv)])
def test_on_cpu_times_of_a_thread_are_its_busy_stretches(unit_option, bucket, fmt, parse):
    truth, out = traced("-L", *([unit_option] if unit_option else []), fmt=fmt)
    histograms = parse(out)
    assert keys(histograms, "tid") == {truth.tid} != {truth.pid}, histograms  # the main thread never ran
    (buckets,) = histograms.values()
    assert mode(buckets) == bucket, buckets
    assert buckets[bucket] >= 0.8 * ROUNDS, buckets
    # one time on CPU per switch in the kernel counted, each ended by its switch out
    assert truth.switched_in - MISSED <= sum(buckets.values()) <= truth.switched_in, (buckets, truth)


def test_off_cpu_times_of_a_process_are_its_sleeps():
    truth, out = traced("-O", "-P", "-m")
    histograms = from_json(out)
    assert keys(histograms, "pid") == {truth.pid}, histograms
    buckets = histograms[next(iter(histograms))]
    assert mode(buckets) == MS_BUCKET, buckets
    # every sleep but the last, ended while traced (the block before "go" began before the
    # tool and the one after "done" has not ended), and hardly anything else
    assert ROUNDS - MISSED <= buckets[MS_BUCKET] <= sum(buckets.values()) <= truth.switched_in, (buckets, truth)


def test_one_histogram_without_p_or_l_holds_the_thread_and_only_the_process_traced():
    truth, out = traced("-m")
    (label, buckets), = from_json(out).items()
    assert label is None and mode(buckets) == MS_BUCKET, buckets
    assert truth.switched_in - MISSED <= sum(buckets.values()) <= truth.switched_in, (buckets, truth)


def test_session_on_and_off_cpu_sum_to_the_kernels_account():
    """The session, as a notebook uses it: on CPU, the times of the worker add up to the time
    schedstat says it ran; off CPU, to its sleeps (at least SLEEP each, and less than the
    whole run)."""
    from ebpfkit.histogram import Log2Histogram
    from ebpfkit.tools import cpudist

    with workload() as (pid, run), \
            cpudist.open(pid=pid, per_thread=True) as on, cpudist.open(pid=pid, offcpu=True) as off:
        assert on.hook in (cpudist.session.TYPED_HOOK, cpudist.session.RAW_HOOK)
        truth = run()
        (on_cpu,), (off_cpu,) = on.sample(), off.sample()
    assert isinstance(on_cpu, Log2Histogram) and on_cpu.unit == "usecs"
    assert on_cpu.label.startswith(f"tid = {truth.tid} "), on_cpu.label
    missed = truth.switched_in - on_cpu.total
    assert 0 <= missed <= MISSED, (on_cpu, truth)
    # the sum is schedstat's but for the stretches missed (schedstat's clock runs a little
    # ahead); and schedstat runs on the task clock, which leaves out what the hypervisor stole
    # (PARAVIRT_TIME_ACCOUNTING, as here): CI once saw the switches' clock 3% over it
    assert truth.on_cpu_ns - missed * (BUSY + 0.001) * 1e9 - 0.02 * truth.on_cpu_ns - 1e6 \
        <= on_cpu.sum * 1000 <= 1.05 * truth.on_cpu_ns + 1e6, (on_cpu.sum, truth)
    assert off_cpu.label is None
    sleeps_us = off_cpu.sum
    # the bound takes the session's own time on CPU: it and elapsed_ns are CLOCK_MONOTONIC, as
    # the programs' clock is; schedstat's runs ~0.25% ahead here, a millisecond over this run
    assert (ROUNDS - MISSED) * SLEEP * 1e6 <= sleeps_us <= truth.elapsed_ns / 1000 - on_cpu.sum + 1000, \
        (sleeps_us, on_cpu.sum, truth)


def test_raw_tracepoint_fallback_sees_the_same(monkeypatch):
    """Where the kernel has no BTF of its own the session loads its raw_tp program instead:
    forced here, it sees the busy stretches as the tp_btf one does."""
    from ebpfkit.tools import cpudist
    from ebpfkit.tools import session as tool_sessions

    def raw_only(spec, typed_maps=(), raw_maps=()):
        for prog in spec.programs.values():
            prog.autoload = prog.section.startswith("raw_tp/")
        return False

    monkeypatch.setattr(tool_sessions, "choose_typed_tracepoints", raw_only)
    with workload() as (pid, run), cpudist.open(pid=pid, milliseconds=True) as session:
        assert session.hook == cpudist.session.RAW_HOOK
        truth = run()
        (hist,) = session.sample()
    assert hist.bounds(hist.counts.index(max(hist.counts))) == MS_BUCKET, hist.counts
    assert truth.switched_in - MISSED <= hist.total <= truth.switched_in, (hist.counts, truth)


def test_a_sample_drains():
    from ebpfkit.tools import cpudist

    with workload() as (pid, run), cpudist.open(pid=pid, per_process=True) as session:
        run()
        first = session.sample()
        assert [h.label.split()[:3] for h in first] == [["pid", "=", str(pid)]], first
        second = session.sample()  # the worker is blocked since: nothing new
    assert [h.total for h in second] == [0] and second[0].label is None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_leaves_nothing_attached(sig):
    signalled_run_leaves_nothing(["cpudist", "-O", "1"], sig)


@pytest.mark.parametrize("args, message", [
    (["-P", "-L"], "Invalid value for '-L' / '--per-thread': cannot be combined with per_process"),
    (["-p", "0"], "no process with PID 0"),
    (["0"], "0 is not in the range x>=0.01"),
    (["1", "0"], "0 is not in the range x>=1"),
    (["--bogus"], "No such option"),
])
def test_bad_options_exit_2(capsys, args, message):
    rc, _, err = ek(capsys, "cpudist", *args)
    assert rc == 2 and message in err and "Traceback" not in err, err
