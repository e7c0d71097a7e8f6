"""The guard's log: one JSON object per line, in guard.log and its rotated files.

Every record has ``time`` (epoch seconds), ``event`` ("violation" or "policy-reload"),
``verdict`` (a violation: "denied" or "allowed (audit)"; a reload: "applied" or "rejected")
and ``object`` (the protected object, or the policy file of a reload).

The agent writes it and rotates it by size itself (guard.log.1 ... .N): the state directory
is closed to every untrusted subject, logrotate included. `guard reload` appends its line
by name, which stays correct across a rotation."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import Iterator

FOLLOW_POLL = 0.2


class RotatingLog:
    """The agent's writer (logging's RotatingFileHandler, without a logger around it)."""

    def __init__(self, path: str, size: int, backups: int):
        from logging.handlers import RotatingFileHandler

        self.handler = RotatingFileHandler(path, maxBytes=size, backupCount=backups, encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(message)s"))
        self.resize(size, backups)

    def resize(self, size: int, backups: int) -> None:
        # the handler never rotates with no backups: the option's 0 keeps one
        self.handler.maxBytes, self.handler.backupCount = size, max(1, backups)

    def write(self, record: dict) -> None:
        self.handler.handle(logging.makeLogRecord({"msg": json.dumps(record), "levelno": logging.INFO}))

    def close(self) -> None:
        self.handler.close()


def append(path: str, record: dict) -> None:
    """One record from another process than the agent (best effort: a log line is not worth
    failing the command that made it)."""
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def reload_record(policy: str, verdict: str, by: str, **extra) -> dict:
    return {"time": round(time.time(), 6), "event": "policy-reload", "verdict": verdict,
            "object": policy, "by": by, **extra}


def rotated(path: str) -> list[str]:
    """The log's files, oldest first: guard.log.N ... guard.log.1, guard.log."""
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
