"""Where the kernel says memory is: /proc/meminfo (by kind), /proc/slabinfo (by slab cache)
and /proc/vmallocinfo (by the caller of each vmalloc area). The last two are readable only
by root: None where they cannot be read. Paths are parameters, so a test can hand in its own."""

from __future__ import annotations

import re

MEMINFO = "/proc/meminfo"
SLABINFO = "/proc/slabinfo"
VMALLOCINFO = "/proc/vmallocinfo"

_CALLER = re.compile(r"^([^+\s/]+)")


def meminfo(path: str = MEMINFO) -> dict[str, int]:
    """Each /proc/meminfo line, in bytes ("kB" values times 1024; counts such as
    HugePages_Total as they are)."""
    values = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                values[name.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return values


def slab_bytes(path: str = SLABINFO) -> dict[str, int] | None:
    """Bytes in use per slab cache (active objects times object size); None if unreadable."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    caches = {}
    for line in lines:
        if line.startswith(("slabinfo", "#")):
            continue
        fields = line.split()
        if len(fields) >= 4 and fields[1].isdigit() and fields[3].isdigit():
            caches[fields[0]] = caches.get(fields[0], 0) + int(fields[1]) * int(fields[3])
    return caches


def vmalloc_bytes(path: str = VMALLOCINFO) -> dict[str, int] | None:
    """Bytes of vmalloc areas per caller (the function that asked, as the kernel prints it;
    "[no caller]" for areas without one, such as unpurged ones); None if unreadable."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    callers: dict[str, int] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or not fields[1].isdigit():
            continue
        caller = _CALLER.match(fields[2]) if len(fields) > 2 and "+" in fields[2] else None
        name = caller.group(1) if caller else "[no caller]"
        callers[name] = callers.get(name, 0) + int(fields[1])
    return callers
