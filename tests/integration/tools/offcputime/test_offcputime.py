"""offcputime against the real kernel. A C program built here with frame pointers blocks in a
known function: main calls block_here() 20 times, which sleeps 50 ms each time through
nanosleep_syscall(). The program measures the wall time of those calls itself (clock_gettime
around each), and that is the ground truth: the time it spent off the CPU in them lies inside
those windows, and is all of them but the microseconds each call runs on the CPU.

nanosleep_syscall issues the syscall instruction itself rather than calling libc's
nanosleep(): user stacks unwind through frame pointers, and Debian's libc is built without
them, so libc's clock_nanosleep would hide its caller (the stack would read clock_nanosleep,
main: block_here missing, as it is for libbpf-tools' offcputime too).
On this shared host a sched_switch program misses the odd switch (cpudist's and runqlat's
tests see it too: about one run in five misses one, with no recursion miss counted; the cause
is not established). A missed switch out or in loses that one sleep, so a run may count
MISSED sleeps fewer, and the time bounds allow for the sleeps not counted."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess

import pytest

from helpers import RunningTool, ek, signalled_run_leaves_nothing

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

SLEEPS, SLEEP_MS = 20, 50
# per sleep, the calls around it run on the CPU for microseconds; 1 ms each is generous even
# on this shared two-CPU machine (a preemption in between stays on a block_here stack anyway)
ON_CPU_SLACK_NS = SLEEPS * 1_000_000
MISSED = 1  # sleeps a run may lose to a missed sched_switch (see above)

PROGRAM = r"""
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long nanosleep_syscall(const struct timespec *ts)
{
    long ret;

    __asm__ volatile("syscall" : "=a"(ret) : "0"(SYS_nanosleep), "D"(ts), "S"(0)
                     : "rcx", "r11", "memory");
    return ret;
}

__attribute__((noinline)) void block_here(void)
{
    struct timespec ts = {0, %(ms)d * 1000 * 1000};

    nanosleep_syscall(&ts);
}

static long long now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void)
{
    long long took[%(sleeps)d];
    char c;

    printf("ready\n");
    fflush(stdout);
    if (read(0, &c, 1) != 1)
        return 1;
    for (int i = 0; i < %(sleeps)d; i++) {
        long long start = now_ns();

        block_here();
        took[i] = now_ns() - start;
    }
    printf("done");
    for (int i = 0; i < %(sleeps)d; i++)
        printf(" %%lld", took[i]);
    printf("\n");
    fflush(stdout);
    return read(0, &c, 1) < 0; /* stays until the test closes stdin */
}
""" % {"ms": SLEEP_MS, "sleeps": SLEEPS}


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("offcputime")
    (directory / "blocker.c").write_text(PROGRAM)
    exe = directory / "blocker"
    subprocess.run(["gcc", "-O0", "-fno-omit-frame-pointer", "-o", str(exe), str(directory / "blocker.c")],
                   check=True)
    return str(exe)


class Blocker:
    """The program, started and waiting (in read) for ``run()``."""

    def __init__(self, exe: str):
        self.proc = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._line() == "ready"
        self.pid = self.proc.pid

    def run(self) -> list[int]:
        """Let it sleep its 20 × 50 ms; the ns it measured each to take."""
        self.proc.stdin.write("g")
        self.proc.stdin.flush()
        word, *took = self._line().split()
        assert word == "done" and len(took) == SLEEPS
        return [int(ns) for ns in took]

    def _line(self, timeout: float = 30) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "the program did not answer in time"
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def blocker(program):
    b = Blocker(program)
    try:
        yield b
    finally:
        b.close()


def traced(blocker: Blocker, *args) -> tuple[str, list[int]]:
    """`ebpfkit ARGS -p PID` over the blocker's run: (the tool's stdout, the ns it measured
    each sleep to take)."""
    # a stack map of 8192 buckets: two of the blocker's few stacks sharing the default's 1024
    # would lose every sleep's kernel stack to -EEXIST (likely why a CI run once showed no
    # stack through do_nanosleep)
    tool = RunningTool(*args, "-p", str(blocker.pid), "--stack-storage-size", "8192")
    try:
        took = blocker.run()
        out = tool.stop()
    finally:
        tool.kill()
    assert tool.returncode == 0, tool.stderr
    return out, took


def json_rows(text: str) -> list[dict]:
    (line,) = text.splitlines()
    return json.loads(line)["rows"]


def in_block_here(rows: list[dict]) -> list[dict]:
    return [r for r in rows if "block_here" in r["user_stack"]]


def assert_the_sleeps(total_us: int, took: list[int], counted: int | None = None) -> None:
    """The time counted on block_here's stacks is the time the program measured its sleeps
    to take, less the µs they ran on the CPU (and 1 µs of truncation per row), and less the
    sleeps not ``counted`` (when unknown: the longest MISSED may be)."""
    blocked_ns = sum(took)
    # ~1 s: the kernel sleeps no less; more by the wakeups' delays on this shared machine
    assert SLEEPS * SLEEP_MS * 1_000_000 <= blocked_ns < 1.5e9, took
    if counted is not None:
        assert SLEEPS - MISSED <= counted <= SLEEPS, (counted, took)
    lost = SLEEPS - counted if counted is not None else MISSED
    lost_ns = sum(sorted(took)[len(took) - lost:]) if lost else 0
    assert (blocked_ns - lost_ns - ON_CPU_SLACK_NS) / 1000 <= total_us <= blocked_ns / 1000, \
        (total_us, counted, took)


def test_the_off_cpu_time_is_on_block_heres_stack(blocker):
    out, took = traced(blocker, "--format", "json", "offcputime")
    rows = json_rows(out)
    assert {(r["pid"], r["tid"], r["comm"]) for r in rows} == {(blocker.pid, blocker.pid, "blocker")}
    ours = in_block_here(rows)
    total = sum(r["total_us"] for r in rows)
    assert sum(r["total_us"] for r in ours) >= 0.9 * total, rows
    # each sleep left the CPU in do_nanosleep (a preemption near it, if any, elsewhere)
    sleeps = [r for r in ours if "do_nanosleep" in r["kernel_stack"]]
    assert_the_sleeps(sum(r["total_us"] for r in sleeps), took, sum(r["count"] for r in sleeps))
    assert sum(r["total_us"] for r in ours) <= sum(took) / 1000
    for row in sleeps:  # innermost first: the wrapper, its caller, main; the kernel's sleep
        assert row["user_stack"][:3] == ["nanosleep_syscall", "block_here", "main"], row
        assert row["kernel_stack"][0] == "__schedule", row


FOLDED_LINE = re.compile(r"^(\S[^\n]*) (\d+)$")


def test_folded_output_parses_and_names_block_here(blocker):
    out, took = traced(blocker, "offcputime", "-f")
    lines = out.splitlines()
    assert lines, "no folded line"
    stacks = {}
    for line in lines:
        match = FOLDED_LINE.match(line)
        assert match, f"not 'frames value': {line!r}"
        stacks[tuple(match[1].split(";"))] = int(match[2])
    ours = {frames: us for frames, us in stacks.items() if "block_here" in frames}
    assert sum(ours.values()) >= 0.9 * sum(stacks.values()), stacks
    assert_the_sleeps(sum(ours.values()), took)
    sleeps = [frames for frames in ours if "do_nanosleep" in frames]
    if not sleeps:  # every frame in the message (an assert's would be cut short)
        pytest.fail("no stack through do_nanosleep:\n" + "\n".join(f"{';'.join(f)} {us}" for f, us in ours.items()))
    for frames in sleeps:  # the process, user frames outermost first, "-", kernel frames
        assert frames[0] == "blocker" and frames.count("-") == 1, frames
        user, kernel = frames[1:frames.index("-")], frames[frames.index("-") + 1:]
        assert user[-3:] == ("main", "block_here", "nanosleep_syscall"), frames
        assert kernel[-1] == "__schedule" and "do_nanosleep" in kernel, frames


@pytest.mark.parametrize("only", ["user_stacks_only", "kernel_stacks_only"])
def test_session_with_one_kind_of_stack(blocker, only):
    from ebpfkit.tools import offcputime

    with offcputime.open(pid=blocker.pid, **{only: True}) as session:
        assert session.hook in (offcputime.session.TYPED_HOOK, offcputime.session.RAW_HOOK)
        took = blocker.run()
        entries = session.sample()
    assert entries and all(isinstance(e, offcputime.OffCpu) for e in entries)
    if only == "user_stacks_only":
        assert all(e.kernel_stack == () for e in entries), entries
        ours = [e for e in entries if "block_here" in e.user_stack]
    else:  # no user frame, so block_here is on no stack: the sleeps are do_nanosleep's
        assert all(e.user_stack == () for e in entries), entries
        ours = [e for e in entries if "do_nanosleep" in e.kernel_stack]
    assert_the_sleeps(sum(e.total_us for e in ours), took)  # (a preemption in do_nanosleep is ~µs)


MS = 1_000_000  # ns


@pytest.mark.parametrize("args, counted", [
    # a sleep took 50 ms, plus its wakeup's delay: on this shared machine, a few ms at times
    (["-m", str(SLEEP_MS * 1000 + 10_000)], lambda ns: ns > (SLEEP_MS + 10) * MS),
    (["-M", str(SLEEP_MS * 1000 - 10_000)], lambda ns: ns <= (SLEEP_MS - 10) * MS),
    (["-m", str(SLEEP_MS * 1000 - 10_000)], lambda ns: ns > (SLEEP_MS - 10) * MS),
    (["--state", "1"], lambda ns: True),   # nanosleep sleeps TASK_INTERRUPTIBLE (| TASK_FREEZABLE)
    (["--state", "2"], lambda ns: False),  # TASK_UNINTERRUPTIBLE: not the sleeps
])
def test_filters_count_the_sleeps_or_not(blocker, args, counted):
    """Which sleeps a filter counts, from the times the program measured: a sleep's time off
    the CPU is within the ms below what it measured (the on-CPU slack), so one that took
    less than 1 ms over a threshold may fall either side of it."""
    out, took = traced(blocker, "--format", "json", "offcputime", *args)
    rows = json_rows(out)
    sleeps = [r for r in in_block_here(rows) if "do_nanosleep" in r["kernel_stack"]]
    count = sum(r["count"] for r in sleeps)
    surely = sum(counted(ns) and counted(ns - MS) for ns in took)
    maybe = sum(counted(ns) or counted(ns - MS) for ns in took)
    assert surely - MISSED <= count <= maybe, (count, took, rows)
    if surely == SLEEPS:
        assert_the_sleeps(sum(r["total_us"] for r in sleeps), took, count)


def test_session_with_the_state_of_the_sleeps(blocker):
    """nanosleep leaves the CPU TASK_INTERRUPTIBLE (| TASK_FREEZABLE since 6.1): --state 1."""
    from ebpfkit.tools import offcputime

    with offcputime.open(pid=blocker.pid, state=1) as session:
        took = blocker.run()
        entries = session.sample()
    sleeps = [e for e in entries if "block_here" in e.user_stack and "do_nanosleep" in e.kernel_stack]
    assert_the_sleeps(sum(e.total_us for e in sleeps), took, sum(e.count for e in sleeps))


def test_csv_rows_carry_the_stacks_joined(blocker):
    import csv
    import io

    out, _ = traced(blocker, "--format", "csv", "offcputime")
    rows = list(csv.DictReader(io.StringIO(out)))
    sleeps = [r for r in rows if "block_here" in r["user_stack"].split(";")
              and "do_nanosleep" in r["kernel_stack"].split(";")]
    assert SLEEPS - MISSED <= sum(int(r["count"]) for r in sleeps) <= SLEEPS, rows


def test_stacks_the_map_could_not_keep_are_marked_and_counted(blocker):
    """A stack map of one bucket keeps the first stack it is given; the blocker's others come
    back -EEXIST: their accounts say "[missed ... stack]", and the tool warns how many."""
    tool = RunningTool("--format", "json", "offcputime", "-p", str(blocker.pid), "--stack-storage-size", "1")
    try:
        blocker.run()
        out = tool.stop()
    finally:
        tool.kill()
    rows = json_rows(out)
    missed = [r for r in rows if "[missed kernel stack]" in r["kernel_stack"] or
              "[missed user stack]" in r["user_stack"]]
    assert tool.returncode == 0 and missed, rows
    assert f"{len(missed)} of {len(rows)} accounts lost a stack" in tool.stderr, tool.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_leaves_nothing_attached(sig):
    signalled_run_leaves_nothing(["offcputime", "-p", os.getpid()], sig)


@pytest.mark.parametrize("args, message", [
    (["offcputime", "-u", "-k"], "cannot be combined with kernel_stacks_only"),
    (["offcputime", "-m", "-1"], "must be 0 or more, got -1"),
    (["offcputime", "-m", "100", "-M", "50"], "must be at least 1 and min_block_time (100), got 50"),
    (["offcputime", "--state", "-1"], "must be a task state from 0 to 127"),
    (["offcputime", "--state", "128"], "must be a task state from 0 to 127"),
    (["offcputime", "--stack-storage-size", "0"], "must be greater than 0"),
    (["offcputime", "-p", "0"], "no process with PID 0"),
    (["offcputime", "-t", "0"], "no thread with TID 0"),
    (["offcputime", "0"], "0 is not in the range x>=1"),
    (["offcputime", "abc"], "'abc' is not a valid integer"),
    (["--format", "json", "offcputime", "-f"], "-f/--folded prints text of its own; it does not "
                                               "combine with --format json"),
    (["offcputime", "--bogus"], "No such option"),
])
def test_bad_options_exit_2(capsys, args, message):
    rc, _, err = ek(capsys, *args)
    assert rc == 2 and message in err and "Traceback" not in err, err
