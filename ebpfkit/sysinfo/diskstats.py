"""Block devices' /proc/diskstats counters, and per-interval rates computed as iostat does
(names and numbers of devices: ``sysinfo.devices``).

    before = read_diskstats()
    ...
    rates = disk_rates(before["sda"], read_diskstats()["sda"], seconds)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
DISKSTATS = "/proc/diskstats"


@dataclass(frozen=True)
class DiskCounters:
    """One line of /proc/diskstats (Documentation/admin-guide/iostats.rst). Times are in ms;
    discard and flush fields are 0 on kernels that do not report them."""

    major: int
    minor: int
    name: str
    reads: int = 0
    reads_merged: int = 0
    sectors_read: int = 0
    read_ms: int = 0
    writes: int = 0
    writes_merged: int = 0
    sectors_written: int = 0
    write_ms: int = 0
    in_flight: int = 0
    io_ms: int = 0
    weighted_ms: int = 0
    discards: int = 0
    discards_merged: int = 0
    sectors_discarded: int = 0
    discard_ms: int = 0
    flushes: int = 0
    flush_ms: int = 0


_COUNTERS = [f.name for f in fields(DiskCounters)][3:]


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    """Every device of a /proc/diskstats text by name (14, 18 or 20 fields a line)."""
    disks = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue  # not a device line (or a kernel older than 2.6.25)
        values = [int(v) for v in parts[3:3 + len(_COUNTERS)]]
        disks[parts[2]] = DiskCounters(int(parts[0]), int(parts[1]), parts[2],
                                       **dict(zip(_COUNTERS, values)))
    return disks


def read_diskstats(path: str = DISKSTATS) -> dict[str, DiskCounters]:
    with open(path) as f:
        return parse_diskstats(f.read())


@dataclass(frozen=True)
class DiskRates:
    """One device over one interval: the counts and what iostat derives from them."""

    name: str
    seconds: float
    reads: int
    writes: int
    read_bytes: int
    write_bytes: int
    r_iops: float
    w_iops: float
    r_bps: float
    w_bps: float
    await_ms: float    # mean time of a read, write or discard, queueing included
    r_await: float
    w_await: float
    util: float        # % of the interval with IO in flight

    @property
    def active(self) -> bool:
        return bool(self.reads or self.writes or self.util)


def disk_rates(before: DiskCounters, after: DiskCounters, seconds: float) -> DiskRates:
    """iostat's r/s, w/s, rkB/s (as bytes), wkB/s, await, r_await, w_await and %util."""
    if seconds <= 0:
        raise ValueError("the interval must be longer than 0 seconds")
    d = _delta(before, after)
    ios = d["reads"] + d["writes"] + d["discards"]
    return DiskRates(
        name=after.name, seconds=seconds, reads=d["reads"], writes=d["writes"],
        read_bytes=d["sectors_read"] * SECTOR, write_bytes=d["sectors_written"] * SECTOR,
        r_iops=d["reads"] / seconds, w_iops=d["writes"] / seconds,
        r_bps=d["sectors_read"] * SECTOR / seconds, w_bps=d["sectors_written"] * SECTOR / seconds,
        await_ms=_ratio(d["read_ms"] + d["write_ms"] + d["discard_ms"], ios),
        r_await=_ratio(d["read_ms"], d["reads"]), w_await=_ratio(d["write_ms"], d["writes"]),
        util=min(100.0, d["io_ms"] / (seconds * 10)),  # ms busy / (s * 1000) * 100
    )


def _delta(before: DiskCounters, after: DiskCounters) -> dict[str, int]:
    if any(getattr(after, c) < getattr(before, c) for c in _COUNTERS if c != "in_flight"):
        before = DiskCounters(after.major, after.minor, after.name)  # counters reset: device re-created
    return {c: getattr(after, c) - getattr(before, c) for c in _COUNTERS}


def _ratio(total: float, count: int) -> float:
    return total / count if count else 0.0
