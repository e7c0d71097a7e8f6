"""iofsstat in VM kernels where fexit works, 6.1 and 6.12 (one boot per kernel): it picks its fexit
hooks by feature probe and says so at -v, and counts, against ground truth the test creates,
plain read()/write() IO, sendfile() (kernel-internal splice: no vfs_read) and io_uring
(the file's read_iter/write_iter called by io_uring itself).

One iofsstat run (the CLI, `-v --format json`) watches every workload; the tests then check
their own part of what it reported. Files live on a tmpfs the test mounts, so the (device,
inode) the kernel sees is what os.stat() says (the guest's /tmp is an overlay, where not)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest

pytestmark = pytest.mark.vm(kernel=["6.1"], timeout=1500)  # fexit (6.12: tests/vm/test_prebuilt_vm.py)

KIB, MIB = 1 << 10, 1 << 20
CHUNK = 64 * KIB
# Odd sizes: a chunking or short-count error shows, not only a missing hook.
WRITE_BYTES = 8 * MIB + 12345
READ_BYTES = 6 * MIB + 777
SENDFILE_BYTES = 5 * MIB + 4321
URING_READ_BYTES = 3 * MIB + 100
URING_WRITE_BYTES = 2 * MIB + 50
URING_UNAVAILABLE = 3  # the helper's exit status when io_uring_setup() fails

# The workloads, in C so each IO is exactly the syscall (or io_uring request) named, with no
# interpreter doing IO of its own. `iofs_work OP ARGS [OP ARGS ...]`, every OP in order:
#   write FILE BYTES | read FILE BYTES            read()/write() in 64 KiB calls
#   sendfile IN OUT BYTES                         sendfile() from IN to the regular file OUT
#   uring-read FILE BYTES | uring-write FILE BYTES  IORING_OP_READ/WRITE, 64 KiB requests
HELPER_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
static char buf[CHUNK];

static int fail(const char *what) { perror(what); return 1; }

static int rw(int writing, const char *path, long bytes)
{
	int fd = writing ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(path, O_RDONLY);

	if (fd < 0)
		return fail(path);
	for (long done = 0; done < bytes;) {
		long want = bytes - done < CHUNK ? bytes - done : CHUNK;
		long n = writing ? write(fd, buf, want) : read(fd, buf, want);

		if (n <= 0)
			return fail(writing ? "write" : "read");
		done += n;
	}
	return close(fd);
}

static int copy_sendfile(const char *in, const char *out, long bytes)
{
	int ifd = open(in, O_RDONLY), ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (ifd < 0 || ofd < 0)
		return fail("open");
	for (long done = 0; done < bytes;) {
		ssize_t n = sendfile(ofd, ifd, NULL, bytes - done);

		if (n <= 0)
			return fail("sendfile");
		done += n;
	}
	close(ifd);
	return close(ofd);
}

/* io_uring without liburing: one request in flight at a time. */
static int uring(int writing, const char *path, long bytes)
{
	struct io_uring_params p;
	int ring, fd;

	memset(&p, 0, sizeof(p));
	ring = syscall(__NR_io_uring_setup, 4, &p);
	if (ring < 0) {
		printf("io_uring unavailable: io_uring_setup: %s\n", strerror(errno));
		fflush(stdout);
		return 3;
	}
	size_t sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	int single = p.features & IORING_FEAT_SINGLE_MMAP;

	if (single && cq_size > sq_size)
		sq_size = cq_size;
	char *sq = mmap(NULL, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
			IORING_OFF_SQ_RING);
	char *cq = single ? sq : mmap(NULL, cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
				      ring, IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe),
					 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
					 IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
		return fail("mmap");
	unsigned *sq_tail = (unsigned *)(sq + p.sq_off.tail), *sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
	unsigned *sq_array = (unsigned *)(sq + p.sq_off.array);
	unsigned *cq_head = (unsigned *)(cq + p.cq_off.head), *cq_tail = (unsigned *)(cq + p.cq_off.tail);
	unsigned *cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);

	fd = writing ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : open(path, O_RDONLY);
	if (fd < 0)
		return fail(path);
	for (long done = 0; done < bytes;) {
		unsigned tail = *sq_tail, idx = tail & *sq_mask, head;
		struct io_uring_sqe *sqe = &sqes[idx];
		struct io_uring_cqe *cqe;

		memset(sqe, 0, sizeof(*sqe));
		sqe->opcode = writing ? IORING_OP_WRITE : IORING_OP_READ;
		sqe->fd = fd;
		sqe->addr = (unsigned long)buf;
		sqe->len = bytes - done < CHUNK ? bytes - done : CHUNK;
		sqe->off = done;
		sq_array[idx] = idx;
		__atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);
		if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
			return fail("io_uring_enter");
		head = __atomic_load_n(cq_head, __ATOMIC_ACQUIRE);
		if (head == __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE)) {
			fprintf(stderr, "no completion\n");
			return 1;
		}
		cqe = &cqes[head & *cq_mask];
		if (cqe->res <= 0) {
			fprintf(stderr, "io_uring %s: %s\n", writing ? "write" : "read", strerror(-cqe->res));
			return 1;
		}
		done += cqe->res;
		__atomic_store_n(cq_head, head + 1, __ATOMIC_RELEASE);
	}
	close(fd);
	return close(ring);
}

int main(int argc, char **argv)
{
	memset(buf, 0xab, sizeof(buf));
	for (int i = 1; i < argc;) {
		const char *op = argv[i];
		int rc;

		if (!strcmp(op, "sendfile") && i + 3 < argc) {
			rc = copy_sendfile(argv[i + 1], argv[i + 2], atol(argv[i + 3]));
			i += 4;
		} else if (i + 2 < argc && (!strcmp(op, "write") || !strcmp(op, "read"))) {
			rc = rw(!strcmp(op, "write"), argv[i + 1], atol(argv[i + 2]));
			i += 3;
		} else if (i + 2 < argc && (!strcmp(op, "uring-write") || !strcmp(op, "uring-read"))) {
			rc = uring(!strcmp(op, "uring-write"), argv[i + 1], atol(argv[i + 2]));
			i += 3;
		} else {
			fprintf(stderr, "bad arguments at %s\n", op);
			return 2;
		}
		if (rc)
			return rc;
	}
	return 0;
}
"""


@dataclass
class Workload:
    """One helper process: its pid, comm and exit status, and the files it touched."""

    name: str
    files: dict
    pid: int = 0
    status: int | None = None
    output: str = ""
    comm: str = "iofs_work"


@dataclass
class Run:
    """What the module's single iofsstat run saw."""

    stderr: str = ""
    intervals: list = field(default_factory=list)
    workloads: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)

    def rows(self, pid: int, path) -> list[dict]:
        return [r for i in self.intervals for r in i["files"] if r["pid"] == pid and r["path"] == str(path)]

    def totals(self, pid: int, path) -> dict:
        rows = self.rows(pid, path)
        return {k: sum(r[k] for r in rows) for k in ("reads", "writes", "read_bytes", "write_bytes")}


@pytest.fixture(scope="module")
def run(tmp_path_factory, iofsstat_run):
    work = tmp_path_factory.mktemp("iofsstat-vm")
    helper = work / "iofs_work"
    (work / "iofs_work.c").write_text(HELPER_C)
    subprocess.run([shutil.which("gcc") or "cc", "-O2", "-o", str(helper), str(work / "iofs_work.c")], check=True)
    fs = work / "fs"
    fs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "iofsstat-vm", str(fs)], check=True)
    try:
        deep = fs / "d1" / "d2" / "d3"
        deep.mkdir(parents=True)
        files = {"written": deep / "written.bin", "read": fs / "read.bin", "send_in": fs / "send-in.bin",
                 "send_out": deep / "send-out.bin", "uring_in": fs / "uring-in.bin",
                 "uring_out": deep / "uring-out.bin"}
        # the sources, written by this process (another pid than the workloads')
        for name, size in (("read", READ_BYTES), ("send_in", SENDFILE_BYTES), ("uring_in", URING_READ_BYTES)):
            files[name].write_bytes(os.urandom(size))
        plans = {
            "rw": ["write", files["written"], WRITE_BYTES, "read", files["read"], READ_BYTES],
            "sendfile": ["sendfile", files["send_in"], files["send_out"], SENDFILE_BYTES],
            "uring": ["uring-read", files["uring_in"], URING_READ_BYTES,
                      "uring-write", files["uring_out"], URING_WRITE_BYTES],
        }
        result = Run()
        tool = iofsstat_run(interval="1", timeout=60.0)
        try:
            for name, plan in plans.items():
                proc = subprocess.Popen([str(helper), *map(str, plan)], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
                out, _ = proc.communicate(timeout=300)
                result.workloads[name] = Workload(name, files, proc.pid, proc.returncode, out)
            result.intervals = tool.stop()
        finally:
            tool.kill()
            result.stderr = "".join(tool.stderr)
        result.files = files
        yield result
    finally:
        subprocess.run(["umount", "-l", str(fs)], check=False)


def within(value, expected, tolerance=0.02):
    return abs(value - expected) <= expected * tolerance


def check_file(run: Run, w: Workload, path, *, read_bytes=0, write_bytes=0, calls=None):
    """The rows of (w's pid, path): comm, inode, device and the byte totals within 2%."""
    assert w.status == 0, f"workload {w.name} failed ({w.status}): {w.output}"
    rows = run.rows(w.pid, path)
    mine = [r for i in run.intervals for r in i["files"] if r["pid"] == w.pid]
    assert rows, f"no row for pid {w.pid} and {path}; that pid's rows: {mine}"
    st = os.stat(path)
    assert {r["comm"] for r in rows} == {w.comm}, rows
    assert {r["inode"] for r in rows} == {st.st_ino}, rows
    assert {r["dev"] for r in rows} == {f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"}, rows
    sums = run.totals(w.pid, path)
    assert within(sums["read_bytes"], read_bytes) and within(sums["write_bytes"], write_bytes), \
        (f"{path}: read {sums['read_bytes']} (expected {read_bytes}), written {sums['write_bytes']} "
         f"(expected {write_bytes})")
    if calls is not None:
        assert (sums["reads"], sums["writes"]) == calls, sums
    return sums


def chunks(size: int) -> int:
    return -(-size // CHUNK)


# --- tests -------------------------------------------------------------------------------

def test_fexit_is_picked_by_feature_probe_and_shown_at_v(run):
    from ebpfkit.engine import features

    assert features.best_hook(["fexit", "tracepoint"]) == "fexit", features.probe("fexit").reason
    hook = next((line.split("file IO hook:", 1)[1].strip() for line in run.stderr.splitlines()
                 if "file IO hook:" in line), None)
    assert hook is not None, f"-v did not say which hook: {run.stderr}"
    assert hook.startswith("fexit vfs_read/vfs_write"), hook
    for covered in ("readv/writev", "sendfile", "io_uring"):
        assert covered in hook, hook
    assert "not counted" not in hook and "by syscall tracepoints" not in hook, hook


def test_read_and_write_bytes_pid_comm_and_full_path(run):
    w = run.workloads["rw"]
    check_file(run, w, run.files["written"], write_bytes=WRITE_BYTES, calls=(0, chunks(WRITE_BYTES)))
    check_file(run, w, run.files["read"], read_bytes=READ_BYTES, calls=(chunks(READ_BYTES), 0))
    assert "/d1/d2/d3/written.bin" in str(run.files["written"])  # a path several directories deep


def test_sendfile_counts_as_a_read_of_its_source(run):
    w = run.workloads["sendfile"]
    check_file(run, w, run.files["send_in"], read_bytes=SENDFILE_BYTES)
    check_file(run, w, run.files["send_out"], write_bytes=SENDFILE_BYTES)


def test_io_uring_reads_and_writes_are_counted(run):
    w = run.workloads["uring"]
    if w.status == URING_UNAVAILABLE:
        pytest.skip(f"this VM kernel does not allow io_uring: {w.output.strip()}")
    check_file(run, w, run.files["uring_in"], read_bytes=URING_READ_BYTES, calls=(chunks(URING_READ_BYTES), 0))
    check_file(run, w, run.files["uring_out"], write_bytes=URING_WRITE_BYTES, calls=(0, chunks(URING_WRITE_BYTES)))
