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
import time

from ...output.rotating import records, rotated  # noqa: F401 - the guard's log is read with them


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
