"""Tool configurations: frozen dataclasses the CLI (from options), the exporter (from YAML)
and a notebook (from keyword arguments) build alike, so a bad value is the same ConfigError,
naming the setting, whichever built it.

A tool's ``Config`` subclasses ``ToolConfig`` and checks its own rules in ``validate()``;
the field types declared on the dataclass are checked here first (an int where an int is
declared, ``None`` only where the type allows it), since YAML and notebooks bring any type.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from ..errors import ConfigError

# the declared types this checks; anything else is the tool's validate() business
_SIMPLE = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,)}


class ToolConfig:
    """Base of every tool's ``Config`` (use with ``@dataclass(frozen=True)``)."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), f.type)
        self.validate()

    def validate(self) -> None:
        """A tool's own rules (ranges, existence); raise ConfigError naming the field."""

    @classmethod
    def given(cls, config=None, **settings):
        """``config`` itself, or one built from keyword settings: what a session's
        ``open(config)`` / ``open(pid=1, ...)`` takes, never both."""
        if config is not None and settings:
            raise TypeError("give a Config or keyword settings, not both")
        return config if config is not None else cls(**settings)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]):
        """From a YAML mapping (dashes in keys read as underscores); unknown keys are errors."""
        known = [f.name for f in dataclasses.fields(cls)]
        settings = {str(k).replace("-", "_"): v for k, v in values.items()}
        for key in settings:
            if key not in known:
                raise ConfigError(key, f"unknown setting; known ones: {', '.join(known)}")
        for f in dataclasses.fields(cls):  # a setting without a default must be given
            if f.name not in settings and f.default is f.default_factory is dataclasses.MISSING:
                raise ConfigError(f.name, "a value is required")
        return cls(**settings)


def _check_type(name: str, value, declared) -> None:
    spelled = declared if isinstance(declared, str) else getattr(declared, "__name__", str(declared))
    options = [part.strip() for part in spelled.split("|")]
    if value is None:
        if "None" not in options:
            raise ConfigError(name, "a value is required")
        return
    kinds = [o for o in options if o != "None"]
    if not all(o in _SIMPLE for o in kinds):
        return  # a type beyond the simple ones: validate() checks it
    accepted = tuple(t for o in kinds for t in _SIMPLE[o])
    # bool is an int to Python, not to a user who wrote `pid: true`
    if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
        raise ConfigError(name, f"expected {' or '.join(kinds)}, got {type(value).__name__} {value!r}")


def check_pid(name: str, pid: int | None) -> None:
    """``pid``, when given, is a live process (thread group) on this machine."""
    if pid is not None and (pid <= 0 or not os.path.exists(f"/proc/{pid}")):
        raise ConfigError(name, f"no process with PID {pid}")


def check_tid(name: str, tid: int | None) -> None:
    """``tid``, when given, is a live thread on this machine."""
    if tid is not None and (tid <= 0 or not os.path.exists(f"/proc/{tid}")):
        raise ConfigError(name, f"no thread with TID {tid}")


def check_disk(name: str, disk: str | None):
    """``disk``, when given, names a disk or partition: its ``sysinfo.devices.Disk``."""
    from ..sysinfo.devices import UnknownDiskError, resolve_disk

    if disk is None:
        return None
    try:
        return resolve_disk(disk)
    except UnknownDiskError as exc:
        raise ConfigError(name, str(exc)) from None


def check_choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise ConfigError(name, f"{value!r} is not one of {', '.join(choices)}")


def check_positive(name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(name, f"must be greater than 0, got {value}")



def check_exclusive(name: str, value, **others) -> None:
    """``name``, when set, is given alone: none of ``others`` (settings by name) is set."""
    clashing = [other for other, set_too in others.items() if set_too]
    if value and clashing:
        raise ConfigError(name, f"cannot be combined with {' or '.join(clashing)}")
