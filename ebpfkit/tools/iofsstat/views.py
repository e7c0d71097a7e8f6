"""iofsstat's views of a session's Interval: sorting, the three tables for people (at most a
terminal's width, paths cut from the left) and the document JSON/CSV carry. Formats are the
output layer's business; this only says what the tables hold."""

from __future__ import annotations

from ...output import MAX_TABLE_WIDTH, Column, Output, ResultTable
from .session import Interval

# Row keys per view (what JSON/CSV carry, and what --sort accepts).
DISK_KEYS = ("disk", "r_iops", "w_iops", "r_bps", "w_bps", "await", "r_await", "w_await", "util",
             "reads", "writes", "read_bytes", "write_bytes")
BIO_KEYS = ("comm", "pid", "disk", "reads", "r_bps", "writes", "w_bps", "read_bytes",
            "write_bytes", "container")
FILE_KEYS = ("comm", "pid", "reads", "r_bps", "writes", "w_bps", "inode", "device", "path",
             "container", "read_bytes", "write_bytes", "dev")
SORT_KEYS = tuple(dict.fromkeys(FILE_KEYS + BIO_KEYS + DISK_KEYS))


def sort_rows(rows: list[dict], key: str | None, default, top: int | None) -> list[dict]:
    """Rows by ``key`` (numbers largest first, text A-Z) if they have it, else by ``default``
    (largest first); then the first ``top``."""
    if key and rows and key in rows[0]:
        numeric = all(isinstance(r[key], (int, float)) or r[key] is None for r in rows)
        if numeric:
            rows = sorted(rows, key=lambda r: r[key] or 0, reverse=True)
        else:
            rows = sorted(rows, key=lambda r: str(r[key] or ""))
    elif default is not None:
        rows = sorted(rows, key=default, reverse=True)
    return rows[:top] if top else rows


def bytes_total(row) -> int:
    return row["read_bytes"] + row["write_bytes"]


def human_rate(value: float) -> str:
    """Bytes per second, short: 512, 1.5K, 20.0M, 1.2G."""
    for unit in ("", "K", "M", "G"):
        if abs(value) < 1024 or unit == "G":
            return f"{value:.0f}" if not unit else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}G"


def _tail(width: int):
    """Shorten text from the left (a path's file name is what matters)."""
    def fmt(value) -> str:
        text = "-" if value is None else str(value)
        return text if len(text) <= width else "…" + text[-(width - 1):]
    return fmt


def file_label(row: dict) -> str:
    """The path, with the source tool's container suffix."""
    if row.get("container"):
        return f"{row['path']} [containerId:{row['container']}]"
    return row["path"]


def display_tables(interval: Interval, width: int = MAX_TABLE_WIDTH) -> list[ResultTable]:
    """The three views as tables of at most ``width`` columns (the narrow set of fields)."""
    rate = human_rate
    disks = ResultTable([Column("DISK", key="disk"), Column("R_IOPS", key="r_iops", format=".1f"),
                         Column("W_IOPS", key="w_iops", format=".1f"),
                         Column("R_BPS", key="r_bps", format=rate),
                         Column("W_BPS", key="w_bps", format=rate),
                         Column("AWAIT", key="await", format=".2f"),
                         Column("R_AWAIT", key="r_await", format=".2f"),
                         Column("W_AWAIT", key="w_await", format=".2f"),
                         Column("UTIL%", key="util", format=".1f")],
                        interval.disks, title="Disks (await in ms)", data_keys=DISK_KEYS)
    bios = ResultTable([Column("COMM", key="comm", max_width=16), Column("PID", key="pid"),
                        Column("DISK", key="disk"), Column("READS", key="reads"),
                        Column("R_BPS", key="r_bps", format=rate), Column("WRITES", key="writes"),
                        Column("W_BPS", key="w_bps", format=rate),
                        Column("CONTAINER", key="container")],
                       interval.disk_processes, title="Disk IO by process", data_keys=BIO_KEYS)
    columns = [Column("COMM", key="comm", max_width=16), Column("PID", key="pid"),
               Column("READS", key="reads"), Column("R_BPS", key="r_bps", format=rate),
               Column("WRITES", key="writes"), Column("W_BPS", key="w_bps", format=rate),
               Column("INODE", key="inode"), Column("DEVICE", key="device")]
    rows = [dict(r, label=file_label(r)) for r in interval.files]
    # the file column gets what the others leave; cut there from the left, not by rich at the end
    room = min(width, MAX_TABLE_WIDTH) - sum(_width(c, rows) + 2 for c in columns)
    columns.append(Column("FILE", key="label", format=_tail(max(room, 12))))
    files = ResultTable(columns, rows, title="File IO by process", data_keys=FILE_KEYS)
    return [disks, bios, files]


def _width(column: Column, rows: list[dict]) -> int:
    from ...output.values import cell_text

    widest = max((len(cell_text(r.get(column.key), column.format)) for r in rows), default=0)
    return min(max(widest, len(column.name)), column.max_width or 1 << 16)


def show(out: Output, interval: Interval) -> None:
    """Print one interval: table format as one frame (one live redraw), JSON as one object
    (the one --log keeps), CSV as three tables with every field (each with its header line)."""
    from ...output.values import iso_time, now

    out.document({"time": iso_time(now()), "interval": round(interval.seconds, 6),
                  "disks": interval.disks, "disk_processes": interval.disk_processes,
                  "files": interval.files}, display_tables(interval, out.console.width))
