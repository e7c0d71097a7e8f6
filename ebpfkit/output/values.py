"""Turn BPF-ish values (bytes, enums, addresses, numpy scalars) into text and JSON."""

from __future__ import annotations

import enum
from datetime import datetime


def now() -> datetime:
    return datetime.now().astimezone()


def iso_time(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


def clock_time(when: datetime) -> str:
    return when.strftime("%H:%M:%S")


def plain(value):
    """A JSON/CSV-friendly value: C strings decoded, enums by name, anything else odd as str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode("utf-8", "replace")
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, datetime):
        return iso_time(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if hasattr(value, "to_dict"):
        return plain(value.to_dict())
    if hasattr(value, "item"):  # numpy / pandas scalars
        return value.item()
    return str(value)


def to_json(obj) -> str:
    import json  # only JSON output and --log need it: not at every tool's start

    return json.dumps(obj, default=plain, ensure_ascii=False)


def cell_text(value, spec=None) -> str:
    """How a value looks in a table cell or an event line."""
    if callable(spec):
        return str(spec(value))
    value = plain(value)
    if value is None:
        return "-"
    if spec:
        return format(value, spec)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
