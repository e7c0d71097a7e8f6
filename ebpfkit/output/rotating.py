"""Files that rotate, for tools with a log of their own (irqoff's -f, detect's alerts, the
guard's log): RotatingLines, a file-like object an ``Output`` writes to, rotated (as
logging's RotatingFileHandler does: FILE.1 the newest old one, ``backups`` kept) before a line
that would take it past ``max_bytes``, lines never split across files (not through logging
itself: its handler swallows errors, and a Ctrl-C in the middle of a rotation would leave it
writing to a closed file; here the next write reopens it); and ``records``, which reads such
a log of JSON lines back, its rotated files first, following it as it grows if asked."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Iterator

FOLLOW_POLL = 0.2


class RotatingLines:
    """write()/flush() of whole lines into a rotating file; close() when done."""

    def __init__(self, path: str, max_bytes: int, backups: int):
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self._pending = ""
        self._file = open(path, "a", encoding="utf-8")

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._write_line(line + "\n")
        return len(text)

    def _write_line(self, line: str) -> None:
        if self._file.closed:  # a rotation was interrupted (Ctrl-C)
            self._file = open(self.path, "a", encoding="utf-8")
        size = len(line.encode())
        if self._file.tell() and self._file.tell() + size > self.max_bytes:
            self._rotate()
        self._file.write(line)

    def _rotate(self) -> None:
        self._file.close()
        if self.backups:
            for n in range(self.backups - 1, 0, -1):
                if os.path.exists(f"{self.path}.{n}"):
                    os.replace(f"{self.path}.{n}", f"{self.path}.{n + 1}")
            os.replace(self.path, f"{self.path}.1")
        self._file = open(self.path, "w", encoding="utf-8")

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        if self._pending:
            self.write("\n")
        self._file.close()


def rotated(path: str) -> list[str]:
    """The log's files, oldest first: FILE.N ... FILE.1, FILE."""
    backups = []
    n = 1
    while os.path.exists(f"{path}.{n}"):
        backups.append(f"{path}.{n}")
        n += 1
    return [*reversed(backups), path]


def records(path: str, follow: bool = False) -> Iterator[dict]:
    """Every record in the log's files, oldest first; with ``follow``, then the new ones as
    they come, across rotations (lines rotated away before they were read are lost only when
    more rotations than kept backups happened meanwhile). A line that is not JSON (cut by a
    full disk) is skipped."""
    reading = None  # the inode of the file last read to its end
    while True:
        files = rotated(path)
        inodes = [_inode(name) for name in files]
        start = inodes.index(reading) + 1 if reading in inodes else 0
        for name in files[start:-1]:  # rotated files are complete
            with contextlib.suppress(FileNotFoundError), open(name, encoding="utf-8") as f:
                yield from _parse(f)
        try:
            f = open(path, encoding="utf-8")
        except FileNotFoundError:
            if not follow:
                return
            time.sleep(FOLLOW_POLL)
            continue
        with f:
            reading = os.fstat(f.fileno()).st_ino
            while True:
                at = f.tell()
                line = f.readline()
                if line.endswith("\n"):
                    yield from _parse([line])
                elif not follow:
                    yield from _parse([line])
                    return
                elif _inode(path) != reading:
                    f.seek(at)
                    yield from _parse(f)  # its last lines, written before the rotation
                    break
                else:
                    f.seek(at)  # a line being written: read it whole next time
                    time.sleep(FOLLOW_POLL)


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _parse(lines) -> Iterator[dict]:
    for line in lines:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                yield record
