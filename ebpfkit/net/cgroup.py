"""Child cgroups (v2) to attach sockops / sk_msg / cgroup_skb programs to, never the root.

Where cgroup2 is mounted differs (``/sys/fs/cgroup`` unified, ``/sys/fs/cgroup/unified`` hybrid),
so ``ebpfkit.sysinfo.cgroups`` finds it in the mount table. A socket belongs to the cgroup of the process that created
it, so the traffic a test wants seen must come from sockets made inside the child cgroup:
``ChildCgroup.entered()`` moves this process in for a ``with`` block, ``run()`` starts a
command inside.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from ..sysinfo.cgroups import process_cgroup, require_cgroup2


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
    processes back to the parent) on exit. Below another child, ``name`` may be any (a
    container engine's, say)."""

    def __init__(self, purpose: str = "test", parent: str | None = None, name: str | None = None):
        self.parent = parent or require_cgroup2()
        self.name = name or f"ebpfkit-{purpose}-{os.getpid()}"
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
        home = process_cgroup()
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
