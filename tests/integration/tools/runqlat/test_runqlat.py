"""runqlat against the real kernel: two CPU-bound processes pinned to one CPU wait for each
other in its run queue, and the kernel's own account of it (/proc/PID/schedstat: how often
each ran, how long it waited runnable) is the ground truth for the per-process histograms,
in every output format and in the --log file."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest

from helpers import SPIN_SECONDS, RunningTool, Truth, spin_two_on_one_cpu
from outputs import logged

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]


def traced(*args: str) -> tuple[list[Truth], str]:
    """The two spinners, traced by `ebpfkit ARGS`: (ground truth, the tool's stdout)."""
    tool = RunningTool(*args)
    try:
        truths = spin_two_on_one_cpu()
        stdout = tool.stop()
        assert tool.returncode == 0, tool.stderr
        return truths, stdout
    finally:
        tool.kill()


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

    seen = {}

    @contextmanager
    def traced_only_first(pids):
        with runqlat.open(runqlat.Config(per_process=True, pid=pids[0])) as session:
            yield
            seen.update(from_histograms(session.sample()))

    truths = spin_two_on_one_cpu(ready=traced_only_first)
    assert set(seen) == {truths[0].pid}, seen
    # schedstat counts from the process's birth, the session from its open: a few runs of
    # the interpreter's start-up are the kernel's alone
    waits = sum(seen[truths[0].pid].values())
    assert truths[0].runs - 20 <= waits <= truths[0].runs, (seen, truths[0])


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
    with pytest.raises(ConfigError, match="unknown setting; known ones: milliseconds, per_process, pid"):
        runqlat.Config.from_mapping({"interval": 1})


def _a_pid_that_does_not_exist() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(proc.stdout)  # reaped: gone (a reuse this soon would need 4 million forks)
