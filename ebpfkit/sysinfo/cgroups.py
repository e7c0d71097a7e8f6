"""cgroup v2: where the hierarchy is mounted, and a cgroup's id <-> its directory.

A cgroup's id (``bpf_get_current_cgroup_id()``, what sockops/cgroup programs attach by) is
the inode number of its directory in the cgroup2 filesystem.
"""

from __future__ import annotations

import os

from ..errors import NotSupportedError
from .mounts import MountTable

CGROUP2_HINT = "mount -t cgroup2 none /sys/fs/cgroup/unified"


def cgroup2_mount(table: MountTable | None = None) -> str | None:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified on hybrid
    systems); None without one."""
    points = (table or MountTable()).points("cgroup2")
    return points[0] if points else None


def require_cgroup2() -> str:
    """The cgroup v2 mount point, or NotSupportedError (exit 3) naming how to mount one."""
    point = cgroup2_mount()
    if point is None:
        raise NotSupportedError("cgroup2", "no cgroup v2 hierarchy is mounted", hint=CGROUP2_HINT)
    return point


class NotCgroup2Error(ValueError):
    """A path that is not a cgroup v2 directory; ``hint`` says where those are."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def cgroup2_directory(path: str) -> tuple[str, int]:
    """(real path, cgroup id) of the cgroup v2 directory ``path``; NotCgroup2Error saying why
    it is not one (missing, a file, on a cgroup v1 hierarchy or another filesystem)."""
    where = f"use a directory under {cgroup2_mount() or f'(none mounted: {CGROUP2_HINT})'}"
    real = os.path.realpath(path)
    if not os.path.exists(real):
        raise NotCgroup2Error(f"cgroup {path} does not exist", where.replace("use a directory", "create it (mkdir)"))
    if not os.path.isdir(real):
        raise NotCgroup2Error(f"{path} is not a cgroup directory", where)
    mount = MountTable().containing(real)
    point, fstype = (mount.point, mount.fstype) if mount else ("", "")
    if fstype == "cgroup":
        raise NotCgroup2Error(f"{path} is on a cgroup v1 hierarchy ({point}), not cgroup v2", where)
    if fstype != "cgroup2":
        raise NotCgroup2Error(f"{path} is not a cgroup v2 directory (it is on {fstype or 'no'} filesystem)", where)
    return real, cgroup_id(real)


def cgroup_id(path: str) -> int:
    """The id of the cgroup v2 directory ``path``."""
    return os.stat(path).st_ino


def walk_cgroups(root: str):
    """(id, absolute path) of ``root`` and of every cgroup below it."""
    for directory, _, _ in os.walk(root):
        try:
            yield cgroup_id(directory), directory
        except OSError:
            continue  # removed while we walked


def cgroup_path(cid: int, root: str | None = None) -> str | None:
    """The directory of the cgroup with id ``cid`` (under ``root``, default the cgroup2
    mount); None if there is none."""
    root = root or cgroup2_mount()
    if not root:
        return None
    return next((path for found, path in walk_cgroups(root) if found == cid), None)


def process_cgroup(pid: int | str = "self") -> str:
    """The cgroup v2 directory of process ``pid`` (the ``0::`` line of /proc/<pid>/cgroup)."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                rel = line[3:].strip().split(" (deleted)")[0]
                return os.path.normpath(os.path.join(require_cgroup2(), rel.lstrip("/")))
    raise NotSupportedError("cgroup2", f"process {pid} is in no cgroup v2 hierarchy")
