"""iofsstat against the real kernel, checked against ground truth the test creates: an ext4
filesystem on a fresh loop device, processes that write and read known amounts to known files
(one several directories deep, one under a bind mount), a cgroup named like a Docker scope,
and /proc/diskstats read around the tool's own reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager

import pytest

from ebpfkit.engine import features
from ebpfkit.net import ChildCgroup
from ebpfkit.sysinfo.diskstats import read_diskstats
from ebpfkit.tools import iofsstat
from outputs import csv_tables, logged

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

MIB = 1 << 20
WRITE_MIB, READ_MIB = 8, 6
CONTAINER_ID = "c0ffee0123456789abcdef0123456789abcdef0123456789abcdef0123456789"

# A process that, for each line on stdin, writes WRITE_MIB MiB to argv[1] (then fsyncs, so the
# block writes happen in its own context) and reads READ_MIB MiB from argv[2], then says "done".
WORKLOAD = f"""
import os, sys
out, inp = sys.argv[1:3]
chunk = b"\\xab" * {MIB}
for _ in sys.stdin:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range({WRITE_MIB}):
        assert os.write(fd, chunk) == {MIB}
    os.fsync(fd)
    os.close(fd)
    fd = os.open(inp, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # so the reads reach the disk
    left = {READ_MIB * MIB}
    while left:
        got = len(os.read(fd, min(left, {MIB})))
        assert got, "short file"
        left -= got
    os.close(fd)
    print("done", flush=True)
"""


class Files:
    """The test's files on the loop filesystem: one written 5 directories deep, one read through
    a bind mount (a second mount point) of another directory."""

    def __init__(self, loop, tag: str):
        mnt = loop.mountpoint
        self.write_dir = mnt / tag / "d1" / "d2" / "d3" / "d4"
        self.write_dir.mkdir(parents=True)
        self.written = self.write_dir / "written.bin"
        src = mnt / f"{tag}-src"
        src.mkdir()
        with open(src / "input.bin", "wb") as f:
            f.write(os.urandom(READ_MIB * MIB))
            os.fsync(f.fileno())
        self.bind = mnt / tag / "m1" / "m2" / "bound"
        self.bind.mkdir(parents=True)
        subprocess.run(["mount", "--bind", str(src), str(self.bind)], check=True)
        self.read = self.bind / "input.bin"

    def close(self):
        subprocess.run(["umount", str(self.bind)], check=False)


@contextmanager
def made_files(loop, tag="w"):
    files = Files(loop, tag)
    try:
        yield files
    finally:
        files.close()


class Workload:
    """WORKLOAD in a child process (optionally started inside a cgroup directory)."""

    def __init__(self, files: Files, cgroup: str | None = None):
        argv = [sys.executable, "-c", WORKLOAD, str(files.written), str(files.read)]
        if cgroup:  # join the cgroup first, then exec: every IO of the process is inside it
            argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup, *argv]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        self.files = files

    def round(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    @property
    def comm(self) -> str:
        with open(f"/proc/{self.pid}/comm") as f:
            return f.read().strip()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@contextmanager
def workload(files, cgroup=None):
    w = Workload(files, cgroup)
    try:
        yield w
    finally:
        try:
            w.close()
        except Exception:
            w.proc.kill()
            w.proc.wait()


@pytest.fixture(autouse=True)
def kernel_has_bpf_loop(request):
    """iofsstat walks a file's path with bpf_loop (5.17): on a kernel without it each test of what
    it counts is skipped, naming why, and test_without_bpf_loop_it_exits_3_naming_it runs instead."""
    if request.node.name.startswith("test_without_bpf_loop"):
        return
    probe = features.probe("bpf_loop")
    if not probe.supported:
        pytest.skip(f"iofsstat needs bpf_loop (5.17), which this kernel lacks ({probe.reason}): "
                    "test_without_bpf_loop_it_exits_3_naming_it checks what it says instead")


@pytest.fixture
def tool(iofsstat_run):
    """tool(*ARGS, fmt=, log=): a context manager running iofsstat ARGS at 0.3 s intervals."""
    @contextmanager
    def start(*args, **kwargs):
        t = iofsstat_run(*args, **kwargs)
        try:
            yield t
        finally:
            t.kill()
    return start


def rows(intervals, view):
    return [r for i in intervals for r in i[view]]


def totals(intervals, pid, path):
    """Sums over the intervals of the file rows of (pid, path)."""
    mine = [r for r in rows(intervals, "files") if r["pid"] == pid and r["path"] == str(path)]
    return mine, {k: sum(r[k] for r in mine) for k in ("reads", "writes", "read_bytes", "write_bytes")}


def within(value, expected, tolerance=0.02):
    return abs(value - expected) <= expected * tolerance


# --- tests -------------------------------------------------------------------------------

def check_process_files(views: dict, w: Workload, files: Files, loop) -> None:
    """``views``: the rows of every interval, per view ("files", "disks", "disk_processes"),
    against what the workload did: WRITE_MIB MiB written to one file, READ_MIB read from
    another (through a bind mount), on the loop device only."""
    written, read = os.stat(files.written), os.stat(files.read)

    def mine(path):
        rows = [r for r in views["files"] if r["pid"] == w.pid and r["path"] == os.path.realpath(path)]
        assert rows, f"no row for {path}: {views['files']}"
        return rows, {k: sum(r[k] for r in rows) for k in ("reads", "writes", "read_bytes", "write_bytes")}

    rows_w, sums_w = mine(files.written)
    assert {r["comm"] for r in rows_w} == {w.comm}
    assert {r["inode"] for r in rows_w} == {written.st_ino}
    assert {r["device"] for r in rows_w} == {loop.name}
    assert {r["dev"] for r in rows_w} == {f"{loop.major}:{loop.minor}"}
    assert within(sums_w["write_bytes"], WRITE_MIB * MIB), sums_w
    assert sums_w["writes"] == WRITE_MIB and sums_w["read_bytes"] == 0

    rows_r, sums_r = mine(files.read)  # across the bind mount
    assert {r["inode"] for r in rows_r} == {read.st_ino}
    assert within(sums_r["read_bytes"], READ_MIB * MIB), sums_r
    assert sums_r["write_bytes"] == 0
    assert all(r["container"] is None for r in rows_w + rows_r)
    # --disk: only files on the loop device, and its disk row
    assert {r["device"] for r in views["files"]} == {loop.name}
    assert {d["disk"] for d in views["disks"]} == {loop.name}

    # the same IO seen at the block layer, in the workload's own context (fsync, reads)
    bio = [r for r in views["disk_processes"] if r["pid"] == w.pid]
    assert bio and {r["disk"] for r in bio} == {loop.name}
    assert sum(r["write_bytes"] for r in bio) >= WRITE_MIB * MIB * 0.98
    assert sum(r["read_bytes"] for r in bio) >= READ_MIB * MIB * 0.98


def json_views(intervals: list[dict]) -> dict:
    return {view: rows(intervals, view) for view in ("files", "disks", "disk_processes")}


def csv_views(text: str) -> dict:
    """iofsstat's CSV: each view's rows under its own header line, told apart by their
    columns; numbers back to numbers, empty cells to None."""
    headers = {"path": "files", "util": "disks", "container": "disk_processes"}
    views: dict = {view: [] for view in headers.values()}
    for table in csv_tables(text):
        for row in table:
            view = next(v for key, v in headers.items() if key in row)
            views[view].append({k: _cell(v) for k, v in row.items()})
    return views


def _cell(text: str):
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def test_files_full_paths_inodes_and_bytes_of_a_process(ext4_loop, tool, tmp_path):
    log = tmp_path / "iofsstat.log"
    with made_files(ext4_loop) as files, workload(files) as w:
        with tool("--disk", ext4_loop.name, log=log) as t:
            w.round()
            intervals = t.stop()
        # -v says which: fexit where the kernel runs it (not the 6.18 here), else the tracepoints
        fexit = features.probe("fexit").supported
        said = "file IO hook: " + ("fexit vfs_read/vfs_write" if fexit else "syscall exit tracepoints")
        assert said in "".join(t.stderr)
        check_process_files(json_views(intervals), w, files, ext4_loop)
        kept = logged(log, "iofsstat")  # what was printed (and an interval SIGTERM cut short)
        assert kept[:len(intervals)] == intervals and len(kept) - len(intervals) <= 1


def test_csv_and_table_carry_the_same_files(ext4_loop, tool, tmp_path):
    with made_files(ext4_loop) as files, workload(files) as w:
        with tool("--disk", ext4_loop.name, fmt="csv", log=tmp_path / "csv.log") as t:
            w.round()
            kept = t.stop()
        check_process_files(csv_views("".join(t.stdout)), w, files, ext4_loop)
        check_process_files(json_views(kept), w, files, ext4_loop)

        with tool("--disk", ext4_loop.name, fmt="table", log=tmp_path / "table.log") as t:
            w.round()
            kept = t.stop()
        check_process_files(json_views(kept), w, files, ext4_loop)
        # the table for people: the workload's file rows, their write and read counts
        table = "".join(t.stdout)
        counts = {"written.bin": [0, 0], "input.bin": [0, 0]}
        for line in table.splitlines():
            cells = line.split()
            if len(cells) > 8 and cells[1] == str(w.pid) and cells[-1].rsplit("/", 1)[-1] in counts:
                counts[cells[-1].rsplit("/", 1)[-1]][0] += int(cells[2])  # READS
                counts[cells[-1].rsplit("/", 1)[-1]][1] += int(cells[4])  # WRITES
        assert counts["written.bin"] == [0, WRITE_MIB], table
        assert counts["input.bin"][0] >= READ_MIB and counts["input.bin"][1] == 0, table


def test_container_and_pid_filters(ext4_loop, tool):
    with ExitStack() as stack:
        parent = stack.enter_context(ChildCgroup("iofsstat"))
        scope = os.path.join(parent.path, "system.slice", f"docker-{CONTAINER_ID}.scope")
        os.makedirs(scope)  # removed with the parent (children first), also on failure
        inside = stack.enter_context(workload(stack.enter_context(made_files(ext4_loop, "in")), scope))
        outside = stack.enter_context(workload(stack.enter_context(made_files(ext4_loop, "out"))))
        short = CONTAINER_ID[:12]

        with tool("--container", short[:8]) as t:
            inside.round()
            outside.round()
            intervals = t.stop()
        seen = rows(intervals, "files") + rows(intervals, "disk_processes")
        assert seen and {r["pid"] for r in seen} == {inside.pid}
        assert {r["container"] for r in seen} == {short}
        _, sums = totals(intervals, inside.pid, os.path.realpath(inside.files.written))
        assert within(sums["write_bytes"], WRITE_MIB * MIB)

        with tool("-p", str(outside.pid)) as t:
            inside.round()
            outside.round()
            intervals = t.stop()
        seen = rows(intervals, "files") + rows(intervals, "disk_processes")
        assert seen and {r["pid"] for r in seen} == {outside.pid}
        assert {r["container"] for r in seen} == {None}
        _, sums = totals(intervals, outside.pid, os.path.realpath(outside.files.read))
        assert within(sums["read_bytes"], READ_MIB * MIB)


def test_paths_too_deep_for_bpf_come_from_proc(ext4_loop, tool):
    """Deeper than the BPF walk goes: the path comes from /proc/PID/fd while the file is open."""
    deep = ext4_loop.mountpoint.joinpath(*["d"] * 60)
    deep.mkdir(parents=True)
    target = deep / "deep.bin"
    target.write_bytes(b"z" * MIB)
    reader = ("import os, sys\n"
              "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
              "print(len(os.read(fd, 1 << 20)), flush=True)\n"
              "sys.stdin.readline()\n")  # keeps the file open until the test is done
    with tool("--disk", ext4_loop.name) as t:
        proc = subprocess.Popen([sys.executable, "-c", reader, str(target)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == str(MIB)
            intervals = t.stop()
        finally:
            proc.communicate("\n", timeout=10)
    mine, sums = totals(intervals, proc.pid, os.path.realpath(target))
    assert mine, [r["path"] for r in rows(intervals, "files") if r["pid"] == proc.pid]
    assert sums["read_bytes"] == MIB and mine[0]["inode"] == os.stat(target).st_ino


def test_disk_view_matches_diskstats_deltas(ext4_loop, tool):
    """The tool's counts for the loop device equal /proc/diskstats deltas: the test reads
    diskstats just before and just after each of the tool's reads, and trusts an interval only
    when nothing moved in between (ext4's journal may write at any moment)."""
    name = ext4_loop.name
    target = ext4_loop.mountpoint / "diskstats.bin"
    with iofsstat.open(disk=name) as session:
        for _ in range(10):
            before = read_diskstats()[name]
            session.sample()
            start = read_diskstats()[name]
            with open(target, "wb") as f:
                f.write(os.urandom(2 * MIB))
                os.fsync(f.fileno())
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            with open(target, "rb") as f:
                f.read()
            time.sleep(0.05)
            end = read_diskstats()[name]
            interval = session.sample()
            after = read_diskstats()[name]
            if before == start and end == after:
                break
        else:
            pytest.fail("the loop device never stood still around the tool's reads")
    (disk,) = interval.disks
    assert disk["disk"] == name
    assert disk["reads"] == end.reads - start.reads > 0
    assert disk["writes"] == end.writes - start.writes > 0
    assert disk["read_bytes"] == (end.sectors_read - start.sectors_read) * 512 >= 2 * MIB
    assert disk["write_bytes"] == (end.sectors_written - start.sectors_written) * 512 >= 2 * MIB
    assert disk["r_iops"] == pytest.approx(disk["reads"] / interval.seconds, abs=0.01)
    assert disk["util"] == pytest.approx(min(100, (end.io_ms - start.io_ms) / interval.seconds / 10),
                                         abs=0.01)


def test_a_session_in_this_process_sees_its_own_file_io(tmp_path):
    """As a notebook uses it: open a session on this process, write and read a file of known
    size, and the next sample has that file, this PID, and at least those bytes."""
    target = tmp_path / "notebook.bin"
    size, chunks = 256 * 1024, 4
    with iofsstat.open(pid=os.getpid()) as session:
        assert session.hook in ("fexit", "tracepoint") and session.hook_label
        session.sample()  # what came before is not this test's
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for _ in range(chunks):
                assert os.write(fd, b"n" * size) == size
        finally:
            os.close(fd)
        with open(target, "rb", buffering=0) as f:
            assert len(f.read(size)) == size
        interval = session.sample()
    mine = [r for r in interval.files if r["path"] == str(target.resolve())]
    assert mine, [r["path"] for r in interval.files]
    assert {r["pid"] for r in interval.files} == {os.getpid()}  # only this process, by its PID
    assert {r["inode"] for r in mine} == {os.stat(target).st_ino}
    assert sum(r["writes"] for r in mine) == chunks
    assert sum(r["write_bytes"] for r in mine) == chunks * size
    assert sum(r["read_bytes"] for r in mine) >= size
    assert interval.seconds > 0


def test_without_bpf_loop_it_exits_3_naming_it():
    """Where the kernel has bpf_loop, iofsstat runs (its other tests count what it sees); where it
    has not, the command ends with exit 3 naming the helper and the kernel that brought it."""
    proc = subprocess.run([sys.executable, "-m", "ebpfkit", "iofsstat", "0.2", "1"],
                          capture_output=True, text=True, timeout=120)
    if features.probe("bpf_loop").supported:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 3, proc.stderr
        assert "bpf_loop" in proc.stderr and "5.17" in proc.stderr and "Traceback" not in proc.stderr
