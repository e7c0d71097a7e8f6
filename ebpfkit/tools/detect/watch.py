"""What detect's kernel side reports file calls on: watched files and directories, each keyed by
the (device, inode) the kernel sees, and files also by name.

Entries are the bait files (baits.py) and the paths rules name: ``fd.name = PATH`` or ``in``
(a file: opened for writing, created, truncated, renamed or removed) and ``fd.directory``
(a directory: a file opened for writing, created or renamed into it, one level down). A path that does
not exist when the session opens is not watched (``missing``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...sysinfo.files import inode_of

NAME_LEN = 63   # DETECT_NAME_LEN - 1: the kernel keys a longer name by its last 63 bytes
BAIT, DIRECTORY = 1, 2  # enum detect_watch_flags


@dataclass(frozen=True)
class Entry:
    path: str
    key: tuple[int, int]        # (s_dev, i_ino) as the kernel sees the inode
    bait: str | None = None     # the `- bait:` declaring it
    planted: bool = False       # a bait this session created (and removes)
    is_dir: bool = False

    @property
    def name_key(self) -> bytes:
        """Its file name as the watch_names map keys it."""
        return os.path.basename(self.path).encode()[-NAME_LEN:]

    @property
    def flags(self) -> int:
        return (BAIT if self.bait else 0) | (DIRECTORY if self.is_dir else 0)


def resolve(files, directories) -> tuple[list[Entry], list[str]]:
    """Entries for the absolute ``files`` and ``directories`` that exist; the paths left out."""
    entries, missing = [], []
    for paths, is_dir in ((sorted(files), False), (sorted(directories), True)):
        for path in paths:
            if not os.path.isabs(path) or (os.path.isdir(path) != is_dir):
                missing.append(path)
                continue
            try:
                entries.append(Entry(os.path.normpath(path), inode_of(path)[0], is_dir=is_dir))
            except OSError:
                missing.append(path)
    return entries, missing


class Watched:
    """The session's entries, indexed as the kernel knows them (``entries[id]``), and what an
    event names: by inode it is exact; by file name (truncate, rename, unlink give only a
    path), several entries may share the name, so the path the call named, made absolute
    against the process's working directory, picks among them; in a watched directory, the
    file is the directory's path and the name the call gave."""

    def __init__(self, entries: list[Entry]):
        self.entries = entries
        self._by_path = {e.path: e for e in entries if not e.is_dir}
        self._dirs = [e for e in entries if e.is_dir]

    def of_event(self, ev) -> tuple[Entry | None, str | None]:
        """(the entry, the file's path) of a DK_FILE event."""
        paths = (ev.path, bytes(ev.args).partition(b"\0")[0].decode(errors="replace"))
        if ev.by_dir and ev.by_name and paths[1]:
            return self._renamed_into(ev, paths[1])
        if ev.by_name:
            for path in filter(None, paths):
                if not os.path.isabs(path):
                    try:
                        path = os.path.join(os.readlink(f"/proc/{ev.tgid}/cwd"), path)
                    except OSError:
                        continue  # gone (killed) already: the kernel's pick stands
                found = self._by_path.get(os.path.normpath(path))
                if found:
                    return found, found.path
        if ev.watch_id >= len(self.entries):
            return None, None
        entry = self.entries[ev.watch_id]
        if ev.by_dir:
            return entry, os.path.join(entry.path, os.path.basename(ev.path)) if ev.path else entry.path
        return entry, entry.path

    def _renamed_into(self, ev, newpath: str) -> tuple[Entry | None, str | None]:
        """A rename whose new path may put the file in a watched directory. The kernel compared
        a bare name's directory by inode, a path's parent only by its name, and could not tell
        for a parent written "." or ".."; it sent the (dev, ino) of the directory the new path
        starts from (newdirfd's, or the working directory). Here the new path's directory is
        compared by inode, without the process (which may be gone): an absolute one is looked
        up, a relative one is matched against each watched directory D by asking whether the
        path, taken from the directory the kernel named, leads to D."""
        name, rel = os.path.basename(newpath), os.path.normpath(os.path.dirname(newpath) or ".")
        if os.path.isabs(newpath):
            try:
                key = inode_of(rel)[0]
            except OSError:
                return None, None
            found = next((e for e in self._dirs if e.key == key), None)
        else:
            base = (int(ev.arg[0]), int(ev.arg[1]))
            found = next((e for e in self._dirs if _leads_to(base, rel, e)), None)
        return (found, os.path.join(found.path, name)) if found else (None, None)


def _leads_to(base: tuple[int, int], rel: str, entry: Entry) -> bool:
    """Whether the relative directory path ``rel`` (normalized: ".." only leading), taken from
    the directory whose kernel key is ``base``, is the watched directory ``entry``."""
    parts = [] if rel == "." else rel.split("/")
    ups = len(parts) - len([p for p in parts if p != ".."])
    down = parts[ups:]
    top = entry.path
    for part in reversed(down):  # entry = top/down...: top is where the path turns down
        if os.path.basename(top) != part:
            return False
        top = os.path.dirname(top)
    if ups == 0:
        starts = [top]
    elif ups == 1:  # base is a directory in top
        try:
            starts = [os.path.join(top, d) for d in os.listdir(top)]
        except OSError:
            return False
    else:
        return False  # "../../x": not searched
    for start in starts:
        try:  # the inode number first: the kernel's view of the device costs a mount table read
            if os.stat(start).st_ino == base[1] and inode_of(start)[0] == base:
                return True
        except OSError:
            continue
    return False
