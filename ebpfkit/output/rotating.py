"""A results file that rotates, for tools with a log file of their own (irqoff's -f): a
file-like object an ``Output`` writes to, rotated (as logging's RotatingFileHandler does:
FILE.1 the newest old one, ``backups`` kept) before a line that would take it past
``max_bytes``. Lines are never split across files. Not through logging itself: its handler
swallows errors, and a Ctrl-C in the middle of a rotation would leave it writing to a closed
file; here the next write reopens it."""

from __future__ import annotations

import os


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
