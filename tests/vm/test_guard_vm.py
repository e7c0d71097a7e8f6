"""guard in a VM kernel with BPF-LSM (one boot for the module): the pinned guard denies
(EPERM) and logs every file operation on protected objects to untrusted subjects (io_uring
and overlayfs included), trust follows (dev, ino) and inheritance, protected processes
survive, audit mode only logs, the pins outlive a SIGKILLed agent until `guard stop`, the
guard protects itself from untrusted subjects (bpf(), pins, bpffs, its agent, its policy
file) and reloads its policy when the file changes.

The test process itself (pytest, as root) is the untrusted subject. Every policy also
trusts an admin shell (a copy of /bin/sh, `inherit: true`): stop, reload and policy edits
run through it, as an administrator would (see README, guard)."""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ebpfkit.tools.guard import session as guard_session
from ebpfkit.sysinfo.devices import kernel_dev_of_stat
from guardctl import PIN_DIR, guard

pytestmark = pytest.mark.vm(kernel=["6.1"], lsm=True, timeout=2700)

BPFTOOL = shutil.which("bpftool") or "/usr/sbin/bpftool"
OPS_SCRIPT = Path(__file__).with_name("guard_ops.py")
LD_SO = "/lib64/ld-linux-x86-64.so.2"


def n_links() -> int:
    """One per program the guard loads here: 19 lsm/... and fexit/vfs_rename, and before task
    storage (5.11) lsm/task_free, which empties the trust entries by task."""
    from ebpfkit.engine import features

    return 20 if features.probe("task_storage").supported else 21


def violations(line):
    return "hook" in line


@pytest.fixture
def fs(tmpfs):
    """A fresh tmpfs (the guest's /tmp is an overlay: see test_overlayfs)."""
    return tmpfs


def denied(fn, *args):
    with pytest.raises(PermissionError) as exc:
        fn(*args)
    assert exc.value.errno == errno.EPERM


@pytest.mark.vm(kernel=["6.1", "6.12"], lsm=True, timeout=2700)  # every LSM hook on both kernels
def test_file_operations_denied_and_logged(tmp_path, fs):
    base = fs / "data"
    d = base / "dir"
    (d / "sub").mkdir(parents=True)
    f = base / "file"
    f.write_text("secret")
    inner = d / "sub" / "inner"
    inner.write_text("inner")
    (base / "hard").hardlink_to(f)
    (base / "hard-inner").hardlink_to(inner)  # outside the protected directory, made before
    (fs / "sym").symlink_to(f)
    early = os.open(f, os.O_RDWR)  # opened before the guard: writes go through file_permission
    bind = fs / "bind"
    bind.mkdir()
    try:
        with guard(tmp_path, f"protect: [{f}, {d}]\n") as g:
            # the exporter's view, read from the pins by this untrusted process: exactly
            # the denials it caused
            counters = guard_session.attached()
            before = counters.sample()
            for _ in range(3):
                denied(os.open, f, os.O_WRONLY)
            after = counters.sample()
            assert after["mode"] == "enforce" and after["denied"] - before["denied"] == 3, (before, after)
            assert after["audited"] == before["audited"]
            for target in (f, inner, base / "hard", base / "hard-inner", fs / "sym", f"/proc/self/root{f}"):
                denied(os.open, target, os.O_WRONLY)
            denied(os.open, f, os.O_RDONLY | os.O_TRUNC)
            denied(os.truncate, f, 0)
            denied(os.truncate, inner, 0)
            denied(os.unlink, f)
            denied(os.unlink, inner)
            denied(os.rename, f, base / "moved")
            denied(os.rename, d, base / "moved")        # a protected directory
            denied(os.rename, base, fs / "moved")  # an ancestor of both
            denied(os.rename, fs / "sym", f)       # replacing it (rename target)
            denied(os.link, f, base / "hard2")
            denied(os.chmod, f, 0o777)
            denied(os.chown, inner, 1, 1)
            denied(os.write, early, b"x")
            with pytest.raises(PermissionError):
                mmap.mmap(early, 0, mmap.MAP_SHARED, mmap.PROT_WRITE | mmap.PROT_READ)
            subprocess.run(["mount", "--bind", str(d), str(bind)], check=True)
            try:
                denied(os.open, bind / "sub" / "inner", os.O_WRONLY)
            finally:
                subprocess.run(["umount", str(bind)], check=True)
            # not protected: reads, and files next to the protected ones
            assert f.read_text() == "secret"
            (base / "free").write_text("ok")
            os.unlink(base / "free")
            lines = g.lines(20, where=violations)
            out = g.cli("status").stdout
            assert "running" in out and "lost" in out
        hooks = {line["hook"] for line in lines}
        assert {"file_open", "path_truncate", "inode_unlink", "inode_rename", "inode_link",
                "inode_setattr", "file_permission", "mmap_file"} <= hooks, hooks
        assert all(line["verdict"] == "denied" for line in lines)
        assert len(lines) >= 20, lines
        first = lines[0]
        assert first["pid"] == os.getpid() and first["exe"] == os.readlink("/proc/self/exe")
        assert first["object"] == str(f) and first["operation"] == "write"
        assert {"time", "comm"} <= set(first)
        # every line names the protected object, also when a directory above matched
        assert all(line["object"] in (str(f), str(d)) for line in lines), lines
        into_dir = [line for line in lines if line["name"] == "inner"]
        assert into_dir and all(line["object"] == str(d) for line in into_dir)
        ancestor = [line for line in lines if line.get("matched") == str(base)]
        assert ancestor and ancestor[0]["hook"] == "inode_rename" and ancestor[0]["name"] == "data"
        assert ancestor[0]["object"] in (str(f), str(d))
        assert f.read_text() == "secret" and inner.read_text() == "inner"
    finally:
        os.close(early)


class Uring:
    """A minimal io_uring through raw syscalls (no liburing): one request at a time."""

    SETUP, ENTER = 425, 426
    OP_OPENAT, OP_READ, OP_WRITE = 18, 22, 23
    SQE = struct.Struct("=BBHiQQIIQHHiQQ")  # struct io_uring_sqe, 64 bytes

    def __init__(self, entries=4):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.libc.syscall.restype = ctypes.c_long
        params = ctypes.create_string_buffer(120)  # struct io_uring_params
        fd = self.libc.syscall(ctypes.c_long(self.SETUP), ctypes.c_long(entries), params)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd = fd
        sq_entries, cq_entries = struct.unpack_from("=II", params, 0)
        self.sq_off = struct.unpack_from("=8I", params, 40)  # head tail mask entries flags dropped array
        self.cq_off = struct.unpack_from("=8I", params, 80)  # head tail mask entries overflow cqes
        rw = mmap.PROT_READ | mmap.PROT_WRITE
        self.sq = mmap.mmap(fd, self.sq_off[6] + sq_entries * 4, mmap.MAP_SHARED, rw, offset=0)
        self.cq = mmap.mmap(fd, self.cq_off[5] + cq_entries * 16, mmap.MAP_SHARED, rw, offset=0x8000000)
        self.sqes = mmap.mmap(fd, sq_entries * 64, mmap.MAP_SHARED, rw, offset=0x10000000)

    def _u32(self, buf, off):
        return struct.unpack_from("=I", buf, off)[0]

    def run(self, opcode, fd, addr=0, length=0, off=0, op_flags=0) -> int:
        """Submit one SQE, wait for its CQE, return its res (-errno on failure)."""
        tail, mask = self._u32(self.sq, self.sq_off[1]), self._u32(self.sq, self.sq_off[2])
        idx = tail & mask
        self.sqes[idx * 64:idx * 64 + 64] = self.SQE.pack(opcode, 0, 0, fd, off, addr, length, op_flags,
                                                          7, 0, 0, 0, 0, 0)
        struct.pack_into("=I", self.sq, self.sq_off[6] + idx * 4, idx)
        struct.pack_into("=I", self.sq, self.sq_off[1], tail + 1)
        got = self.libc.syscall(ctypes.c_long(self.ENTER), ctypes.c_long(self.fd), ctypes.c_long(1),
                                ctypes.c_long(1), ctypes.c_long(1), ctypes.c_void_p(None), ctypes.c_long(0))
        assert got == 1, os.strerror(ctypes.get_errno())
        head, cmask = self._u32(self.cq, self.cq_off[0]), self._u32(self.cq, self.cq_off[2])
        assert self._u32(self.cq, self.cq_off[1]) != head, "no completion"
        _, res, _ = struct.unpack_from("=QiI", self.cq, self.cq_off[5] + (head & cmask) * 16)
        struct.pack_into("=I", self.cq, self.cq_off[0], head + 1)
        return res

    def write(self, fd, data: bytes, off=0) -> int:
        buf = ctypes.create_string_buffer(data, len(data))
        return self.run(self.OP_WRITE, fd, ctypes.addressof(buf), len(data), off)

    def read(self, fd, size: int, off=0) -> bytes:
        buf = ctypes.create_string_buffer(size)
        res = self.run(self.OP_READ, fd, ctypes.addressof(buf), size, off)
        if res < 0:
            raise OSError(-res, os.strerror(-res))
        return buf.raw[:res]

    def open_read(self, path, size: int) -> bytes:
        fd = self.openat(path, os.O_RDONLY)
        if fd < 0:
            raise OSError(-fd, os.strerror(-fd))
        try:
            return self.read(fd, size)
        finally:
            os.close(fd)

    def openat(self, path, flags) -> int:
        name = ctypes.create_string_buffer(os.fsencode(path))
        return self.run(self.OP_OPENAT, -100, ctypes.addressof(name), 0o644, 0, flags)  # AT_FDCWD

    def close(self):
        for m in (self.sq, self.cq, self.sqes):
            m.close()
        os.close(self.fd)


def _libc_map(fd: int, prot: int, flags: int, expect_errno: int = 0):
    """mmap() of one page of ``fd`` through libc, and libc's mprotect (Python's mmap has none).
    With ``expect_errno``, the mmap must fail with it (and None is returned)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    addr = libc.mmap(None, mmap.PAGESIZE, prot, flags, fd, 0)
    failed = addr in (None, ctypes.c_void_p(-1).value)
    if expect_errno:
        assert failed and ctypes.get_errno() == expect_errno, (addr, os.strerror(ctypes.get_errno()))
        return None
    assert not failed, os.strerror(ctypes.get_errno())

    def mprotect(new_prot: int) -> int:
        return 0 if libc.mprotect(addr, mmap.PAGESIZE, new_prot) == 0 else ctypes.get_errno()
    return mprotect


@pytest.mark.vm(kernel=["6.1", "6.12", "5.10"], lsm=True, timeout=2700)  # every LSM hook, each kernel
def test_every_policy_operation_denied_untrusted_allowed_trusted(tmp_path, fs):
    """Each operation the policy parser accepts, on a file of its own protected with `deny:
    [that op]`: the untrusted test process is denied (EPERM, one log line naming the op, the
    object and the pid), the file is untouched, and a trusted subject then does it."""
    import guard_ops
    from ebpfkit.policy.guard import OPERATIONS

    assert set(guard_ops.ATTEMPTS) == set(OPERATIONS)
    targets = {}
    for op in OPERATIONS:
        (fs / op).mkdir()
        targets[op] = fs / op / "target"
        if op == "exec":
            shutil.copy("/bin/true", targets[op])
        else:
            targets[op].write_bytes(b"x" * mmap.PAGESIZE)
    lib = fs / "exec-dir"  # a directory whose files may not be executed or mapped executable
    lib.mkdir()
    shutil.copy("/bin/true", lib / "true")

    def states():
        return {op: (st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_nlink)
                for op, st in ((op, path.stat()) for op, path in targets.items())}
    before = states()
    policy = "protect:\n" + "".join(f"  - path: {path}\n    deny: [{op}]\n" for op, path in targets.items())
    policy += f"  - path: {lib}\n    deny: [exec]\n"
    # fds opened before the guard: reading and writing through them are checked too
    early_read = os.open(targets["read"], os.O_RDONLY)
    early_write = os.open(targets["write"], os.O_RDWR)
    early_exec = os.open(targets["exec"], os.O_RDONLY)  # this python's own open would be an exec
    try:
        with guard(tmp_path, policy) as g:
            for op, path in targets.items():
                with pytest.raises(PermissionError) as exc:
                    guard_ops.attempt(op, path)
                assert exc.value.errno == errno.EPERM, op
            lines = g.lines(len(OPERATIONS), where=violations)
            for op, path in targets.items():
                mine = [line for line in lines if line["operation"] == op and line["object"] == str(path)]
                assert mine, (op, lines)
                assert all(line["verdict"] == "denied" for line in mine)
                # exec is attempted by a forked child: its pid is the one logged
                assert all((line["pid"] == os.getpid()) == (op != "exec") for line in mine), mine
            exec_line = next(line for line in lines if line["operation"] == "exec")
            assert exec_line["hook"] == "bprm_check_security"
            assert states() == before

            # the ways around each check: an fd opened earlier, ld.so, mprotect
            denied(os.read, early_read, 1)
            write_protect = _libc_map(early_write, mmap.PROT_READ, mmap.MAP_SHARED)
            assert write_protect(mmap.PROT_READ | mmap.PROT_WRITE) == errno.EPERM
            # mapping it readable is allowed, executable is not, at once or later
            _libc_map(early_exec, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, errno.EPERM)
            exec_protect = _libc_map(early_exec, mmap.PROT_READ, mmap.MAP_PRIVATE)
            assert exec_protect(mmap.PROT_READ | mmap.PROT_EXEC) == errno.EPERM
            for binary in (targets["exec"], lib / "true"):  # (ld.so's own open: see test_exec_routes)
                via_ld = subprocess.run([LD_SO, str(binary)], capture_output=True, text=True)
                assert via_ld.returncode != 0, via_ld
                with pytest.raises(PermissionError):
                    guard_ops.attempt("exec", binary)
            hooks = {(line["hook"], line["operation"]) for line in
                     g.lines(len(lines) + 8, where=violations)[len(lines):]}
            assert {("file_permission", "read"), ("file_mprotect", "write"), ("file_mprotect", "exec"),
                    ("mmap_file", "exec"), ("file_open", "exec"), ("bprm_check_security", "exec")} <= hooks, hooks

            # a trusted subject (the admin shell's child) does every one of them
            args = " ".join(f"{op} {path}" for op, path in targets.items())
            done = g.as_admin(f"exec {sys.executable} {OPS_SCRIPT} {args}")
            assert json.loads(done.stdout) == {op: "ok" for op in OPERATIONS}
            assert g.as_admin(f"{LD_SO} {lib / 'true'} && {lib / 'true'}").returncode == 0
            assert targets["write"].read_bytes().startswith(b"changed")
            assert not targets["unlink"].exists()
            assert not targets["rename"].exists() and Path(f"{targets['rename']}.moved").exists()
            assert targets["link"].stat().st_nlink == 2
            assert targets["setattr"].stat().st_mode & 0o777 == 0o600
    finally:
        os.close(early_read)
        os.close(early_write)
        os.close(early_exec)


def _new_lines(g, seen: int) -> list:
    """The violation lines logged after the first ``seen`` (at least one)."""
    return g.lines(seen + 1, where=violations)[seen:]


def _route_denied(g, seen: int, route, operations: set) -> tuple[int, set]:
    """Run ``route``, which must raise EPERM and be logged with one of ``operations``: the
    new count of lines, and the hooks that logged it."""
    with pytest.raises(PermissionError) as exc:
        got = route()
        print("NOT DENIED, got", got)
    assert exc.value.errno == errno.EPERM, exc.value
    new = _new_lines(g, seen)
    assert all(line["verdict"] == "denied" for line in new), new
    assert any(operations & set(line["operation"].split(",")) for line in new), new
    return seen + len(new), {(line["hook"], line["operation"]) for line in new}


@pytest.mark.vm(kernel=["6.1", "6.12"], lsm=True, timeout=2700)
def test_read_routes(tmp_path, fs):
    """Every route to the bytes of a file under `deny: [read]` (issue #42's table and more),
    each first shown to work on an unprotected twin: opened for reading in any mode, read
    through fds opened before the guard or passed by a trusted process, mapped, io_uring,
    and through a hardlink, a bind mount and an overlay's two views."""
    import guard_routes as routes

    secret, twin = fs / "sec" / "secret", fs / "free" / "secret"
    data = {secret: b"the-secret".ljust(routes.SIZE, b"s"), twin: b"the-twin".ljust(routes.SIZE, b"t")}
    for path, content in data.items():
        path.parent.mkdir()
        path.write_bytes(content)
    (fs / "scratch").mkdir()
    (fs / "elsewhere").mkdir()
    views = {}  # name -> (protected view, twin view)
    views["hardlink outside the directory"] = (fs / "elsewhere" / "hard", fs / "elsewhere" / "twin-hard")
    views["hardlink outside the directory"][0].hardlink_to(secret)
    views["hardlink outside the directory"][1].hardlink_to(twin)
    bind = {secret: fs / "bind-sec", twin: fs / "bind-free"}
    for path, target in bind.items():
        target.mkdir()
        subprocess.run(["mount", "--bind", str(path.parent), str(target)], check=True)
    views["bind mount"] = (bind[secret] / "secret", bind[twin] / "secret")
    subprocess.run(["modprobe", "overlay"], check=False)
    lower, upper, merged = fs / "ovl-lower", tmp_path / "ovl-upper", fs / "ovl-merged"
    for d in (lower, upper, merged):
        d.mkdir()
    (lower / "secret").write_bytes(data[secret])
    (lower / "twin").write_bytes(data[twin])
    subprocess.run(["mount", "-t", "tmpfs", "ovl-upper", str(upper)], check=True)
    (upper / "u").mkdir()
    (upper / "w").mkdir()
    subprocess.run(["mount", "-t", "overlay", "guardreads", "-o",
                    f"lowerdir={lower},upperdir={upper}/u,workdir={upper}/w", str(merged)], check=True)
    views["overlayfs view"] = (merged / "secret", merged / "twin")
    views["overlayfs lower layer"] = (lower / "secret", lower / "twin")
    early = {path: {"ro": os.open(path, os.O_RDONLY), "rw": os.open(path, os.O_RDWR)} for path in data}
    try:
        ring = Uring()
    except OSError as exc:
        pytest.fail(f"io_uring is not available in this kernel ({exc}): its reads cannot be shown denied")
    table = {}
    try:
        policy = f"protect:\n  - path: {secret.parent}\n    deny: [read]\n  - path: {merged / 'secret'}\n" \
                 f"    deny: [read]\n"
        with guard(tmp_path, policy) as g:
            ctx = {"uring": ring, "admin": g.admin, "env": g.env(), "scratch": fs / "scratch"}
            seen = 0
            for name, route in routes.READ_ROUTES.items():
                assert route(twin, early[twin], ctx) == data[twin], name
                seen, table[name] = _route_denied(g, seen, lambda: route(secret, early[secret], ctx), {"read"})
            for name, (view, twin_view) in views.items():
                assert twin_view.read_bytes() == data[twin], name
                seen, table[name] = _route_denied(g, seen, lambda: view.read_bytes(), {"read"})
            # not covered by a read rule: the twin stays readable, mapped too, with the guard on
            assert mmap.mmap(early[twin]["ro"], 0, mmap.MAP_SHARED, mmap.PROT_READ)[:8] == b"the-twin"
    finally:
        ring.close()
        for fds in early.values():
            for fd in fds.values():
                os.close(fd)
        for target in (merged, *bind.values(), upper):
            subprocess.run(["umount", str(target)], check=False)
    print("route -> (hook, operation) logged")
    for name, hooks in table.items():
        print(f"  {name}: {sorted(hooks)}")
    hook_of = {name: {hook for hook, _ in hooks} for name, hooks in table.items()}
    assert hook_of["open O_RDWR, read"] == {"file_open"}
    assert hook_of["earlier fd: sendfile"] == hook_of["earlier fd: splice"] == {"file_permission"}
    assert hook_of["earlier fd: mmap private PROT_READ"] == {"mmap_file"}
    assert hook_of["earlier fd: mmap PROT_NONE, mprotect PROT_READ"] == {"file_mprotect"}
    assert hook_of["io_uring: read earlier fd"] == {"file_permission"}
    assert secret.read_bytes() == data[secret]  # (after stop)


@pytest.mark.vm(kernel=["6.1", "6.12"], lsm=True, timeout=2700)
def test_exec_routes(tmp_path, fs):
    """`deny: [exec]` stops every way of running the file (execve, fexecve, its script run by
    an interpreter, ld.so); what is no run but a read by another program (a copy, `cat | sh`,
    a memfd of its bytes) only `deny: [exec, read]` stops. Each route first runs its twin."""
    import guard_routes as routes

    files = {kind: routes.exec_files(fs / kind) for kind in ("free", "exec", "strict")}
    (fs / "scratch").mkdir()
    policy = (f"protect:\n  - path: {fs / 'exec'}\n    deny: [exec]\n"
              f"  - path: {fs / 'strict'}\n    deny: [exec, read]\n")
    table = {}
    with guard(tmp_path, policy) as g:
        seen = 0
        for name, route in {**routes.EXEC_ROUTES, **routes.COPY_ROUTES}.items():
            assert "ran" in route(files["free"], fs / "scratch"), name
            if name in routes.COPY_ROUTES:  # a read: the exec rule allows it
                assert "ran" in route(files["exec"], fs / "scratch"), name
            else:
                seen, table[name] = _route_denied(g, seen, lambda: route(files["exec"], fs / "scratch"), {"exec"})
            seen, table[f"{name} [exec, read]"] = _route_denied(
                g, seen, lambda: route(files["strict"], fs / "scratch"), {"exec", "read"})
    print("route -> (hook, operation) logged")
    for name, hooks in table.items():
        print(f"  {name}: {sorted(hooks)}")
    assert table["execve"] == table["execveat of an fd (fexecve)"] == {("bprm_check_security", "exec")}
    assert table["script run directly"] == {("bprm_check_security", "exec")}
    for name in ("sh SCRIPT", "bash SCRIPT", "python3 SCRIPT", "perl SCRIPT", "ld.so BINARY"):
        assert table[name] == {("file_open", "exec")}, (name, table[name])


def test_log_rotates_and_guard_log_prints_it_in_every_format(tmp_path, fs):
    """The agent rotates its own log at the policy's size, keeping its backups; `guard log`
    reads them back oldest first, the same records as JSON, CSV and a table; an untrusted
    subject cannot touch the rotated files."""
    import csv
    import io

    d = fs / "secrets"
    d.mkdir()
    n = 60
    for i in range(n):
        (d / f"f{i}").write_text("s")
    with guard(tmp_path, f"protect: [{d}]\nlog: {{size: 4K, backups: 2}}\n") as g:
        for i in range(n):  # ~300 bytes a line: ~14 to a file, so the oldest are rotated away
            denied(os.open, d / f"f{i}", os.O_WRONLY)
        assert g.lines(where=lambda line: line.get("name") == f"f{n - 1}")
        files = sorted(p.name for p in g.state.iterdir() if p.name.startswith("guard.log"))
        assert files == ["guard.log", "guard.log.1", "guard.log.2"]
        assert all((g.state / name).stat().st_size <= 4096 for name in files)

        records = [json.loads(line) for line in g.cli("log", "--format", "json").stdout.splitlines()]
        names = [r["name"] for r in records]
        first = int(names[0][1:])
        assert 0 < first < n - 20 and names == [f"f{i}" for i in range(first, n)]  # no gap, in order
        assert {(r["event"], r["verdict"], r["operation"], r["pid"]) for r in records} == \
            {("violation", "denied", "write", os.getpid())}
        rows = list(csv.DictReader(io.StringIO(g.cli("log", "--format", "csv").stdout)))
        assert [(r["event"], r["verdict"], r["object"]) for r in rows] == \
            [("violation", "denied", str(d))] * len(records)
        table = g.cli("log").stdout.splitlines()
        assert table[0].split()[:4] == ["TIME", "EVENT", "VERDICT", "OPERATION"]
        assert len(table) == 1 + len(records) and all(str(d) in line for line in table[1:])
        denied(os.truncate, g.state / "guard.log.1", 0)
        # its violation line may rotate the log (guard.log.2 is then briefly gone): once the
        # line is written, the rotation before it is over
        assert g.lines(where=lambda line: line.get("hook") == "path_truncate")
        denied(os.unlink, g.state / "guard.log.2")


def test_io_uring_writes_denied(tmp_path, fs):
    f, free = fs / "file", fs / "free"
    f.write_text("secret")
    free.write_text("")
    early = os.open(f, os.O_RDWR)  # opened before the guard: only the write itself is checked
    try:
        try:
            ring = Uring()
        except OSError as exc:
            pytest.skip(f"io_uring is not available in this kernel ({exc}): io_uring writes NOT tested")
        try:
            with guard(tmp_path, f"protect: [{f}]\n") as g:
                assert ring.write(early, b"x") == -errno.EPERM             # IORING_OP_WRITE
                assert ring.openat(f, os.O_WRONLY) == -errno.EPERM         # IORING_OP_OPENAT
                assert ring.openat(f, os.O_RDONLY | os.O_TRUNC) == -errno.EPERM
                # io_uring works here: reads of the protected file, writes elsewhere
                fd = ring.openat(f, os.O_RDONLY)
                assert fd >= 0
                os.close(fd)
                fd = ring.openat(free, os.O_WRONLY)
                assert fd >= 0 and ring.write(fd, b"ok") == 2
                os.close(fd)
                lines = g.lines(3, where=violations)
        finally:
            ring.close()
        assert {"file_permission", "file_open"} <= {line["hook"] for line in lines}
        assert all(line["object"] == str(f) and line["operation"] == "write" for line in lines)
        assert f.read_text() == "secret" and free.read_text() == "ok"
    finally:
        os.close(early)


def test_overlayfs(tmp_path, fs):
    """Keys are the inodes the hooks see: the overlay's own (stat() reports another device
    for its files) and, for access around the overlay, the layers' inodes."""
    from ebpfkit.tools.guard import core

    subprocess.run(["modprobe", "overlay"], check=False)
    lower, upper_fs, merged = fs / "lower", tmp_path / "upper", fs / "merged"
    (lower / "ldir").mkdir(parents=True)
    (lower / "lfile").write_text("lower")
    (lower / "ldir" / "inner").write_text("inner")
    shutil.copy("/usr/bin/tee", lower / "tee")  # trusted, executed from the overlay
    upper_fs.mkdir()
    merged.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "upper", str(upper_fs)], check=True)  # not the same fs
    try:
        (upper_fs / "u").mkdir()
        (upper_fs / "w").mkdir()
        (upper_fs / "u" / "ufile").write_text("upper")
        subprocess.run(["mount", "-t", "overlay", "guardov", "-o",
                        f"lowerdir={lower},upperdir={upper_fs}/u,workdir={upper_fs}/w", str(merged)],
                       check=True)
        try:
            lfile, ufile, ldir = merged / "lfile", merged / "ufile", merged / "ldir"
            for p in (lfile, ufile):  # what made stat()-based keys miss
                assert kernel_dev_of_stat(os.stat(p).st_dev) != core.key_of(str(p))[0]
            policy = f"protect: [{lfile}, {ufile}, {ldir}]\ntrust: [{merged / 'tee'}]\n"
            with guard(tmp_path, policy) as g:
                for target in (lfile, ufile, ldir / "inner"):
                    denied(os.open, target, os.O_WRONLY)
                assert not (upper_fs / "u" / "lfile").exists()  # denied before any copy-up
                denied(os.unlink, ufile)
                denied(os.chmod, lfile, 0o600)
                denied(os.rename, ldir, merged / "moved")
                # around the overlay: the layers' own inodes are protected too
                for target in (lower / "lfile", upper_fs / "u" / "ufile", lower / "ldir" / "inner"):
                    denied(os.open, target, os.O_WRONLY)
                (merged / "free").write_text("ok")   # not protected
                # the trusted tee, run through the overlay, may write
                tee = subprocess.run([str(merged / "tee"), "-a", str(ufile)], input=b"+tee\n",
                                     stdout=subprocess.DEVNULL)
                assert tee.returncode == 0
                lines = g.lines(9, where=violations)
            assert ufile.read_text() == "upper+tee\n" and lfile.read_text() == "lower"
            assert all(line["object"] in (str(lfile), str(ufile), str(ldir)) for line in lines), lines
            around = [line for line in lines if line.get("matched")]
            assert {line["matched"] for line in around} >= {
                str(lower / "lfile"), str(upper_fs / "u" / "ufile"), str(lower / "ldir")}, around
        finally:
            subprocess.run(["umount", str(merged)], check=False)
    finally:
        subprocess.run(["umount", "-l", str(upper_fs)], check=False)


def test_trust_by_inode_and_inheritance(tmp_path, fs):
    f = fs / "target"
    f.write_text("")
    bins = fs / "bins"
    bins.mkdir()
    tee, sh_inherit, sh_plain = bins / "tee", bins / "sh-inherit", bins / "sh-plain"
    shutil.copy("/usr/bin/tee", tee)
    shutil.copy("/bin/sh", sh_inherit)
    shutil.copy("/bin/sh", sh_plain)
    copy = fs / "tee-copy"
    shutil.copy(tee, copy)
    pdir, free = fs / "pdir", fs / "free"
    pdir.mkdir()
    policy = (f"protect: [{f}, {pdir}]\ntrust:\n  - {tee}\n  - path: {sh_inherit}\n    inherit: true\n"
              f"  - {sh_plain}\n")

    def writes(*argv) -> bool:
        return subprocess.run(list(argv), input=b"x\n", stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0

    with guard(tmp_path, policy):
        assert writes(str(tee), "-a", str(f))                        # trusted
        assert not writes(str(copy), "-a", str(f))                   # same bytes, other inode
        assert not writes("/usr/bin/tee", "-a", str(f))
        script = fs / "script.sh"
        script.write_text(f"#!/bin/sh\n/usr/bin/tee -a {f}\ntrue\n")
        script.chmod(0o755)
        assert writes(str(sh_inherit), str(script))                  # a script run by it inherits
        # `|| exit 1; true`: a forked child (not exec'd in place), and its failure shows
        assert writes(str(sh_inherit), "-c", f"/usr/bin/tee -a {f} || exit 1; true")
        assert not writes(str(sh_plain), "-c", f"/usr/bin/tee -a {f} || exit 1; true")  # no inherit
        assert not writes("/bin/sh", "-c", f"{tee} -a {f} >/dev/null; /usr/bin/tee -a {f}")
        denied(os.open, tee, os.O_WRONLY)  # a trusted binary cannot be rewritten (its inode is trusted)
        # a file the guard has seen unprotected (its verdict cached), moved by a trusted
        # program into a protected directory, is protected there at once
        free.write_text("free")
        assert writes(str(sh_inherit), "-c", f"mv {free} {pdir}/")
        denied(os.open, pdir / "free", os.O_WRONLY)
    assert f.read_text().count("x") == 4


def test_protected_process_survives(tmp_path, fs):
    exe = fs / "sleeper"
    shutil.copy("/bin/sleep", exe)
    victim = subprocess.Popen([str(exe), "300"])
    try:
        with guard(tmp_path, f"processes: [{exe}]\n") as g:
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                denied(os.kill, victim.pid, sig)
            os.kill(victim.pid, 0)  # existence checks still work
            ptrace = subprocess.run([sys.executable, "-c", f"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.exit(0 if libc.ptrace(16, {victim.pid}, 0, 0) == -1 else 1)  # PTRACE_ATTACH
"""])
            assert ptrace.returncode == 0
            with pytest.raises(PermissionError):  # mm_access: EACCES
                open(f"/proc/{victim.pid}/mem", "r+b")
            time.sleep(0.5)
            assert victim.poll() is None
            lines = g.lines(4, where=violations)
            assert {"task_kill", "ptrace_access_check"} <= {line["hook"] for line in lines}
            assert any(line.get("target_pid") == victim.pid and line.get("signal") == 9 for line in lines)
        os.kill(victim.pid, signal.SIGKILL)  # after stop: allowed again
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def _link_ids(pin: str) -> tuple[int, int]:
    """(link id, program id) of a pinned link: a link fd is not refused, a program's is."""
    from ebpfkit.engine import pinned

    fd = pinned.open_pin(pin)
    try:
        info = pinned.link_info(fd)
        return info.id, info.prog_id
    finally:
        os.close(fd)


def _bpftool(*args):
    return subprocess.run([BPFTOOL, *args], capture_output=True, text=True, timeout=120)


def test_self_protection_and_policy_reload(tmp_path, fs):
    """An untrusted root cannot get at the guard through bpf(), its pins, its bpffs, its
    agent, its policy file or state; the trusted admin can, and the agent follows edits of
    the policy file, keeping the old policy when a new one is bad."""
    f, g2 = fs / "first", fs / "second"
    f.write_text("1")
    g2.write_text("2")
    with guard(tmp_path, f"protect: [{f}]\n") as g:
        link_pin = f"{PIN_DIR}/link_guard_file_open"
        link_id, prog_id = _link_ids(link_pin)  # (bpftool link show wants the program's fd too)
        attempts = {
            "link detach (pin)": _bpftool("link", "detach", "pinned", link_pin),
            "link detach (id)": _bpftool("link", "detach", "id", str(link_id)),
            "map update": _bpftool("map", "update", "pinned", f"{PIN_DIR}/protected", "key", "hex",
                                   *["00"] * 16, "value", "hex", "00", "00", "00", "00"),
            "map delete": _bpftool("map", "delete", "pinned", f"{PIN_DIR}/trusted", "key", "hex",
                                   *["00"] * 16),
            "prog fd": _bpftool("prog", "dump", "xlated", "id", str(prog_id)),
            "rm pin": subprocess.run(["rm", "-f", link_pin], capture_output=True, text=True),
            "rm map pin": subprocess.run(["rm", "-f", f"{PIN_DIR}/protected"], capture_output=True, text=True),
            "mv pin dir": subprocess.run(["mv", PIN_DIR, "/sys/fs/bpf/moved"], capture_output=True, text=True),
            "umount bpffs": subprocess.run(["umount", "/sys/fs/bpf"], capture_output=True, text=True),
            "umount -l bpffs": subprocess.run(["umount", "-l", "/sys/fs/bpf"], capture_output=True, text=True),
            "stop": g.cli("stop", check=False),
            "reload": g.cli("reload", str(g.policy), check=False),
        }
        for what, result in attempts.items():
            assert result.returncode != 0, (what, result.stdout, result.stderr)
            if what in ("stop", "reload"):
                assert result.returncode == 4 and "only a subject the running guard trusts" in result.stderr
            elif not what.startswith("umount"):  # umount words EPERM its own way
                assert "Operation not permitted" in result.stderr, (what, result.stderr)
        assert os.path.isdir(PIN_DIR)  # bpffs still mounted, pins in place
        pid = json.loads((g.state / "state.json").read_text())["agent_pid"]
        denied(os.kill, pid, signal.SIGKILL)        # the agent
        denied(os.open, g.policy, os.O_WRONLY)      # the policy file it watches
        denied(os.unlink, g.policy)
        denied(os.open, g.state / "state.json", os.O_WRONLY)   # its state and log
        denied(os.open, g.state / "guard.log", os.O_WRONLY | os.O_APPEND)
        lines = g.lines(15, where=violations)
        hooks = {line["hook"] for line in lines}
        assert {"bpf", "bpf_map", "bpf_prog", "inode_unlink", "inode_rename", "sb_umount",
                "task_kill", "file_open"} <= hooks, hooks
        assert all(line["verdict"] == "denied" for line in lines)
        detach = [line for line in lines if line["hook"] == "bpf"]
        assert detach[0]["bpf_cmd"] == "BPF_LINK_DETACH" and detach[0]["link"] == "link_guard_file_open"
        assert {line["map"] for line in lines if line["hook"] == "bpf_map"} >= {"protected", "trusted"}
        unpin = [line for line in lines if line["hook"] == "inode_unlink"]
        assert unpin[0]["object"] == PIN_DIR and unpin[0]["name"] == "link_guard_file_open"
        # all still in force: every link pinned, the file protected, status readable
        assert len([n for n in os.listdir(PIN_DIR) if n.startswith("link_")]) == n_links()
        denied(os.open, f, os.O_WRONLY)
        status = json.loads(g.cli("status", "--format", "json").stdout)
        assert status["agent"] == "running" and status["denied"] >= 15 and status["lost"] == 0

        # reload: the trusted admin edits the policy in place; the agent swaps it in
        admin_text = g.policy.read_text()
        g.as_admin(f"cat > {g.policy} <<'EOF'\n{admin_text.replace(str(f), str(g2))}EOF\n")
        seen = len(g.reloaded(0, "applied"))
        with open(f, "a") as w:  # no longer protected
            w.write("+")
        denied(os.open, g2, os.O_WRONLY)
        denied(os.open, g.policy, os.O_WRONLY)  # still the watched file
        # a bad version is logged and ignored: the last good one stays in force
        g.as_admin(f"echo 'protect: [relative/path]' > {g.policy}")
        seen = len(g.reloaded(seen, "rejected", text="absolute path"))
        denied(os.open, g2, os.O_WRONLY)
        # replaced by rename (a new inode, as editors do): reloaded, and the new file protected
        new = tmp_path / "policy.new"
        g.as_admin(f"cat > {new} <<'EOF'\n{admin_text}EOF\nmv {new} {g.policy}")
        seen = len(g.reloaded(seen, "applied"))
        denied(os.open, f, os.O_WRONLY)
        with open(g2, "a") as w:
            w.write("+")
        denied(os.open, g.policy, os.O_WRONLY)
        # `guard reload` from the admin context works (and is logged)
        g.admin_cli("reload", str(g.policy))
        assert g.reloaded(seen, "applied")[-1]["by"] == "guard reload"
    assert f.read_text() == "1+" and g2.read_text() == "2+"


def test_audit_mode_then_agent_killed_then_stop(tmp_path, fs):
    f = fs / "file"
    f.write_text("a")
    with guard(tmp_path, f"protect: [{f}]\n", "--audit") as g:
        counters = guard_session.attached()
        before = counters.sample()
        with open(f, "a") as w:  # the open (file_open) and the write (file_permission)
            w.write("b")
        lines = g.lines(2, where=violations)
        assert lines and lines[0]["verdict"] == "allowed (audit)" and lines[0]["hook"] == "file_open"
        after = counters.sample()
        assert after["mode"] == "audit" and after["denied"] == before["denied"]
        assert after["audited"] - before["audited"] == len(lines) and after["lost"] == before["lost"], lines
    assert f.read_text() == "ab"

    killer = fs / "kill"
    shutil.copy(shutil.which("kill") or "/bin/kill", killer)
    with guard(tmp_path, f"protect: [{f}]\ntrust: [{killer}]\n") as g:
        pid = json.loads((g.state / "state.json").read_text())["agent_pid"]
        denied(os.kill, pid, signal.SIGKILL)  # the agent is protected from untrusted subjects
        subprocess.run([str(killer), "-9", str(pid)], check=True)  # a trusted subject may
        deadline = time.monotonic() + 10
        while "not running" not in g.cli("status").stdout:
            assert time.monotonic() < deadline, "the agent survived a trusted SIGKILL"
            time.sleep(0.2)
        links = [n for n in os.listdir(PIN_DIR) if n.startswith("link_")]
        assert len(links) == n_links(), links
        denied(os.open, f, os.O_WRONLY)  # the pins alone keep enforcing
        counters = guard_session.attached()  # and count, with no agent
        assert counters.sample()["denied"] >= 2
    assert not os.path.exists(PIN_DIR)
    with pytest.raises(guard_session.NotRunningError):
        counters.sample()
    with open(f, "a") as w:  # stop removed every hook
        w.write("c")


def test_the_exporters_guard_source_counts_the_denials(tmp_path, fs):
    """`ebpfkit exporter` with the guard source, an untrusted process like any other, serves
    the running guard's counters read through read-only fds: exactly the denials this test
    caused; without a guard, the source is down."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from helpers import wait_for

    def scrape(port) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def reachable(port) -> bool:
        try:
            return bool(scrape(port))
        except OSError:
            return False

    target = fs / "file"
    target.write_text("secret")
    config = tmp_path / "exporter.yaml"
    config.write_text("sources:\n  - source: guard\n")
    port = 19000 + os.getpid() % 1000
    exporter = subprocess.Popen([sys.executable, "-m", "ebpfkit", "exporter", "--config", str(config),
                                 "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True)
    up = ("ebpfkit_exporter_source_up", (("source", "guard"),))
    try:
        assert wait_for(lambda: reachable(port), 120, 0.5), "the exporter did not serve"
        assert scrape(port)[up] == 0  # no guard yet
        with guard(tmp_path, f"protect: [{target}]\n"):
            before = scrape(port)
            assert before[up] == 1, before
            for _ in range(5):
                denied(os.open, target, os.O_WRONLY)
            after = scrape(port)
            assert after[("ebpfkit_guard_denials_total", ())] - before[("ebpfkit_guard_denials_total", ())] == 5
            assert after[("ebpfkit_guard_audited_total", ())] == before[("ebpfkit_guard_audited_total", ())]
            assert after[("ebpfkit_guard_events_lost_total", ())] == 0
        gone = scrape(port)
        assert gone[up] == 0 and ("ebpfkit_guard_denials_total", ()) not in gone
        exporter.send_signal(signal.SIGINT)
        assert exporter.wait(60) == 0
        assert "Traceback" not in exporter.stderr.read()
    finally:
        if exporter.poll() is None:
            exporter.kill()
            exporter.wait()
