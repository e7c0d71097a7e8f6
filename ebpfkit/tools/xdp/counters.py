"""The XDP programs' per-CPU counters: {u64 packets; u64 bytes} per rule, backend or action."""

from __future__ import annotations

import struct

from ...engine.pinned import FdMap

COUNTER = struct.Struct("<QQ")


def per_cpu_counter(m: FdMap, raw: bytes | None) -> tuple[int, int]:
    """(packets, bytes) summed over CPUs from one per-CPU counter value (None: zero)."""
    if raw is None:
        return 0, 0
    pk = by = 0
    for v in m.per_cpu_values(raw):
        p, b = COUNTER.unpack(v)
        pk, by = pk + p, by + b
    return pk, by
