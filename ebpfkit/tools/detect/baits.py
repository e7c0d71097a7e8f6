"""Bait files: canaries declared in the rules (``- bait:``), planted where missing or adopted
where present, and watched (watch.py) by (device, inode) and by file name.

Nothing legitimate writes, truncates, renames or removes a bait; ransomware walking a
directory does, usually first (its files are named to sort before the others). A planted
bait is removed when the session ends, if it is still the file planted; an adopted one is
left as it was.
"""

from __future__ import annotations

import contextlib
import os

from ...errors import ConfigError
from ...sysinfo.files import inode_of
from .watch import Entry

BAIT_BYTES = 48 * 1024   # enough to look like a document worth encrypting


def place(declarations) -> tuple[list[Entry], list[str]]:
    """The bait files of ``declarations`` (policy.rules.Bait), planting the missing ones
    (unless ``plant: false``); and warnings for those left out. A path that cannot hold a bait
    (a directory, a missing parent) is a ConfigError naming its declaration."""
    files: list[Entry] = []
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


def _one(decl, path: str) -> Entry | None:
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
    return Entry(os.path.normpath(path), inode_of(path)[0], bait=decl.name, planted=planted)


def remove_planted(files) -> None:
    """Remove the baits this session planted, each only if its path still names that file."""
    for bait in files:
        if bait.planted:
            with contextlib.suppress(OSError):
                if inode_of(bait.path)[0] == bait.key:
                    os.unlink(bait.path)
