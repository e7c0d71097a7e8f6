"""The XDP programs' per-CPU counters, struct {packets; bytes} per rule, backend or action,
read through the maps' BTF; and the names of counter slots, from the program's enums."""

from __future__ import annotations

ZERO = {"packets": 0, "bytes": 0}


def counter(m, slot: int) -> tuple[int, int]:
    """(packets, bytes) of ``slot`` of the per-CPU counter array ``m``, summed over CPUs."""
    return as_pair(m[slot])


def as_pair(value) -> tuple[int, int]:
    """(packets, bytes) of one per-CPU counter value (summed here: PerCpu.sum is generic, and
    a scrape of a large filter sums thousands of them)."""
    return sum(cpu["packets"] for cpu in value), sum(cpu["bytes"] for cpu in value)


def slot_names(m, enum: str, prefix: str) -> tuple[str, ...]:
    """The slots of counter array ``m`` as the program's ``enum`` names them, in value order
    (FS_WOULD_DROP -> would_drop), without the count that ends it (FS_MAX, LB_MAX)."""
    names = m.btf.enum(enum, strip=prefix)
    return tuple(n for n, _ in sorted(names.items(), key=lambda nv: nv[1]) if n != "max")
