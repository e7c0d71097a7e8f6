"""The report's numbers: per-stage latency statistics, the slowest lifecycles with every
stage's time, and per-process totals. Times come in as ns and go out as µs."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from .join import BlockRequest, JoinResult, Lifecycle

# (name, what it measures); Q2I/I2D exist only where a request went through a scheduler
# queue (block_rq_insert), otherwise Q2D is the whole block-layer time
STAGES = (
    ("syscall", "syscall entry to return, every file IO syscall"),
    ("S2Q", "syscall entry to its first bio queued (VFS, filesystem)"),
    ("Q2I", "bio queued to request inserted (request allocation, plugging)"),
    ("I2D", "inserted to issued to the driver (I/O scheduler)"),
    ("Q2D", "bio queued to request issued (whole block layer)"),
    ("D2C", "issued to completed (driver and device)"),
    ("Q2C", "bio queued to completed (block request total)"),
    ("C2R", "last request completed to syscall return"),
)


def percentile(sorted_values: list, p: float):
    """Nearest-rank percentile of an ascending list (p in 0..100); None if empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize(values: list) -> dict:
    """count, avg, p50, p99, max of ns values, in µs."""
    v = sorted(values)
    if not v:
        return {"count": 0, "avg": None, "p50": None, "p99": None, "max": None}
    us = 1e3
    return {"count": len(v), "avg": sum(v) / len(v) / us, "p50": percentile(v, 50) / us,
            "p99": percentile(v, 99) / us, "max": v[-1] / us}


def _diff(a, b):
    return b - a if a is not None and b is not None else None


def request_stages(rq: BlockRequest) -> dict:
    """ns between the block stages of one request (None where a stage was not seen)."""
    return {"Q2I": _diff(rq.queue, rq.insert), "I2D": _diff(rq.insert, rq.issue),
            "Q2D": _diff(rq.queue, rq.issue), "D2C": _diff(rq.issue, rq.complete),
            "Q2C": _diff(rq.queue, rq.complete)}


def lifecycle_stages(lc: Lifecycle) -> dict:
    """ns per stage of a lifecycle. With several block requests, the syscall-side stages run
    to the first queue and from the last completion; the block ones are the slowest request's."""
    out = {name: None for name, _ in STAGES}
    sc = lc.syscall
    if sc is not None:
        out["syscall"] = sc.exit - sc.enter
    if lc.requests:
        slowest = max(lc.requests, key=lambda r: r.complete - r.start)
        out.update(request_stages(slowest))
        if sc is not None:
            queued = [r.start for r in lc.requests]
            out["S2Q"] = min(queued) - sc.enter
            out["C2R"] = sc.exit - max(r.complete for r in lc.requests)
    return out


def lifecycle_total(lc: Lifecycle) -> int:
    if lc.syscall is not None:
        return lc.syscall.exit - lc.syscall.enter
    rq = lc.requests[0]
    return rq.complete - rq.start


def breakdown(result: JoinResult) -> list[dict]:
    """One row per stage: {stage, description, count, avg, p50, p99, max} (µs)."""
    values: dict[str, list] = defaultdict(list)
    for lc in result.lifecycles:
        if lc.syscall is not None:
            values["syscall"].append(lc.syscall.exit - lc.syscall.enter)
            if lc.requests:
                values["S2Q"].append(min(r.start for r in lc.requests) - lc.syscall.enter)
                values["C2R"].append(lc.syscall.exit - max(r.complete for r in lc.requests))
    for rq in result.block.requests:  # every block request counts once, joined or not
        for name, ns in request_stages(rq).items():
            if ns is not None:
                values[name].append(ns)
    return [{"stage": name, "description": text, **summarize(values[name])} for name, text in STAGES]


def _us(ns):
    return None if ns is None else ns / 1e3


def lifecycle_dict(lc: Lifecycle, files: dict) -> dict:
    """A lifecycle for the report: who, what, where, and every stage's time (µs)."""
    sc = lc.syscall
    first = lc.requests[0] if lc.requests else None
    d = {"pid": sc.pid if sc else first.pid, "tid": sc.tid if sc else None,
         "comm": sc.comm if sc else first.comm, "syscall": sc.call if sc else None,
         "op": sc.op if sc else first.op, "direct": sc.direct if sc else None,
         "bytes": sc.nbytes if sc else first.bytes,
         "block_bytes": sum(r.bytes for r in lc.requests),
         "file": None, "offset": sc.offset if sc else None,
         "disk": first.dev if first else None, "sector": first.sector if first else None,
         "enter_ns": sc.enter if sc else None, "exit_ns": sc.exit if sc else None,
         "total_us": _us(lifecycle_total(lc)) if (sc or first) else None,
         "stages_us": {k: _us(v) for k, v in lifecycle_stages(lc).items()},
         "requests": [{"disk": r.dev, "sector": r.sector, "bytes": r.bytes, "rwbs": r.rwbs,
                       "bios": r.bios, "error": r.error, "queue_ns": r.queue, "insert_ns": r.insert,
                       "issue_ns": r.issue, "complete_ns": r.complete} for r in lc.requests]}
    if sc is not None:
        m = files.get((sc.dev, sc.ino))
        d["file"] = {"dev": sc.dev, "ino": sc.ino, "path": m.path if m else None}
    return d


def slowest(result: JoinResult, n: int | None) -> list[Lifecycle]:
    """The n slowest lifecycles that reached the block layer (n None: all, slowest first)."""
    with_io = [lc for lc in result.lifecycles if lc.requests]
    with_io.sort(key=lifecycle_total, reverse=True)
    return with_io if n is None else with_io[:n]


@dataclass
class _Totals:
    pid: int
    comm: str
    syscalls: int = 0
    read_bytes: int = 0
    write_bytes: int = 0
    syscall_ns: int = 0
    joined: int = 0  # syscalls joined to block requests
    requests: int = 0
    block_bytes: int = 0
    q2c_ns: int = 0
    q2c_count: int = 0
    max_ns: int = 0


def per_process(result: JoinResult) -> list[dict]:
    """Totals per process: a block request counts for the syscall that caused it, or else
    for the task that queued its bio (kworker for writeback, jbd2 for the journal)."""
    totals: dict[int, _Totals] = {}

    def entry(pid, comm):
        t = totals.get(pid)
        if t is None:
            t = totals[pid] = _Totals(pid, comm)
        return t

    for lc in result.lifecycles:
        sc = lc.syscall
        if sc is not None:
            t = entry(sc.pid, sc.comm)
            t.syscalls += 1
            if sc.op == "W":
                t.write_bytes += sc.nbytes
            else:
                t.read_bytes += sc.nbytes
            t.syscall_ns += sc.exit - sc.enter
            t.joined += bool(lc.requests)
        else:
            t = entry(lc.requests[0].pid, lc.requests[0].comm or "?")
        for rq in lc.requests:
            t.requests += 1
            t.block_bytes += rq.bytes
            if rq.queue is not None:
                t.q2c_ns += rq.complete - rq.queue
                t.q2c_count += 1
        if lc.requests or sc is not None:
            t.max_ns = max(t.max_ns, lifecycle_total(lc))
    rows = []
    for t in sorted(totals.values(), key=lambda t: (-(t.syscall_ns + t.q2c_ns), t.pid)):
        rows.append({"pid": t.pid, "comm": t.comm, "syscalls": t.syscalls, "read_bytes": t.read_bytes,
                     "write_bytes": t.write_bytes,
                     "syscall_avg_us": t.syscall_ns / t.syscalls / 1e3 if t.syscalls else None,
                     "joined": t.joined, "requests": t.requests, "block_bytes": t.block_bytes,
                     "q2c_avg_us": t.q2c_ns / t.q2c_count / 1e3 if t.q2c_count else None,
                     "max_us": t.max_ns / 1e3})
    return rows
