"""The mount table: /proc/self/mountinfo parsed once, for every question about mounts
(is bpffs mounted, where is cgroup2, which filesystem holds a path, which mount is id N).

mountinfo (proc(5)) rather than /proc/mounts: it also gives the mount id, the device
number and the root of bind mounts, and escapes space, tab, newline and backslash as \\ooo.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .devices import DevNumber, encode_kernel_dev

MOUNTINFO = "/proc/self/mountinfo"


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo."""

    mount_id: int
    parent_id: int
    number: DevNumber    # (major, minor) of the filesystem (st_dev of its files)
    root: str            # the directory of the filesystem mounted here ("/" unless a bind mount)
    point: str           # where it is mounted
    options: str         # per-mount options: rw,nosuid,relatime
    fstype: str          # "ext4", "proc", "fuse.sshfs"
    source: str          # "/dev/sda1", "proc", "none"
    super_options: str   # per-filesystem options: overlay's lowerdir=..., upperdir=...

    @property
    def kernel_dev(self) -> int:
        """The filesystem's s_dev as BPF programs see it."""
        return encode_kernel_dev(*self.number)

    def holds(self, path: str) -> bool:
        """Whether ``path`` (absolute, normalized) is at or below this mount point."""
        return path == self.point or path.startswith(self.point.rstrip("/") + "/")


def unescape(field: str) -> str:
    """mountinfo's \\ooo escapes back to characters."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """Every well-formed line of a mountinfo text, in order (later mounts hide earlier ones)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 3:
            continue
        try:
            major, minor = (int(n) for n in fields[2].split(":"))
            ids = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        mounts.append(Mount(ids[0], ids[1], (major, minor), unescape(fields[3]), unescape(fields[4]),
                            fields[5], unescape(tail[0]), unescape(tail[1]), tail[2]))
    return mounts


class MountTable:
    """The mounts of this process's mount namespace.

    ``MountTable()`` reads mountinfo now (and again when ``by_id`` misses: a new mount);
    ``MountTable(text)`` parses the given text and never reads anything."""

    def __init__(self, text: str | None = None):
        self._text = text
        self.mounts: list[Mount] = []
        self.refresh()

    def refresh(self) -> None:
        text = self._text
        if text is None:
            try:
                with open(MOUNTINFO) as f:
                    text = f.read()
            except OSError:
                text = ""
        self.mounts = parse_mountinfo(text)
        self._by_id = {m.mount_id: m for m in self.mounts}

    def by_id(self, mount_id: int) -> Mount | None:
        if mount_id not in self._by_id and self._text is None:
            self.refresh()
        return self._by_id.get(mount_id)

    def of_type(self, fstype: str) -> list[Mount]:
        return [m for m in self.mounts if m.fstype == fstype]

    def points(self, fstype: str) -> list[str]:
        """Where filesystems of ``fstype`` are mounted, in mount order."""
        return [m.point for m in self.of_type(fstype)]

    def has(self, point: str, fstype: str) -> bool:
        """Whether a ``fstype`` filesystem is mounted at ``point``."""
        return point in self.points(fstype)

    def containing(self, path: str) -> Mount | None:
        """The mount ``path`` lies on: the longest mount point above it, the later one of
        two at the same point (it hides the earlier one)."""
        path = os.path.normpath(path)
        best = None
        for m in self.mounts:
            if m.holds(path) and (best is None or len(m.point) >= len(best.point)):
                best = m
        return best

    def of_device(self, number: DevNumber) -> Mount | None:
        """A mount of the filesystem on device ``number``: one of its whole filesystem (root
        "/") if there is one, else the first bind mount of a part of it."""
        found = [m for m in self.mounts if m.number == number]
        return next((m for m in found if m.root == "/"), found[0] if found else None)
