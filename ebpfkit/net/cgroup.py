"""Child cgroups (v2) to attach sockops / sk_msg / cgroup_skb programs to, never the root.

Where cgroup2 is mounted differs (``/sys/fs/cgroup`` unified, ``/sys/fs/cgroup/unified`` hybrid),
so it is read from /proc/mounts. A socket belongs to the cgroup of the process that created
it, so the traffic a test wants seen must come from sockets made inside the child cgroup:
``ChildCgroup.entered()`` moves this process in for a ``with`` block, ``run()`` starts a
command inside.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from ..errors import NotSupportedError


def cgroup2_mount() -> str:
    """The mount point of the cgroup v2 hierarchy."""
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return fields[1].replace("\\040", " ")
    raise NotSupportedError("cgroup2", "no cgroup v2 hierarchy is mounted",
                            hint="mount -t cgroup2 none /sys/fs/cgroup/unified")


def current_cgroup(pid: int | str = "self") -> str:
    """Path of ``pid``'s cgroup v2 directory (the ``0::`` line of /proc/<pid>/cgroup)."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                rel = line[3:].strip().split(" (deleted)")[0]
                return os.path.normpath(os.path.join(cgroup2_mount(), rel.lstrip("/")))
    raise NotSupportedError("cgroup2", f"process {pid} is in no cgroup v2 hierarchy")


def _procs(path: str) -> list[int]:
    with open(os.path.join(path, "cgroup.procs")) as f:
        return [int(x) for x in f.read().split()]


def move_process(pid: int, path: str) -> None:
    """Move a whole process (all its threads) into the cgroup directory ``path``."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(pid))


def remove_cgroup(path: str, timeout: float = 5.0) -> None:
    """Move every process out to the parent, then remove ``path`` (children first)."""
    if not os.path.isdir(path):
        return
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            remove_cgroup(entry.path, timeout)
    parent = os.path.dirname(path)
    deadline = time.monotonic() + timeout
    while True:
        for pid in _procs(path):
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                move_process(pid, parent)
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            # EBUSY while a process is still being moved or a fork raced us
            if exc.errno != 16 or time.monotonic() > deadline:
                raise


class ChildCgroup:
    """``<cgroup2>/ebpfkit-<purpose>-<pid>``, created on enter and removed (after moving any
    processes back to the parent) on exit."""

    def __init__(self, purpose: str = "test", parent: str | None = None):
        self.parent = parent or cgroup2_mount()
        self.name = f"ebpfkit-{purpose}-{os.getpid()}"
        self.path = os.path.join(self.parent, self.name)
        self.created = False

    def create(self) -> "ChildCgroup":
        os.mkdir(self.path)
        self.created = True
        return self

    def close(self) -> None:
        if self.created:
            self.created = False
            remove_cgroup(self.path)

    def procs(self) -> list[int]:
        return _procs(self.path)

    def add(self, pid: int) -> None:
        move_process(pid, self.path)

    @contextlib.contextmanager
    def entered(self):
        """Move this whole process in for the ``with`` block, then back where it was.
        (cgroup v2 moves processes, not single threads, outside threaded cgroups.)"""
        home = current_cgroup()
        move_process(os.getpid(), self.path)
        try:
            yield self
        finally:
            move_process(os.getpid(), home)

    def popen(self, argv, **kwargs) -> subprocess.Popen:
        """Start ``argv`` already inside the cgroup: a shell joins it, then execs the command,
        so not one instruction of the command runs outside."""
        return subprocess.Popen(self._wrap(argv), **kwargs)

    def run(self, argv, **kwargs) -> subprocess.CompletedProcess:
        """Like ``subprocess.run`` but inside the cgroup."""
        return subprocess.run(self._wrap(argv), **kwargs)

    def _wrap(self, argv) -> list[str]:
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path, *argv]

    def __enter__(self) -> "ChildCgroup":
        return self.create()

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<ChildCgroup {self.path}>"
