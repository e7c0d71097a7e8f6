"""memleak --triage SECONDS: before tracing anything, what grew over SECONDS by the
kernel's own accounts (/proc/meminfo, /proc/slabinfo, /proc/vmallocinfo, through
ebpfkit.sysinfo.memory), and so where to look first, as sysak's memleak does: a process
(anonymous memory), the kernel's slab, vmalloc or per-CPU allocations."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ...sysinfo import memory

# (meminfo line, what it is, where to look when it grows)
AREAS = (
    ("AnonPages", "user memory (anonymous pages)",
     "a process: find whose RSS grows, then ebpfkit memleak -p PID"),
    ("SUnreclaim", "unreclaimable slab",
     "kernel slab allocations: the slab caches below, then ebpfkit memleak --kinds slab"),
    ("SReclaimable", "reclaimable slab (dentries, inodes)",
     "kernel caches the kernel shrinks under pressure: rarely a leak; the slab caches below"),
    ("VmallocUsed", "vmalloc", "the vmalloc callers below"),
    ("Percpu", "per-CPU allocations", "ebpfkit memleak --kinds percpu"),
    ("KernelStack", "kernel stacks", "the number of threads (each has a kernel stack)"),
    ("PageTables", "page tables", "processes mapping much memory"),
    ("Shmem", "shared memory and tmpfs", "tmpfs files and shared memory segments (df -t tmpfs, ipcs -m)"),
)
TOP = 10


@dataclass(frozen=True)
class AreaChange:
    area: str       # its /proc/meminfo name
    label: str
    before: int     # bytes
    after: int
    delta: int
    advice: str


@dataclass(frozen=True)
class Triage:
    seconds: float
    areas: list[AreaChange]                     # most grown first
    slab_caches: list[tuple[str, int]]          # (cache, bytes grown): the TOP that grew most
    vmalloc_callers: list[tuple[str, int]]      # (caller, bytes grown)
    look_first: str | None                      # the advice of the area that grew most, None if none grew
    unreadable: list[str] = field(default_factory=list)  # files that could not be read (not root)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Snapshot:
    meminfo: dict[str, int]
    slabs: dict[str, int] | None
    vmallocs: dict[str, int] | None


def snapshot() -> Snapshot:
    return Snapshot(memory.meminfo(), memory.slab_bytes(), memory.vmalloc_bytes())


def measure(seconds: float, take=snapshot, sleep=time.sleep, started=None) -> Triage:
    """Two snapshots ``seconds`` apart, compared; ``started()`` is called after the first."""
    before = take()
    if started:
        started()
    sleep(seconds)
    return compare(before, take(), seconds)


def compare(before: Snapshot, after: Snapshot, seconds: float) -> Triage:
    areas = [AreaChange(name, label, before.meminfo[name], after.meminfo[name],
                        after.meminfo[name] - before.meminfo[name], advice)
             for name, label, advice in AREAS if name in before.meminfo and name in after.meminfo]
    areas.sort(key=lambda a: -a.delta)
    grown = [a for a in areas if a.delta > 0]
    unreadable = [path for path, b, a in ((memory.SLABINFO, before.slabs, after.slabs),
                                          (memory.VMALLOCINFO, before.vmallocs, after.vmallocs))
                  if b is None or a is None]
    return Triage(seconds, areas, _grown(before.slabs, after.slabs), _grown(before.vmallocs, after.vmallocs),
                  grown[0].advice if grown else None, unreadable)


def _grown(before: dict[str, int] | None, after: dict[str, int] | None) -> list[tuple[str, int]]:
    """The TOP names whose bytes grew most, with how much."""
    if before is None or after is None:
        return []
    deltas = [(name, size - before.get(name, 0)) for name, size in after.items()]
    return sorted([d for d in deltas if d[1] > 0], key=lambda d: (-d[1], d[0]))[:TOP]
