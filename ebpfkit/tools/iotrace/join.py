"""Joining a recording into per-request lifecycles.

1. Block events become block requests: by disk + sector, in time order. A request is
   inserted/issued and completed at its first sector; the bios queued into it are found by
   walking its sector range (a bio split over several requests is handed out piece by piece).
2. Syscalls become sector ranges through the layer mapping table: the file's extent map
   (FIEMAP: file offset -> filesystem byte offset), then the partition's start on its disk.
   A block device file maps one to one.
3. A syscall owns the block requests of the same direction on its disk that overlap its
   sectors and started during the syscall. Requests are bisected by start time per disk, so
   a syscall looks only at what started while it ran: no all-pairs comparison.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict, deque
from dataclasses import dataclass, field

from .fiemap import UNMAPPABLE
from .fileformat import BlockEvent, Device, Extent, FileMap, Recording, Syscall

SECTOR = 512
_STAGE_RANK = {"queue": 0, "insert": 1, "issue": 2, "complete": 3}


def op_of_rwbs(rwbs: str) -> str:
    """R, W, D (discard), E (secure erase) or N: the data direction of a request.
    A leading F is a preflush and not the request's own direction."""
    rest = rwbs[1:] if rwbs.startswith("F") and len(rwbs) > 1 else rwbs
    return rest[:1] or "?"


@dataclass(slots=True)
class _Bio:
    ts: int
    sector: int
    nr_sector: int
    pid: int
    comm: str


@dataclass(slots=True)
class BlockRequest:
    """One block-layer request, with the time of each stage it was seen at (ns, or None)."""

    dev: str
    sector: int
    nr_sector: int
    rwbs: str
    queue: int | None = None
    insert: int | None = None
    issue: int | None = None
    complete: int | None = None
    pid: int = 0  # who queued its first bio (0: unknown)
    comm: str = ""
    error: int = 0
    bios: int = 0
    syscall: Syscall | None = None  # the syscall it was joined to
    completed_sectors: int = 0  # a request may complete in parts

    @property
    def op(self) -> str:
        return op_of_rwbs(self.rwbs)

    @property
    def bytes(self) -> int:
        return self.nr_sector * SECTOR

    @property
    def start(self) -> int:
        """The first time it was seen (its bio queued, or else inserted or issued)."""
        return next(t for t in (self.queue, self.insert, self.issue, self.complete) if t is not None)


@dataclass
class BlockResult:
    requests: list[BlockRequest]  # completed, in completion order
    incomplete: int  # issued or inserted but never completed while recording
    unmatched_bios: int  # queued but in no request (bio-based devices such as dm, or lost events)


def build_requests(events: list[BlockEvent]) -> BlockResult:
    pending: dict[tuple[str, int], deque] = defaultdict(deque)  # queued bios by (disk, sector)
    open_rqs: dict[tuple[str, int], BlockRequest] = {}
    done: list[BlockRequest] = []

    def take_bios(rq: BlockRequest) -> None:
        cur, end = rq.sector, rq.sector + rq.nr_sector
        while cur < end:
            q = pending.get((rq.dev, cur))
            if not q:
                break
            bio = q.popleft()
            if not q:
                del pending[(rq.dev, cur)]
            if bio.sector + bio.nr_sector > end:  # split: the rest goes to later requests
                pending[(rq.dev, end)].appendleft(
                    _Bio(bio.ts, end, bio.sector + bio.nr_sector - end, bio.pid, bio.comm))
            if rq.queue is None or bio.ts < rq.queue:
                rq.queue = bio.ts
            if rq.bios == 0:
                rq.pid, rq.comm = bio.pid, bio.comm
            rq.bios += 1
            cur = bio.sector + bio.nr_sector

    incomplete = 0
    for ev in sorted(events, key=lambda e: (e.ts, _STAGE_RANK[e.stage])):
        key = (ev.dev, ev.sector)
        if ev.stage == "queue":
            pending[key].append(_Bio(ev.ts, ev.sector, ev.nr_sector, ev.pid, ev.comm))
            continue
        rq = open_rqs.get(key)
        if ev.stage in ("insert", "issue"):
            if rq is not None and ev.stage == "insert" and rq.issue is not None:
                incomplete += 1  # a new request where an old one never completed (lost events)
                rq = None
            if rq is None:
                rq = open_rqs[key] = BlockRequest(ev.dev, ev.sector, ev.nr_sector, ev.rwbs)
            rq.nr_sector = max(rq.nr_sector, ev.nr_sector)  # bios merged in since insert
            rq.rwbs = ev.rwbs
            if ev.stage == "insert":
                rq.insert = rq.insert or ev.ts
            else:
                rq.issue = ev.ts  # a requeued request is issued again: the last one counts
            take_bios(rq)
            continue
        # complete
        if rq is None:  # issue not seen: a request known from its bios only
            rq = BlockRequest(ev.dev, ev.sector, ev.nr_sector, ev.rwbs)
            take_bios(rq)
            if rq.bios == 0:
                continue  # nothing known but its end: began before the recording did
        else:
            del open_rqs[key]
        rq.error = rq.error or ev.error
        rq.completed_sectors += ev.nr_sector
        if rq.completed_sectors < rq.nr_sector:  # partial completion: the rest completes later
            open_rqs[(rq.dev, ev.sector + ev.nr_sector)] = rq
            continue
        rq.complete = ev.ts
        if rq.issue is not None or rq.queue is not None:
            done.append(rq)
    incomplete += len(open_rqs)
    return BlockResult(done, incomplete, sum(len(q) for q in pending.values()))


# --- the layer mapping table ----------------------------------------------------------

@dataclass(slots=True)
class _Mapped:
    """A file's mappable extents, sorted by logical offset."""

    logical: list[int]
    extents: list[Extent]


def _mapped(m: FileMap) -> _Mapped:
    ext = sorted((e for e in m.extents if not e.flags & UNMAPPABLE), key=lambda e: e.logical)
    return _Mapped([e.logical for e in ext], ext)


def sector_ranges(offset: int, length: int, extents: _Mapped | None, start_sector: int) -> list[tuple[int, int]]:
    """Disk sector ranges [first, end) of file bytes [offset, offset+length); ``extents``
    None means a block device file (offset is the device offset)."""
    if length <= 0 or offset < 0:
        return []
    if extents is None:
        return [(start_sector + offset // SECTOR, start_sector + -(-(offset + length) // SECTOR))]
    out = []
    end = offset + length
    i = max(bisect_right(extents.logical, offset) - 1, 0)
    for e in extents.extents[i:]:
        if e.logical >= end:
            break
        lo, hi = max(offset, e.logical), min(end, e.logical + e.length)
        if lo >= hi:
            continue
        phys = e.physical + (lo - e.logical)
        out.append((start_sector + phys // SECTOR, start_sector + -(-(phys + hi - lo) // SECTOR)))
    return out


# --- the join --------------------------------------------------------------------------

@dataclass
class Lifecycle:
    """One IO request through the layers: a syscall and the block requests it caused, or
    a block request no syscall caused (writeback, readahead, journal)."""

    syscall: Syscall | None
    requests: list[BlockRequest] = field(default_factory=list)


@dataclass
class JoinResult:
    lifecycles: list[Lifecycle]  # every syscall, and every block request no syscall owns
    block: BlockResult
    unmapped: dict[str, int]  # why syscalls could not be mapped to sectors: reason -> count

    @property
    def joined(self) -> list[Lifecycle]:
        return [lc for lc in self.lifecycles if lc.syscall is not None and lc.requests]


def join(rec: Recording) -> JoinResult:
    block = build_requests(rec.block)
    by_disk: dict[str, list[BlockRequest]] = defaultdict(list)
    for rq in block.requests:
        by_disk[rq.dev].append(rq)
    starts: dict[str, list[int]] = {}
    for dev, rqs in by_disk.items():
        rqs.sort(key=lambda r: r.start)
        starts[dev] = [r.start for r in rqs]

    maps = {key: _mapped(m) for key, m in rec.files.items()}
    unmapped: dict[str, int] = defaultdict(int)
    lifecycles = []
    for sc in sorted(rec.syscalls, key=lambda s: s.enter):
        lc = Lifecycle(sc)
        lifecycles.append(lc)
        if sc.nbytes == 0:
            continue
        ranges, why = _ranges_of(sc, rec.devices, maps, rec.files)
        if why:
            unmapped[why] += 1
            continue
        device = rec.devices[sc.dev]
        rqs = by_disk.get(device.disk)
        if not rqs or not ranges:
            continue
        times = starts[device.disk]
        for rq in rqs[bisect_left(times, sc.enter):bisect_right(times, sc.exit)]:
            if rq.syscall is None and rq.op == sc.op and any(
                    lo < rq.sector + rq.nr_sector and rq.sector < hi for lo, hi in ranges):
                rq.syscall = sc
                lc.requests.append(rq)
    lifecycles.extend(Lifecycle(None, [rq]) for rq in block.requests if rq.syscall is None)
    return JoinResult(lifecycles, block, dict(unmapped))


def _ranges_of(sc: Syscall, devices: dict[str, Device], maps: dict, files: dict) -> tuple[list, str | None]:
    device = devices.get(sc.dev)
    if device is None:
        return [], "not on a block device"
    if sc.file_type == "blk":
        return sector_ranges(sc.offset, sc.nbytes, None, device.start_sector), None
    m = maps.get((sc.dev, sc.ino))
    if m is None:
        return [], "no extent map recorded"
    if not m.extents and files[(sc.dev, sc.ino)].error:
        return [], "no extent map: " + files[(sc.dev, sc.ino)].error
    return sector_ranges(sc.offset, sc.nbytes, m, device.start_sector), None
