"""Every route to a file's bytes, and every way to run it, for the guard's VM tests.

A read route takes the file and the fds opened before the guard started and returns the
bytes it got; an exec route runs the file and returns what the program printed. Both raise
PermissionError when the guard refuses them, so the test tries each first on an unprotected
twin (where it must work) and then on the protected file.

Run as a script by a trusted subject, it opens a file and passes the fd over a unix socket
(`python guard_routes.py send-fd SOCKET_FD PATH`): the untrusted side then holds an fd it
never opened."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

LD_SO = "/lib64/ld-linux-x86-64.so.2"
SIZE = 64  # bytes every route reads


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _denied_if(err: int, what: str):
    if err:
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _open_read(path, flags=os.O_RDONLY) -> bytes:
    fd = os.open(path, flags)
    try:
        return os.read(fd, SIZE)
    finally:
        os.close(fd)


def _mapped(fd: int, flags: int) -> bytes:
    with mmap.mmap(fd, SIZE, flags, mmap.PROT_READ) as m:
        return m[:SIZE]


def _open_mapped(path, flags) -> bytes:
    fd = os.open(path, flags)
    try:
        return _mapped(fd, mmap.MAP_SHARED)
    finally:
        os.close(fd)


def _reopened(path) -> bytes:
    fd = os.open(path, os.O_PATH)
    try:
        return _open_read(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def _readv(fd) -> bytes:
    buf = bytearray(SIZE)
    n = os.preadv(fd, [buf], 0)
    return bytes(buf[:n])


def _into_file(scratch: Path, copy) -> bytes:
    """Bytes the kernel copied from an fd into a file on the same filesystem (copy_file_range
    may refuse another), by ``copy(out_fd)``."""
    out_path = scratch / "copied"
    out = os.open(out_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        copy(out)
        return os.pread(out, SIZE, 0)
    finally:
        os.close(out)
        out_path.unlink()


def _spliced(fd) -> bytes:
    r, w = os.pipe()
    try:
        os.splice(fd, w, SIZE, offset_src=0)
        return os.read(r, SIZE)
    finally:
        os.close(r)
        os.close(w)


def _protect_to_read(fd) -> bytes:
    """mmap PROT_NONE (nothing readable: allowed), then mprotect PROT_READ."""
    libc = _libc()
    addr = libc.mmap(None, mmap.PAGESIZE, 0, mmap.MAP_PRIVATE, fd, 0)  # PROT_NONE
    _denied_if(ctypes.get_errno() if addr in (None, ctypes.c_void_p(-1).value) else 0, "mmap")
    try:
        _denied_if(0 if libc.mprotect(addr, mmap.PAGESIZE, mmap.PROT_READ) == 0 else ctypes.get_errno(),
                   "mprotect")
        return ctypes.string_at(addr, SIZE)
    finally:
        libc.munmap(addr, mmap.PAGESIZE)


class Passed:
    """An fd of ``path`` opened by the trusted ``admin`` shell's python and passed over a unix socket."""

    def __init__(self, admin: Path, path, env: dict):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with mine:
            try:
                helper = subprocess.Popen(
                    [str(admin), "-c", f'exec "{sys.executable}" "{__file__}" send-fd {theirs.fileno()} "{path}"'],
                    pass_fds=(theirs.fileno(),), env=env, stderr=subprocess.PIPE)
            finally:
                theirs.close()
            _, fds, _, _ = socket.recv_fds(mine, 16, 1)
            assert helper.wait(60) == 0, helper.stderr.read()
        (self.fd,) = fds

    def __enter__(self):
        return self.fd

    def __exit__(self, *exc):
        os.close(self.fd)


# name -> (what it does, route(path, early, ctx) -> bytes). `early`: {"ro": fd, "rw": fd}
# opened before the guard started; `ctx` holds the io_uring ("uring"), the trusted admin shell
# ("admin", with "env") and a scratch directory on the file's filesystem ("scratch").
READ_ROUTES = {
    "open O_RDONLY, read": lambda p, e, c: _open_read(p),
    "open O_RDWR, read": lambda p, e, c: _open_read(p, os.O_RDWR),
    "open O_RDWR, mmap PROT_READ": lambda p, e, c: _open_mapped(p, os.O_RDWR),
    "O_PATH, reopen /proc/self/fd/N": lambda p, e, c: _reopened(p),
    "earlier fd: read": lambda p, e, c: os.read(e["ro"], SIZE),
    "earlier fd: pread": lambda p, e, c: os.pread(e["ro"], SIZE, 0),
    "earlier fd: readv": lambda p, e, c: _readv(e["ro"]),
    "earlier fd: sendfile": lambda p, e, c: _into_file(c["scratch"], lambda out: os.sendfile(out, e["ro"], 0, SIZE)),
    "earlier fd: splice": lambda p, e, c: _spliced(e["ro"]),
    "earlier fd: copy_file_range": lambda p, e, c: _into_file(
        c["scratch"], lambda out: os.copy_file_range(e["ro"], out, SIZE, 0, 0)),
    "earlier fd: mmap private PROT_READ": lambda p, e, c: _mapped(e["ro"], mmap.MAP_PRIVATE),
    "earlier fd: mmap shared PROT_READ": lambda p, e, c: _mapped(e["ro"], mmap.MAP_SHARED),
    "earlier O_RDWR fd: mmap shared PROT_READ": lambda p, e, c: _mapped(e["rw"], mmap.MAP_SHARED),
    "earlier fd: mmap PROT_NONE, mprotect PROT_READ": lambda p, e, c: _protect_to_read(e["ro"]),
    "io_uring: read earlier fd": lambda p, e, c: c["uring"].read(e["ro"], SIZE),
    "io_uring: openat O_RDONLY": lambda p, e, c: c["uring"].open_read(p, SIZE),
    "fd passed over a unix socket: read": lambda p, e, c: _with_passed(c, p, lambda fd: os.pread(fd, SIZE, 0)),
    "fd passed over a unix socket: mmap": lambda p, e, c: _with_passed(
        c, p, lambda fd: _mapped(fd, mmap.MAP_PRIVATE)),
}


def _with_passed(ctx, path, use):
    with Passed(ctx["admin"], path, ctx["env"]) as fd:
        return use(fd)


def run(argv, **kw) -> str:
    """Run argv; its stdout, or PermissionError when it failed saying it was not permitted."""
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, **kw)
    if result.returncode != 0:
        # dash says only "Can't open FILE"; the twin shows the file is there to open
        if "not permitted" in result.stderr or "an't open" in result.stderr:
            raise PermissionError(errno.EPERM, f"{argv[0]}: {result.stderr.strip()}")
        raise RuntimeError(f"{argv} exited {result.returncode}: {result.stderr}")
    return result.stdout


def _fexecve(prog) -> str:
    """execveat(fd, "", AT_EMPTY_PATH) of an O_PATH fd, in a child: opening for reading would
    already be an interpreter's (this python's) read of an exec-protected file."""
    r, w = os.pipe()
    fd = os.open(prog, os.O_PATH)
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        try:
            os.execve(fd, [str(prog), "ran"], os.environ)
        except OSError as exc:
            os._exit(100 + exc.errno)
    os.close(w)
    os.close(fd)
    with os.fdopen(r) as out:
        text = out.read()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code >= 100:
        raise OSError(code - 100, os.strerror(code - 100), str(prog))
    return text


def _memfd_run(prog) -> str:
    """The program's bytes (read by cat, not an interpreter) run from a memfd."""
    data = subprocess.run(["cat", str(prog)], capture_output=True, check=False)
    if data.returncode != 0:
        raise PermissionError(errno.EPERM, data.stderr.decode().strip())
    fd = os.memfd_create("copy", 0)
    try:
        os.write(fd, data.stdout)
        return run([f"/proc/self/fd/{fd}", "ran"], pass_fds=(fd,))
    finally:
        os.close(fd)


def _copy_run(files: dict, scratch: Path) -> str:
    prog = files["prog"]
    copy = scratch / f"copy-{prog.parent.name}"
    run(["cp", prog, copy])
    try:
        return run([copy, "ran"])
    finally:
        copy.unlink()


def exec_files(directory: Path) -> dict:
    """The programs exec routes run, in ``directory``: each prints "ran"."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/echo", directory / "prog")
    (directory / "s.sh").write_text("#!/bin/sh\necho ran\n")
    (directory / "s.py").write_text("print('ran')\n")
    (directory / "s.pl").write_text("print \"ran\\n\";\n")
    for name in ("s.sh", "s.py", "s.pl"):
        (directory / name).chmod(0o755)
    return {"prog": directory / "prog", "sh": directory / "s.sh", "py": directory / "s.py",
            "pl": directory / "s.pl"}


# name -> route(files, scratch) -> what the program printed
EXEC_ROUTES = {
    "execve": lambda f, s: run([f["prog"], "ran"]),
    "execveat of an fd (fexecve)": lambda f, s: _fexecve(f["prog"]),
    "script run directly": lambda f, s: run([f["sh"]]),
    "sh SCRIPT": lambda f, s: run(["/bin/sh", f["sh"]]),
    "bash SCRIPT": lambda f, s: run(["bash", f["sh"]]),
    "python3 SCRIPT": lambda f, s: run([sys.executable, f["py"]]),
    "perl SCRIPT": lambda f, s: run(["perl", f["pl"]]),
    "sh < SCRIPT (opened by a shell)": lambda f, s: run(["/bin/sh", "-c", f"/bin/sh < {f['sh']}"]),
    "ld.so BINARY": lambda f, s: run([LD_SO, f["prog"], "ran"]),
}

# reads of the file's bytes by programs that are no interpreter: an exec rule allows them,
# `deny: [exec, read]` does not
COPY_ROUTES = {
    "a copy, run": _copy_run,
    "cat SCRIPT | sh": lambda f, s: run(["bash", "-c", f"set -o pipefail; cat {f['sh']} | /bin/sh"]),
    "its bytes in a memfd, run": lambda f, s: _memfd_run(f["prog"]),
}


def _send_fd(sock_fd: int, path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    with socket.socket(fileno=sock_fd) as sock:
        socket.send_fds(sock, [b"f"], [fd])
    return 0


if __name__ == "__main__":
    assert sys.argv[1] == "send-fd", sys.argv
    sys.exit(_send_fd(int(sys.argv[2]), sys.argv[3]))
