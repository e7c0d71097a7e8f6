"""`--btf FILE` in a VM kernel whose own BTF is hidden (one boot for the module).

The module saves the guest kernel's BTF to a file, then hides /sys/kernel/btf/vmlinux by
bind-mounting an empty file over it (undone at the end), which is what the tools see on a
kernel built without BTF. Then:

- with `--btf FILE` the tools whose hooks need only CO-RE work against ground truth the
  test creates: runqlat (raw tracepoints) sees a child's sleeps, iofsstat (syscall
  tracepoints, although this kernel has fexit) and iotrace count a child's writes; `doctor`
  reports from that file;
- what needs the kernel's own BTF (fexit, any BTF-typed hook) fails with exit 3 saying so;
- without `--btf` every tool that loads a program exits 3 naming `--btf` and BTFHub.

Everything compiles in the guest into a cache of its own, so the vmlinux.h really comes
from the file (the test checks that the cache's BTF index names that file alone) and no
object compiled against the host's or the visible kernel's BTF is reused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from ebpfkit.engine.btf import COMPILE_BTF_ENV, KERNEL_BTF

pytestmark = pytest.mark.vm(kernel=["6.1"], timeout=1500)

WAIT = 300.0  # a cold compile in the guest, under emulation
WRITES, WRITE_SIZE = 40, 64 * 1024 + 123  # odd: a short count or a chunking error shows
SLEEPS, SLEEP_US = 30, 2000
RUNQLAT_INTERVALS = 6  # seconds the child's sleeps (well under one, even emulated) fall in
RECORD_SECONDS = 8

# A child the tools watch by pid: it starts (imports, reads) before any tool runs, says
# "ready", and does its work only when told, so what a tool sees of it is exactly that work.
CHILD = r"""
import os, sys, time
mode, path, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
buf = b"\xab" * size
print("ready", flush=True)
sys.stdin.readline()
if mode == "write":
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(count):
        os.write(fd, buf)
    os.close(fd)
else:
    for _ in range(count):
        time.sleep(size / 1e6)
"""


class Child:
    def __init__(self, mode: str, path, count: int, size: int):
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(path), str(count), str(size)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.pid = self.proc.pid

    def run(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        assert self.proc.wait(timeout=120) == 0


def kill(*procs: subprocess.Popen) -> None:
    """What a failed test leaves running."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def ebpfkit(*args: str, timeout: float = WAIT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ebpfkit", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, NO_COLOR="1"))


def assert_names_btf(result: subprocess.CompletedProcess) -> None:
    """Exit 3, a message naming --btf, EBPFKIT_BTF and where such files come from."""
    assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    for word in ("--btf FILE", "EBPFKIT_BTF", "btfhub", "debug package"):
        assert word in result.stderr, (word, result.stderr)


@pytest.fixture(scope="module")
def btf_file(tmp_path_factory):
    """The guest kernel's BTF saved to a file, the kernel's own hidden while the module runs,
    and a compile cache of the module's own. Yields (file, doctor's report before hiding)."""
    work = tmp_path_factory.mktemp("btf-vm")
    saved = work / "vmlinux.btf"
    shutil.copyfile(KERNEL_BTF, saved)
    before = json.loads(ebpfkit("--format", "json", "doctor").stdout)
    empty = work / "empty"
    empty.write_bytes(b"")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EBPFKIT_CACHE_DIR", str(work / "cache"))
        env.delenv(COMPILE_BTF_ENV, raising=False)  # the harness compiles against the host's BTF: not here
        env.delenv("EBPFKIT_BTF", raising=False)
        hidden = [KERNEL_BTF, *(p for p in libbpf_fallbacks() if os.path.exists(p))]
        try:
            for path in hidden:
                subprocess.run(["mount", "--bind", str(empty), path], check=True)
            assert os.stat(KERNEL_BTF).st_size == 0
            yield saved, before
        finally:
            for path in hidden:
                subprocess.run(["umount", path], check=False)
    assert os.stat(KERNEL_BTF).st_size == saved.stat().st_size


def libbpf_fallbacks() -> list[str]:
    """Where libbpf (btf__load_vmlinux_btf) looks for the kernel's BTF after sysfs: a kernel
    without BTF has none of them either (one may hold a copy, as /lib/modules/*/build/vmlinux
    on the machines that build ebpfkit)."""
    release = os.uname().release
    return [f"/boot/vmlinux-{release}", f"/lib/modules/{release}/vmlinux-{release}",
            f"/lib/modules/{release}/build/vmlinux", f"/usr/lib/modules/{release}/kernel/vmlinux",
            f"/usr/lib/debug/boot/vmlinux-{release}", f"/usr/lib/debug/boot/vmlinux-{release}.debug",
            f"/usr/lib/debug/lib/modules/{release}/vmlinux"]


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs the test mounts: the (device, inode) the hooks see is what stat() says."""
    subprocess.run(["mount", "-t", "tmpfs", "btf-vm", str(tmp_path)], check=True)
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", "-l", str(tmp_path)], check=False)


def test_doctor_reports_from_the_file(btf_file):
    saved, before = btf_file
    assert before["features"]["kernel_btf"]["status"] == "supported"
    assert before["tools"]["runqlat"]["hook"].startswith("tp_btf")
    # where fexit works (the VM kernels), iofsstat used it before the BTF went
    fexit_before = before["features"]["fexit"]["status"] == "supported"
    assert before["tools"]["iofsstat"]["hook"].startswith("fexit") == fexit_before, before["tools"]

    result = ebpfkit("--btf", str(saved), "--format", "json", "doctor")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["btf"]["path"] == str(saved) and report["btf"]["source"] == "--btf"
    assert report["btf"]["kernel_btf"] is False
    assert report["features"]["btf"]["status"] == "supported"
    assert str(saved) in report["features"]["btf"]["reason"]
    assert report["features"]["kernel_btf"]["status"] == "unsupported"
    for typed in ("tp_btf", "fentry", "fexit", "lsm"):  # the kernel checks them against its own BTF
        assert report["features"][typed]["status"] == "unsupported", report["features"][typed]
        assert "kernel's own BTF" in report["features"][typed]["reason"]
    tools = report["tools"]
    assert tools["runqlat"] == {"runs": True, "hook": "raw tracepoint sched_switch, the kernel's sched_info"}
    assert tools["iofsstat"] == {"runs": True, "hook": "syscall tracepoints"}
    assert tools["iotrace"]["runs"] and tools["xdp"]["runs"] and tools["sockmap"]["runs"]
    assert tools["guard"]["runs"] is False and "kernel's own BTF" in tools["guard"]["hook"]

    without = json.loads(ebpfkit("--format", "json", "doctor").stdout)
    assert without["btf"]["source"] == "kernel" and without["features"]["btf"]["status"] == "unsupported"
    assert not any(t["runs"] for t in without["tools"].values()), without["tools"]


TOOLS_WITHOUT_BTF = {
    "runqlat": lambda tmp, request: ["runqlat", "1", "1"],
    "iofsstat": lambda tmp, request: ["iofsstat", "1", "1"],
    "iotrace": lambda tmp, request: ["iotrace", "record", "-o", str(tmp / "x.iot"), "--duration", "1"],
    "sockmap": lambda tmp, request: ["sockmap", "enable", "--cgroup",
                                     request.getfixturevalue("child_cgroup").path],
    "xdp": lambda tmp, request: ["xdp", "filter", "attach", "--iface", "ek0", "--netns",
                                 request.getfixturevalue("veth_pair").a.netns, "--src", "192.0.2.0/24"],
}


@pytest.mark.parametrize("tool", TOOLS_WITHOUT_BTF)
def test_without_btf_the_tool_exits_3_naming_btf(btf_file, tmp_path, request, tool):
    assert_names_btf(ebpfkit(*TOOLS_WITHOUT_BTF[tool](tmp_path, request)))
    assert not os.path.exists("/sys/fs/bpf/ebpfkit/xdp") or not os.listdir("/sys/fs/bpf/ebpfkit/xdp")


def test_runqlat_with_btf_sees_the_childs_sleeps(btf_file):
    saved, _ = btf_file
    child = Child("sleep", "-", SLEEPS, SLEEP_US)
    tool = subprocess.Popen([sys.executable, "-m", "ebpfkit", "-v", "--btf", str(saved), "--format", "json",
                             "runqlat", "-p", str(child.pid), "1", str(RUNQLAT_INTERVALS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stderr = wait_for_banner(tool)
        child.run()  # well within the run's intervals: it ends on its own after them
        out, rest = tool.communicate(timeout=60)
    finally:
        kill(child.proc, tool)
    assert tool.returncode == 0, stderr + rest
    assert "hook: raw tracepoint sched_switch" in stderr
    total = sum(h["total"] for line in out.splitlines() for h in json.loads(line)["histograms"])
    # one wakeup (and switch in) per sleep, plus the read of "go" and the exit: no other task
    assert SLEEPS <= total <= SLEEPS + 15, out
    assert_compiled_from(saved)


def test_iofsstat_with_btf_counts_the_childs_writes(btf_file, tmpfs, iofsstat_run):
    saved, _ = btf_file
    path = tmpfs / "d" / "written.bin"
    path.parent.mkdir()
    child = Child("write", path, WRITES, WRITE_SIZE)
    tool = iofsstat_run("-p", str(child.pid), interval="1", timeout=WAIT, global_args=("--btf", str(saved)))
    try:
        child.run()
        intervals = tool.stop()
    finally:
        kill(child.proc)
        tool.kill()
    stderr = "".join(tool.stderr)
    assert "syscall exit tracepoints" in stderr, stderr
    rows = [r for i in intervals for r in i["files"] if r["pid"] == child.pid and r["path"] == str(path)]
    assert sum(r["writes"] for r in rows) == WRITES, intervals
    assert sum(r["write_bytes"] for r in rows) == WRITES * WRITE_SIZE, rows
    st = path.stat()
    assert all(r["inode"] == st.st_ino for r in rows)

    fexit = ebpfkit("--btf", str(saved), "iofsstat", "--hook", "fexit", "1", "1")
    assert fexit.returncode == 3 and "kernel's own BTF" in fexit.stderr, fexit.stderr
    assert "CONFIG_DEBUG_INFO_BTF" in fexit.stderr and "Traceback" not in fexit.stderr


def test_iotrace_with_btf_records_the_childs_writes(btf_file, tmpfs):
    saved, _ = btf_file
    path = tmpfs / "traced.bin"
    record = tmpfs / "rec.iot"
    child = Child("write", path, WRITES, WRITE_SIZE)
    tool = subprocess.Popen([sys.executable, "-m", "ebpfkit", "--btf", str(saved), "iotrace", "record",
                             "-o", str(record), "-p", str(child.pid), "--duration", str(RECORD_SECONDS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + WAIT
        while not (record.exists() and record.stat().st_size > 0):
            assert tool.poll() is None and time.monotonic() < deadline, tool.communicate()
            time.sleep(0.1)
        child.run()  # well within the recording: it ends on its own
        _, stderr = tool.communicate(timeout=120)
    finally:
        kill(child.proc, tool)
    assert tool.returncode == 0 and "Traceback" not in stderr, stderr
    report = ebpfkit("--btf", str(saved), "iotrace", "report", str(record), "--format", "json")
    assert report.returncode == 0, report.stderr
    mine = [p for p in json.loads(report.stdout)["processes"] if p["pid"] == child.pid]
    assert len(mine) == 1, report.stdout
    assert mine[0]["syscalls"] == WRITES and mine[0]["write_bytes"] == WRITES * WRITE_SIZE, mine


def test_btf_typed_programs_say_the_file_cannot_serve_them(btf_file):
    """The engine itself: a fentry program compiled and relocated with the file still needs
    the kernel's own BTF to load; the error says so."""
    saved, _ = btf_file
    code = f"""
import ebpfkit
spec = ebpfkit.compile(text='''#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
SEC("fentry/vfs_read") int BPF_PROG(on_read) {{ return 0; }}
char LICENSE[] SEC("license") = "GPL";''', name="typed.bpf.c", btf={str(saved)!r})
try:
    spec.load()
except ebpfkit.NotSupportedError as exc:
    print(exc.feature, exc)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("kernel_btf ") and 'on_read (SEC "fentry/vfs_read")' in result.stdout


def wait_for_banner(tool: subprocess.Popen) -> str:
    lines = []
    for line in tool.stderr:
        lines.append(line)
        if "Hit Ctrl-C" in line:
            return "".join(lines)
    tool.wait()
    raise AssertionError(f"the tool did not start (exit {tool.returncode}): {''.join(lines)}")


def assert_compiled_from(saved) -> None:
    """The module's cache knows one BTF: the saved file (a compile against the kernel's
    own, or the harness's copy of the host's, would have added its own entry)."""
    from ebpfkit.engine import cache

    index = cache.read_record(os.path.join(os.environ["EBPFKIT_CACHE_DIR"], "btf", "index.rec"))
    assert index and all(key.startswith(f"{os.path.realpath(saved)}|") for key in index), index
