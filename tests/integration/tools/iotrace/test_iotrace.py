"""iotrace against the real kernel: record while this process does O_DIRECT IO of known
size and count on a fresh ext4 loop filesystem, then check the report against what was done.
The recorder runs as `python -m ebpfkit` in a child process (it ignores its own IO), stopped
with SIGINT as a user's Ctrl-C would."""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from outputs import csv_tables, logged

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

SIZE = 64 * 1024  # below the loop device's max request size: one block request per write
COUNT = 16


def ebpfkit(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ebpfkit", *args], capture_output=True, text=True,
                          timeout=120, **kw)


class Recorder:
    """`ebpfkit iotrace record` in a child process; started when its file has a header."""

    def __init__(self, path, *args: str, global_options=()):
        self.path = path
        self.proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", *global_options, "iotrace", "record",
                                      "-o", str(path), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def __enter__(self):
        deadline = time.monotonic() + 60
        while not (self.path.exists() and self.path.stat().st_size > 0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the recorder did not start: {self.proc.returncode}\n{self.stderr}")
            time.sleep(0.05)
        return self

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.stdout, self.stderr = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, self.stderr = self.proc.communicate()
        return self.proc.returncode

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()  # the kernel drops its links with its fds
            self.proc.communicate()


def aligned_buffer(size: int, fill: bytes = b"x") -> mmap.mmap:
    buf = mmap.mmap(-1, size)  # page aligned, as O_DIRECT wants
    buf.write(fill * size)
    return buf


def report_json(path, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["iotrace", "report", str(path), "--format", "json", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def assert_my_writes(processes: list[dict]) -> None:
    """This process's row of the per-process view (from any output form): COUNT writes of
    SIZE bytes, each joined to its block request."""
    me = [p for p in processes if int(p["pid"]) == os.getpid()]
    assert len(me) == 1, processes
    assert [int(me[0][k]) for k in ("syscalls", "write_bytes", "joined")] == [COUNT, COUNT * SIZE, COUNT]


def assert_stages_ordered(lifecycle: dict) -> None:
    for rq in lifecycle["requests"]:
        times = [rq[k] for k in ("queue_ns", "insert_ns", "issue_ns", "complete_ns") if rq[k] is not None]
        assert times == sorted(times), rq
        assert rq["issue_ns"] is not None and rq["complete_ns"] is not None, rq
        if lifecycle["enter_ns"] is not None:
            assert lifecycle["enter_ns"] <= times[0] and rq["complete_ns"] <= lifecycle["exit_ns"], lifecycle


def test_direct_writes_are_joined_per_request(ext4_loop, tmp_path):
    record = tmp_path / "w.iot"
    target = ext4_loop.mountpoint / "direct.dat"
    buf = aligned_buffer(SIZE)
    log = tmp_path / "record.log"
    with Recorder(record, "--disk", ext4_loop.name, "--format", "json",
                  global_options=["--log", str(log)]) as rec:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            for _ in range(COUNT):
                assert os.write(fd, buf) == SIZE
        finally:
            os.close(fd)  # closed before the recorder ends: it must still find the file's extents
        assert rec.stop() == 0, rec.stderr
    assert "Traceback" not in rec.stderr
    recorded = json.loads(rec.stdout)  # record's summary, in the format asked for
    assert recorded["file"] == str(record) and recorded["lost"] == 0
    assert recorded["syscalls"] >= COUNT and recorded["block_events"] >= 3 * COUNT  # queue, issue, complete (insert: not always)
    (kept,) = logged(log, "iotrace.record")
    assert kept.pop("time") and kept == recorded

    doc = report_json(record, "--top", "0")
    summary = doc["summary"]
    assert summary["lost"] == 0 and not summary["truncated"]
    assert summary["syscalls"] == recorded["syscalls"]
    assert_my_writes(doc["processes"])

    # each write is one lifecycle (the others of this pid: ext4 reading its metadata)
    mine = [lc for lc in doc["slowest"] if lc["pid"] == os.getpid() and lc["syscall"]]
    assert len(mine) == COUNT
    for lc in mine:
        assert lc["syscall"] == "write" and lc["direct"] and lc["bytes"] == SIZE
        assert lc["block_bytes"] == SIZE  # the join found exactly this write's sectors
        assert lc["file"]["path"] == str(target)
        assert all(lc["stages_us"][s] is not None for s in ("syscall", "S2Q", "Q2D", "D2C", "C2R"))
    for lc in doc["slowest"]:  # every request of the disk, also the filesystem's own
        assert_stages_ordered(lc)
    assert summary["direct_syscalls"] == COUNT and summary["direct_joined"] == COUNT

    stages = {s["stage"]: s for s in doc["stages"]}
    assert stages["syscall"]["count"] == COUNT and stages["S2Q"]["count"] == COUNT
    for s in stages.values():
        if s["count"]:
            assert s["p50"] <= s["p99"] <= s["max"]

    # the same per-process truth in CSV, in the table, and in the --log file of either
    log = tmp_path / "report.log"
    result = CliRunner().invoke(cli, ["--log", str(log), "iotrace", "report", str(record), "--format", "csv"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (processes,) = [t for t in csv_tables(result.stdout) if t and "q2c_avg_us" in t[0]]
    assert_my_writes(processes)
    (kept,) = logged(log, "iotrace.report")
    assert_my_writes(kept["processes"])

    table = CliRunner().invoke(cli, ["--no-color", "iotrace", "report", str(record)], catch_exceptions=False)
    assert table.exit_code == 0
    assert "Per-layer latency" in table.output and "Slowest" in table.output and "Per process" in table.output
    per_process = table.output.split("Per process")[1].splitlines()
    rows = [line.split() for line in per_process if line.split()[:1] == [str(os.getpid())]]
    assert_my_writes([{"pid": r[0], "syscalls": r[2], "write_bytes": r[4], "joined": r[6]} for r in rows])


def test_pid_filter_and_direct_reads(ext4_loop, tmp_path):
    """-p: only the target's syscalls and block requests; O_DIRECT preads join too."""
    data = ext4_loop.mountpoint / "read.dat"
    buf = aligned_buffer(SIZE, b"r")
    fd = os.open(data, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    for _ in range(COUNT):
        os.write(fd, buf)
    os.fsync(fd)
    os.close(fd)
    reader = subprocess.Popen([sys.executable, "-c", f"""
import mmap, os, sys
sys.stdin.readline()
buf = mmap.mmap(-1, {SIZE})
fd = os.open({str(data)!r}, os.O_RDONLY | os.O_DIRECT)
for i in range({COUNT}):
    assert os.preadv(fd, [buf], i * {SIZE}) == {SIZE}
os.close(fd)
"""], stdin=subprocess.PIPE, text=True)
    record = tmp_path / "r.iot"
    try:
        with Recorder(record, "-p", str(reader.pid), "--disk", ext4_loop.name, "--format", "csv") as rec:
            reader.communicate("go\n", timeout=60)
            assert reader.returncode == 0
            # IO of another process meanwhile must not be recorded
            with open(ext4_loop.mountpoint / "other", "wb") as f:
                f.write(b"o" * 4096)
                os.fsync(f.fileno())
            assert rec.stop() == 0, rec.stderr
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()

    (summary,) = csv_tables(rec.stdout)[0]  # record's summary as CSV: only the reader's syscalls
    assert summary["file"] == str(record) and int(summary["syscalls"]) == COUNT and summary["lost"] == "0"

    doc = report_json(record, "--top", "0")
    assert {p["pid"] for p in doc["processes"]} == {reader.pid}
    (proc,) = doc["processes"]
    assert proc["read_bytes"] == COUNT * SIZE and proc["joined"] == COUNT
    reads = [lc for lc in doc["slowest"] if lc["syscall"] in ("preadv", "preadv2")]  # Python: preadv2
    assert len(reads) == COUNT
    assert sorted(lc["offset"] for lc in reads) == [i * SIZE for i in range(COUNT)]
    for lc in reads:
        assert lc["op"] == "R" and lc["block_bytes"] == SIZE
        assert_stages_ordered(lc)


def test_record_rejects_bad_input(tmp_path):
    out = tmp_path / "x.iot"
    for args, expect in [(["-p", "999999999"], "no process with PID"),
                         (["--disk", "no-such-disk"], "no block device 'no-such-disk'"),
                         (["--duration", "0"], "--duration")]:
        result = ebpfkit("iotrace", "record", "-o", str(out), *args)
        assert result.returncode == 2, result.stderr
        assert expect in result.stderr and "Traceback" not in result.stderr
        assert not out.exists()
    result = ebpfkit("iotrace", "record", "-o", str(tmp_path / "no" / "dir" / "x.iot"), "--duration", "1")
    assert result.returncode == 2 and "cannot write" in result.stderr, result.stderr


def test_report_rejects_unreadable_and_corrupt_files(tmp_path):
    cases = {"missing.iot": None, "random.iot": os.urandom(512), "empty.iot": b"",
             "other.iot": b'{"type": "header", "format": "something-else", "version": 1}\n'}
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        result = ebpfkit("iotrace", "report", str(path))
        assert result.returncode == 2, (name, result.stderr)
        assert "Traceback" not in result.stderr and "Error:" in result.stderr, result.stderr
    result = ebpfkit("iotrace", "report", str(tmp_path))
    assert result.returncode == 2 and "directory" in result.stderr


def test_a_session_records_and_reports_without_the_cli(ext4_loop, tmp_path):
    """As a notebook uses it: record a child's COUNT O_DIRECT writes of SIZE bytes with
    iotrace.open(...).record() until the child is done, then iotrace.report(): the child's
    row holds exactly those writes, each joined to its block request."""
    from ebpfkit.tools import iotrace

    target = ext4_loop.mountpoint / "session.dat"
    writer = subprocess.Popen([sys.executable, "-c", f"""
import mmap, os, sys
sys.stdin.readline()
buf = mmap.mmap(-1, {SIZE})
buf.write(b"s" * {SIZE})
fd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
for _ in range({COUNT}):
    assert os.write(fd, buf) == {SIZE}
os.close(fd)
"""], stdin=subprocess.PIPE, text=True)
    record = tmp_path / "session.iot"

    def go():
        writer.stdin.write("go\n")
        writer.stdin.close()

    try:
        with iotrace.open(record_file=str(record), pid=writer.pid, disk=ext4_loop.name) as session:
            summary = session.record(stopped=lambda: writer.poll() is not None, started=go)
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait()
    assert writer.returncode == 0
    assert summary.file == str(record) and summary.lost == 0 and summary.dropped_syscalls == 0
    assert summary.syscalls == COUNT and summary.files_mapped == 1
    result = iotrace.report(record_file=str(record), top=0)
    assert not result.recording.truncated and result.summary["syscalls"] == COUNT
    (proc,) = result.processes
    assert proc["pid"] == writer.pid
    assert [proc[k] for k in ("syscalls", "write_bytes", "joined")] == [COUNT, COUNT * SIZE, COUNT]
    writes = [lc for lc in result.slowest if lc["syscall"] == "write"]
    assert len(writes) == COUNT and all(lc["block_bytes"] == SIZE for lc in writes)


def test_a_session_that_cannot_write_its_file_says_so_and_detaches(tmp_path):
    from ebpfkit.errors import ConfigError
    from ebpfkit.tools import iotrace

    path = tmp_path / "no" / "dir" / "x.iot"
    with iotrace.open(record_file=str(path), duration=1) as session:
        with pytest.raises(ConfigError) as exc:
            session.record()
    assert exc.value.field == "record_file" and f"cannot write {path}" in exc.value.reason
    assert not path.exists()
