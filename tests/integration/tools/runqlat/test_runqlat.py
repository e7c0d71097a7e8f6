"""runqlat against the real kernel: two CPU-bound processes pinned to one CPU wait for each
other in its run queue, and the kernel's own account of it (/proc/PID/schedstat: how often
each ran, how long it waited runnable) is the ground truth for the per-process histograms,
in every output format and in the --log file; and for the per-thread, per-PID-namespace,
per-cgroup and per-container ones, and the --cgroup filter, with spinners in a child cgroup
(and a container-named one below it), in threads, in a PID namespace, next to others."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from helpers import (CPU, SPIN_SECONDS, SPINNER, RunningTool, Spinners, Truth, ek, same_config_error, schedstat,
                     signalled_run_leaves_nothing, spin_two_on_one_cpu, traced_while, wait_for, wait_moved_between_cpus)
from outputs import logged

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]


def traced(*args: str) -> tuple[list[Truth], str]:
    """The two spinners, traced by `ebpfkit ARGS`: (ground truth, the tool's stdout)."""
    return traced_while(spin_two_on_one_cpu, *args)


# --- each format, parsed to {pid: {(low, high): count}} --------------------------------------

def from_dicts(histograms: list[dict]) -> dict[int, dict]:
    result = {}
    for h in histograms:
        assert h["unit"] == "usecs" and h["type"] == "log2"
        pid = int(h["label"].split()[2])  # "pid = 1234 python3"
        result[pid] = {(b["low"], b["high"]): b["count"] for b in h["buckets"] if b["count"]}
    return result


def from_json(text: str) -> dict[int, dict]:
    (line,) = text.splitlines()
    return from_dicts(json.loads(line)["histograms"])


def from_csv(text: str) -> dict[int, dict]:
    result: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO(text)):
        assert row["unit"] == "usecs"
        if int(row["count"]):
            pid = int(row["label"].split()[2])
            result.setdefault(pid, {})[(int(row["low"]), int(row["high"]))] = int(row["count"])
    return result


LABEL = re.compile(r"^pid = (\d+) ")
BUCKET = re.compile(r"^\s*(\d+) -> (\d+)\s+: (\d+)\s+\|")


def from_table(text: str) -> dict[int, dict]:
    """BCC's layout: a "pid = N comm" line, a header, then "low -> high : count |***|" lines."""
    result: dict[int, dict] = {}
    current = None
    for line in text.splitlines():
        if (m := LABEL.match(line)):
            current = result.setdefault(int(m[1]), {})
        elif (m := BUCKET.match(line)) and int(m[3]):
            current[(int(m[1]), int(m[2]))] = int(m[3])
    return result


def check_against_schedstat(histograms: dict[int, dict], truths: list[Truth]) -> None:
    for truth in truths:
        buckets = histograms.get(truth.pid)
        assert buckets, f"no histogram for pid {truth.pid}: {sorted(histograms)}"
        # they really waited for each other: each ran while the other was runnable
        assert truth.waited_us >= 0.5 * SPIN_SECONDS * 1e6, truth
        # one wait per time it was switched in (but for a few: a task preempted between
        # setting a sleeping state and schedule() still waits runnable, and runqlat, as
        # BCC's, only sees its state) ...
        assert abs(sum(buckets.values()) - truth.runs) <= max(2, truth.runs // 100), (buckets, truth)
        # ... and the waits, each in [low, high + 1) µs, add up to what the kernel accounted
        least = sum(low * n for (low, _), n in buckets.items())
        most = sum((high + 1) * n for (_, high), n in buckets.items())
        assert least * 0.95 - 100 <= truth.waited_us <= most * 1.05 + 100, (buckets, truth)


@pytest.mark.parametrize("fmt, parse", [("table", from_table), ("json", from_json), ("csv", from_csv)])
def test_per_process_waits_match_the_kernels_account(tmp_path, fmt, parse):
    log = tmp_path / "runqlat.log"
    truths, stdout = traced("--format", fmt, "--log", str(log), "runqlat", "-P")
    check_against_schedstat(parse(stdout), truths)
    (record,) = logged(log, "runqlat")  # the --log file keeps the same result, in every format
    check_against_schedstat(from_dicts(record["histograms"]), truths)


def test_single_histogram_counts_both(tmp_path):
    truths, stdout = traced("--format", "json", "runqlat")
    (histogram,) = json.loads(stdout)["histograms"]
    assert "label" not in histogram
    assert histogram["total"] >= sum(t.runs for t in truths) - 4  # and everything else that ran


@pytest.mark.parametrize("backups", [100, 2])
def test_log_rotation_keeps_the_newest_results_whole(tmp_path, backups):
    """A small --log-size rotates the file many times: the files kept hold the newest
    results, in order, none lost in between (all of them when there are backups enough)."""
    log = tmp_path / "runqlat.log"
    intervals = 30
    result = subprocess.run([sys.executable, "-m", "ebpfkit", "--format", "json", "--log", str(log),
                             "--log-size", "2K", "--log-backup", str(backups), "runqlat", "-P",
                             "0.05", str(intervals)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(printed) == intervals
    files = sorted(tmp_path.iterdir(), key=lambda p: int(p.suffix[1:]) if p.suffix != ".log" else 0,
                   reverse=True)  # oldest first
    kept = [r for path in files for r in logged(path, "runqlat")]
    if backups >= intervals:
        assert len(files) > 2 and kept == printed
    else:
        assert len(files) == backups + 1
        assert 0 < len(kept) < intervals and kept == printed[-len(kept):]


# --- the session, as a notebook or the exporter uses it ----------------------------------------

def from_histograms(histograms) -> dict[int, dict]:
    """Session results (Log2Histogram objects) as {pid: {(low, high): count}}."""
    return from_dicts([h.to_dict() for h in histograms if h.label])


def test_session_sees_the_waits_the_kernel_accounted():
    from ebpfkit.tools import runqlat

    with runqlat.open(per_process=True) as session:
        assert session.hook in (runqlat.session.TYPED_HOOK, runqlat.session.RAW_HOOK)
        truths = spin_two_on_one_cpu()
        check_against_schedstat(from_histograms(session.sample()), truths)
        # a sample drains what it read: the spinners, gone since, are not in the next one
        assert not set(from_histograms(session.sample())) & {t.pid for t in truths}


def test_session_for_one_pid_sees_only_it():
    """Config(pid=...) is checked when built (the process must exist), so the session opens
    once the spinners exist and before they spin."""
    from contextlib import contextmanager

    from ebpfkit.tools import runqlat

    seen, before = {}, []

    @contextmanager
    def traced_only_first(pids):
        with runqlat.open(runqlat.Config(per_process=True, pid=pids[0])) as session:
            # schedstat counts from the process's birth, the session from its open: what it
            # ran before (its interpreter's start-up, long on a busy machine) is not compared
            assert wait_for(lambda: sleeping(pids[0], pids[0]))  # on stdin, waiting to go
            before.append(schedstat(pids[0]))
            yield
            seen.update(from_histograms(session.sample()))

    truths = spin_two_on_one_cpu(ready=traced_only_first)
    assert set(seen) == {truths[0].pid}, seen
    traced = truths[0].since(before[0])
    waits = sum(seen[truths[0].pid].values())
    # each wait counted ends in a run; a few runs follow no wait runqlat sees (a task
    # preempted while setting a sleeping state, more of them on a loaded machine)
    assert traced.runs - max(5, traced.runs // 20) <= waits <= traced.runs, (seen, traced)


def test_a_wait_moved_to_another_cpu_counts_from_its_first_queue():
    """A wait behind a SCHED_FIFO spinner, then moved to the other CPU, where the task runs at
    once: the histogram holds that one wait whole (~60 ms), not the µs of its second queue.
    (runqlat notes where a task's wait starts when it gets a CPU: the first wait of a task it
    has not yet seen run is known only from its current queue; the sleeper has run once.)"""
    from contextlib import contextmanager

    from ebpfkit.tools import runqlat

    hists = []

    @contextmanager
    def tracing(pid):
        with runqlat.open(pid=pid) as session:
            yield
            hists.extend(session.sample())

    truth_us, until_moved_us = wait_moved_between_cpus(tracing, held_ms=60)
    (hist,) = hists
    assert hist.total >= 2, hist.buckets()  # woken twice (and maybe preempted, on a busy machine)
    long_waits = [b for b in hist.buckets() if b["count"] and b["low"] >= 32768]
    assert len(long_waits) == 1 and long_waits[0]["count"] == 1, (hist.buckets(), truth_us)
    assert long_waits[0]["low"] <= truth_us <= long_waits[0]["high"], (long_waits, truth_us, until_moved_us)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_leaves_nothing_attached(sig):
    signalled_run_leaves_nothing(["runqlat", "--by", "cgroup", "1"], sig)


def test_a_bad_value_is_the_same_error_from_cli_yaml_and_notebook():
    from ebpfkit.errors import ConfigError
    from ebpfkit.tools import runqlat

    gone = _a_pid_that_does_not_exist()
    with pytest.raises(ConfigError) as from_kwargs:
        runqlat.open(pid=gone)
    with pytest.raises(ConfigError) as from_yaml:
        runqlat.Config.from_mapping({"pid": gone, "per-process": True})
    assert str(from_kwargs.value) == str(from_yaml.value) == f"pid: no process with PID {gone}"
    assert from_kwargs.value.exit_code == 2
    cli = subprocess.run([sys.executable, "-m", "ebpfkit", "runqlat", "-p", str(gone), "1", "1"],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2, cli.stderr
    assert f"'--pid': no process with PID {gone}" in cli.stderr and "Traceback" not in cli.stderr
    with pytest.raises(ConfigError, match="per_process: expected bool, got str 'yes'"):
        runqlat.Config.from_mapping({"per_process": "yes"})
    with pytest.raises(ConfigError, match="unknown setting; known ones: milliseconds, per_process, pid, "
                                          "per_thread, per_pidns, by, cgroup"):
        runqlat.Config.from_mapping({"interval": 1})


def _a_pid_that_does_not_exist() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(proc.stdout)  # reaped: gone (a reuse this soon would need 4 million forks)


# --- grouped and filtered: -L, --pidnss, --by cgroup|container, -c ----------------------------

def spin_traced(args, *groups) -> tuple[list[list[Truth]], dict]:
    """Spinner groups (started, waiting to go) spun together on CPU while `ebpfkit --format
    json ARGS` traces: what the kernel accounted for each spinner while traced (per group),
    and the tool's histograms as {label: {(low, high): count}}. The groups are closed."""
    try:
        tool = RunningTool("--format", "json", *args)
        try:
            before = [[schedstat(pid) for pid in group.pids] for group in groups]  # they sleep on stdin
            for group in groups:
                group.go()
            after = [group.done() for group in groups]
            stdout = tool.stop()
            assert tool.returncode == 0, tool.stderr
        finally:
            tool.kill()
    finally:
        for group in groups:
            group.close()
    return [[a.since(b) for a, b in zip(*pair)] for pair in zip(after, before)], labelled(stdout)


def traced_until_parked(args, tids, go, parked, pid=None) -> tuple[list[Truth], dict]:
    """`ebpfkit --format json ARGS` traces while ``go()`` sets the sleeping threads ``tids``
    (of process ``pid``; None: each its own process) to work and ``parked()`` (true) waits
    until they are done and sleep again: what the kernel accounted for each in that time,
    and the tool's histograms by label."""
    tool = RunningTool("--format", "json", *args)
    try:
        before = [schedstat(tid) for tid in tids]
        go()
        assert parked()
        assert wait_for(lambda: all(sleeping(pid or tid, tid) for tid in tids))
        truths = [schedstat(tid).since(b) for tid, b in zip(tids, before)]
        stdout = tool.stop()
        assert tool.returncode == 0, tool.stderr
    finally:
        tool.kill()
    return truths, labelled(stdout)


def sleeping(pid: int, tid: int) -> bool:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def say(proc, line: str) -> None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def labelled(stdout: str) -> dict:
    (line,) = stdout.splitlines()
    return {h.get("label"): {(b["low"], b["high"]): b["count"] for b in h["buckets"] if b["count"]}
            for h in json.loads(line)["histograms"]}


def by_pid(histograms: dict) -> dict[int, dict]:
    """{pid or tid: buckets} of "pid = N comm" / "tid = N comm" labels."""
    return {int(label.split()[2]): buckets for label, buckets in histograms.items()}


def together(truths: list[Truth]) -> Truth:
    """Several tasks' account as one (what a histogram of their cgroup holds)."""
    return Truth(0, sum(t.runs for t in truths), sum(t.waited_us for t in truths))


def cgroup_label(cgroup) -> str:
    from ebpfkit.sysinfo.cgroups import cgroup2_mount

    return "cgroup = /" + os.path.relpath(cgroup.path, cgroup2_mount())


def test_cgroup_filter_sees_exactly_the_cgroups_tasks(child_cgroup):
    """Two spinners in the test's cgroup, one outside on the same CPU: -P -c shows the two,
    each with the waits the kernel accounted, and not the third (which waited as much)."""
    inside, outside = Spinners(2, launch=child_cgroup.popen), Spinners(1)
    pids = inside.pids
    (truths, other), histograms = spin_traced(["runqlat", "-P", "-c", child_cgroup.path], inside, outside)
    assert set(by_pid(histograms)) == set(pids), histograms
    check_against_schedstat(by_pid(histograms), truths)
    assert other[0].runs > 20, other  # it ran (and waited) among them, unseen


# Reads WAKEUPS bytes from stdin one at a time (a sleep and a wakeup each), says "read", and
# parks on the next read until stdin closes.
WAKEUPS = 100
READER = f"""
import os, sys
print("ready", flush=True)
for _ in range({WAKEUPS}):
    os.read(0, 1)
print("read", flush=True)
os.read(0, 1)
"""


def test_cgroup_filter_judges_the_woken_task_not_its_waker(child_cgroup):
    """A reader in the test's cgroup woken WAKEUPS times by this process, outside it (the
    wakeup hooks run in the waker's context): each of its waits is counted."""
    reader = child_cgroup.popen([sys.executable, "-c", READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert reader.stdout.readline() == b"ready\n"

        def wake():
            for _ in range(WAKEUPS):
                os.write(reader.stdin.fileno(), b"x")
                time.sleep(0.002)  # it reads it and sleeps again

        (truth,), histograms = traced_until_parked(["runqlat", "-P", "-c", child_cgroup.path], [reader.pid],
                                                   wake, lambda: reader.stdout.readline() == b"read\n")
        histograms = by_pid(histograms)
    finally:
        reader.stdin.close()
        assert reader.wait(timeout=10) == 0
    assert set(histograms) == {reader.pid}, histograms
    assert truth.runs >= WAKEUPS // 2, truth  # woken (often) rather than finding each byte there
    assert abs(sum(histograms[reader.pid].values()) - truth.runs) <= 2, (histograms, truth)


def test_by_cgroup_gives_the_test_cgroup_its_tasks_waits(child_cgroup):
    inside, outside = Spinners(2, launch=child_cgroup.popen), Spinners(1)
    (truths, (other,)), histograms = spin_traced(["runqlat", "--by", "cgroup"], inside, outside)
    check_against_schedstat({0: histograms[cgroup_label(child_cgroup)]}, [together(truths)])
    # the outside spinner's waits are the root cgroup's (with the rest of the machine's)
    assert sum(histograms["cgroup = /"].values()) >= other.runs - max(2, other.runs // 100), histograms


def test_by_container_groups_a_containers_cgroup_apart(child_cgroup):
    """A cgroup named as docker names a container's, below the test's: --by container -c
    gives its spinners one row (the container's short id) and the spinner of the test's own
    cgroup (no container) another, nothing else."""
    from ebpfkit.net import ChildCgroup

    container_id = "3f2a9c0e1b7d4c5a8e6f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
    with ChildCgroup(parent=child_cgroup.path, name=f"docker-{container_id}.scope") as container:
        inside, beside = Spinners(2, launch=container.popen), Spinners(1, launch=child_cgroup.popen)
        (truths, other), histograms = spin_traced(["runqlat", "--by", "container", "-c", child_cgroup.path],
                                                  inside, beside)
    assert set(histograms) == {f"container = {container_id[:12]}", "no container"}, histograms
    check_against_schedstat({0: histograms[f"container = {container_id[:12]}"]}, [together(truths)])
    check_against_schedstat({0: histograms["no container"]}, [together(other)])


# Two threads of one process, pinned to CPU, spin (hashlib releases the GIL, so both really
# want the CPU) and park: it prints their tids, spins them on "go", prints "spun" once both
# are parked, and exits on the next line.
THREADS = f"""
import hashlib, os, sys, threading, time
os.sched_setaffinity(0, {{{CPU}}})
go, leave, parked, tids = threading.Event(), threading.Event(), threading.Semaphore(0), []
data = bytes(1 << 16)

def spin():
    tids.append(threading.get_native_id())
    go.wait()
    end = time.thread_time() + {SPIN_SECONDS}
    while time.thread_time() < end:
        hashlib.sha256(data)
    parked.release()
    leave.wait()

threads = [threading.Thread(target=spin) for _ in range(2)]
for t in threads:
    t.start()
while len(tids) < 2:
    time.sleep(0.01)
print(*tids, flush=True)
sys.stdin.readline()
go.set()
parked.acquire()
parked.acquire()
print("spun", flush=True)
sys.stdin.readline()
leave.set()
"""


def test_per_thread_histograms_hold_each_threads_waits():
    proc = subprocess.Popen([sys.executable, "-c", THREADS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        tids = [int(t) for t in proc.stdout.readline().split()]
        truths, histograms = traced_until_parked(["runqlat", "-L", "-p", str(proc.pid)], tids, lambda: say(proc, "go"),
                                                 lambda: proc.stdout.readline() == "spun\n", pid=proc.pid)
        histograms = by_pid(histograms)
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    assert set(tids) <= set(histograms) <= {*tids, proc.pid}, histograms
    check_against_schedstat(histograms, truths)


def test_pidnss_gives_a_pid_namespace_its_own_histogram():
    """A spinner alone in a new PID namespace (unshare --pid --fork), one in ours: the new
    namespace's histogram holds the waits of that spinner, ours those of the other."""
    code = "import os; print(os.readlink('/proc/self'), flush=True)\n" + SPINNER + "\nprint('spun', flush=True)\n" \
           "sys.stdin.readline()\n"  # its pid as we see it first; parked once it spun
    alone = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", code],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ours = Spinners(1)
    try:
        pid = int(alone.stdout.readline())
        namespace = os.readlink(f"/proc/{pid}/ns/pid")  # pid:[INODE]
        assert namespace != os.readlink("/proc/self/ns/pid")

        def go():
            (spinner,) = ours.pids
            assert wait_for(lambda: sleeping(spinner, spinner))  # its start-up's waits are not compared
            before.append(schedstat(spinner))
            say(alone, "go")
            ours.go()

        def parked():
            other.extend(truth.since(before[0]) for truth in ours.done())
            return alone.stdout.readline() == "spun\n"

        before, other = [], []
        (truth,), histograms = traced_until_parked(["runqlat", "--pidnss"], [pid], go, parked)
    finally:
        ours.close()
        alone.stdin.close()
        assert alone.wait(timeout=10) == 0
    inode = lambda link: link.split("[")[1].rstrip("]")  # noqa: E731
    check_against_schedstat({0: histograms[f"pidns = {inode(namespace)}"]}, [together([truth])])
    host = histograms[f"pidns = {inode(os.readlink('/proc/self/ns/pid'))}"]
    # ours holds our spinner's waits (less the few runqlat cannot see) and every other task's
    assert sum(host.values()) >= other[0].runs - max(5, other[0].runs // 20), (histograms, other[0])


@pytest.mark.parametrize("args, option, message", [
    (["-P", "-L"], "'-L' / '--tids'", "cannot be combined with per_process"),
    (["-L", "--pidnss"], "'--pidnss'", "cannot be combined with per_thread"),
    (["-P", "--by", "cgroup"], "'--by'", "cannot be combined with per_process"),
    (["--pidnss", "--by", "container"], "'--by'", "cannot be combined with per_pidns"),
    (["--by", "pod"], "'--by'", "'pod' is not one of 'cgroup', 'container'"),
    (["-c", "/proc"], "'-c' / '--cgroup'", "/proc is not a cgroup v2 directory (it is on proc filesystem)"),
    (["-c", "/sys/fs/cgroup/ebpfkit-none"], "'-c' / '--cgroup'", "cgroup /sys/fs/cgroup/ebpfkit-none does not exist"),
])
def test_clashing_or_bad_options_exit_2_with_the_reason(capsys, args, option, message):
    rc, _, err = ek(capsys, "runqlat", *args, "1", "1")
    assert rc == 2 and f"Invalid value for {option}: {message}" in err, err


def test_a_bad_grouping_is_the_same_error_from_cli_yaml_and_notebook(capsys):
    from ebpfkit.errors import ConfigError
    from ebpfkit.tools import runqlat

    same_config_error(capsys, runqlat.Config, {"per_thread": True, "per_process": True},
                      ["runqlat", "-P", "-L", "1", "1"], "'-L' / '--tids'", "cannot be combined with per_process")
    with pytest.raises(ConfigError, match="by: 'pod' is not one of cgroup, container"):
        runqlat.Config.from_mapping({"by": "pod"})  # the CLI's --by is a click.Choice (the case above)
