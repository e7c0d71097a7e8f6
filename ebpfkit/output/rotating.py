"""A results file that rotates, for tools with a log file of their own (irqoff's -f): a
file-like object an ``Output`` writes to, rotated by logging's RotatingFileHandler when a
line would take it past ``max_bytes`` (FILE.1 the newest old one, ``backups`` kept)."""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler


class RotatingLines:
    """write()/flush() of whole lines into a rotating file; close() when done."""

    def __init__(self, path: str, max_bytes: int, backups: int):
        self._handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                            encoding="utf-8")
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._pending = ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._handler.emit(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
        return len(text)

    def flush(self) -> None:
        self._handler.flush()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        if self._pending:
            self.write("\n")
        self._handler.close()
