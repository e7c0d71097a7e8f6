"""detect's alert log: every alert `detect run` raises, one JSON object per line (as
``Alert.to_dict()``, and ``--format json`` prints it), in a file rotated by size, which
`detect log [-f]` reads back (its rotated files first).

The default is /var/log/ebpfkit/detect.log, or the file EBPFKIT_DETECT_LOG names (tests and
unprivileged trials point it elsewhere)."""

from __future__ import annotations

import os

from ...errors import ConfigError
from ...output.rotating import RotatingLines, records
from ...output.settings import DEFAULT_LOG_BACKUP, DEFAULT_LOG_SIZE
from ...output.values import to_json

DEFAULT_PATH = "/var/log/ebpfkit/detect.log"
ENV = "EBPFKIT_DETECT_LOG"


def default_path() -> str:
    return os.environ.get(ENV) or DEFAULT_PATH


class AlertLog:
    """The writer `detect run` keeps open; ``write(alert_dict)`` appends one line."""

    def __init__(self, path: str, max_bytes: int = DEFAULT_LOG_SIZE, backups: int = DEFAULT_LOG_BACKUP):
        self.path = path
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o750, exist_ok=True)
            self._lines = RotatingLines(path, max_bytes, backups)
        except OSError as exc:
            raise ConfigError("alert_log", f"cannot write {path}: {exc.strerror}") from None

    def write(self, alert: dict) -> None:
        self._lines.write(to_json(alert) + "\n")
        self._lines.flush()  # an alert is read by `detect log -f` as soon as it is raised

    def close(self) -> None:
        self._lines.close()


def read(path: str, follow: bool = False):
    """The alerts in the log at ``path``, oldest first; with ``follow``, then new ones as they
    are written (across rotations)."""
    return records(path, follow=follow)
