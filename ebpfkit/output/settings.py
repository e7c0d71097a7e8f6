"""OutputSettings: the user's output choices (global options plus per-tool ones), in one object."""

from __future__ import annotations

from dataclasses import dataclass, replace

FORMATS = ("table", "json", "csv")
DEFAULT_LOG_SIZE = 10 * 1024 * 1024
DEFAULT_LOG_BACKUP = 3


@dataclass(frozen=True)
class OutputSettings:
    format: str = "table"            # table | json | csv
    output_file: str | None = None   # results go here instead of stdout ("-" is stdout)
    color: bool = True               # False for --no-color
    verbosity: int = 0               # count of -v
    timestamps: bool = False         # -T: prefix rows/events with the time
    log_file: str | None = None      # --log FILE
    log_size: int = DEFAULT_LOG_SIZE
    log_backup: int = DEFAULT_LOG_BACKUP

    def __post_init__(self):
        fmt = self.format.lower()
        if fmt not in FORMATS:
            raise ValueError(f"unknown output format {self.format!r}: use one of {', '.join(FORMATS)}")
        object.__setattr__(self, "format", fmt)

    def replace(self, **changes) -> OutputSettings:
        """A copy with ``changes``; None values mean "keep", so option defaults can pass through."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


# The settings of the running command, for code that outlives its click context
# (the error reporter needs the verbosity and color choice after the command failed).
_active: OutputSettings | None = None


def activate(settings: OutputSettings) -> None:
    global _active
    _active = settings


def active_settings() -> OutputSettings:
    return _active or OutputSettings()
