"""Bait files: canaries declared in the rules (``- bait:``), planted where missing or adopted
where present, and known to the kernel by (device, inode) and by file name.

Nothing legitimate writes, truncates, renames or removes a bait; ransomware walking a
directory does, usually first (its files are named to sort before the others). A planted
bait is removed when the session ends, if it is still the file planted; an adopted one is
left as it was.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from ...errors import ConfigError
from ...sysinfo.files import inode_of

BAIT_BYTES = 48 * 1024   # enough to look like a document worth encrypting
NAME_LEN = 63            # DETECT_NAME_LEN - 1: the kernel keys a longer name by its last 63 bytes


@dataclass(frozen=True)
class BaitFile:
    path: str
    declared_by: str          # the `- bait:` name
    planted: bool             # created by this session (and removed by it)
    key: tuple[int, int]      # (s_dev, i_ino) as the kernel sees the inode

    @property
    def name_key(self) -> bytes:
        """Its file name as the bait_names map keys it."""
        return os.path.basename(self.path).encode()[-NAME_LEN:]


class Known:
    """The session's baits, indexed as the kernel knows them (``files[id]``), and the one an
    event names: by inode it is exact; by file name (truncate, rename, unlink give only a
    path), several baits may share the name, so the path the call named, made absolute
    against the process's working directory, picks among them."""

    def __init__(self, files: list[BaitFile]):
        self.files = files
        self._by_path = {os.path.normpath(b.path): b for b in files}

    def of_event(self, bait_id: int, by_name: bool, pid: int, *paths: str) -> BaitFile | None:
        if by_name:
            for path in filter(None, paths):
                if not os.path.isabs(path):
                    try:
                        path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
                    except OSError:
                        continue  # gone (killed) already: the kernel's pick stands
                found = self._by_path.get(os.path.normpath(path))
                if found:
                    return found
        return self.files[bait_id] if bait_id < len(self.files) else None


def place(declarations) -> tuple[list[BaitFile], list[str]]:
    """The bait files of ``declarations`` (policy.rules.Bait), planting the missing ones
    (unless ``plant: false``); and warnings for those left out. A path that cannot hold a bait
    (a directory, a missing parent) is a ConfigError naming its declaration."""
    files: list[BaitFile] = []
    warnings: list[str] = []
    seen: set[str] = set()
    try:
        for decl in declarations:
            for path in decl.paths:
                if path in seen:
                    continue
                seen.add(path)
                bait = _one(decl, path)
                if bait is None:
                    warnings.append(f"bait {decl.name!r}: {path} does not exist (plant: false): not watched")
                else:
                    files.append(bait)
    except BaseException:
        remove_planted(files)
        raise
    return files, warnings


def _one(decl, path: str) -> BaitFile | None:
    where = f"bait {decl.name!r} ({decl.source}:{decl.line})"
    planted = False
    if os.path.lexists(path):
        if os.path.islink(path) or not os.path.isfile(path):
            raise ConfigError("rules", f"{where}: {path} is not a regular file")
    elif not decl.plant:
        return None
    else:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise ConfigError("rules", f"{where}: cannot plant {path}: no directory {parent}")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError("rules", f"{where}: cannot plant {path}: {exc.strerror}") from None
        try:
            os.write(fd, os.urandom(BAIT_BYTES))
        finally:
            os.close(fd)
        planted = True
    return BaitFile(path, decl.name, planted, inode_of(path)[0])


def remove_planted(files) -> None:
    """Remove the baits this session planted, each only if its path still names that file."""
    for bait in files:
        if bait.planted:
            with contextlib.suppress(OSError):
                if inode_of(bait.path)[0] == bait.key:
                    os.unlink(bait.path)
