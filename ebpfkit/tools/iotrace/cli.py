"""iotrace: full-path IO tracing in two steps, as the source's recorder and reporter.

`record` timestamps each IO at every layer it passes (read/write syscalls, then the block
layer's queue, insert, issue and complete) into a versioned file that also carries the
host identity and the files' extent maps. `report` joins the records into per-request
lifecycles and prints where the time went. File format: docs/iotrace-format.md."""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import disk_option, pid_option

EXAMPLES = """\b
Examples:
  ebpfkit iotrace record -o io.iot --duration 10        every disk, 10 seconds
  ebpfkit iotrace record -o io.iot --disk vda -p 1234   one process on one disk
  ebpfkit iotrace report io.iot                         the latency breakdown
  ebpfkit iotrace report io.iot --top 0 --format json   every lifecycle, as data
"""

RECORD_EXAMPLES = """\b
Examples:
  ebpfkit iotrace record -o io.iot                      until Ctrl-C
  ebpfkit iotrace record -o io.iot --duration 5 --disk loop0
"""

REPORT_EXAMPLES = """\b
Examples:
  ebpfkit iotrace report io.iot
  ebpfkit iotrace report io.iot --top 20
  ebpfkit iotrace report io.iot --format json
"""

_KIND_STAGE = {2: "queue", 3: "insert", 4: "issue", 5: "complete"}  # iotrace.h IOTRACE_*
_SYSCALLS = {1: "read", 2: "write", 3: "pread64", 4: "pwrite64", 5: "readv", 6: "writev",
             7: "preadv", 8: "pwritev", 9: "preadv2", 10: "pwritev2"}
_S_IFMT, _S_IFREG = 0o170000, 0o100000
MAX_FS_DEVS = 16  # iotrace.h IOTRACE_MAX_FSDEVS


@click.group(epilog=EXAMPLES)
def iotrace():
    """Record IO at every layer (syscall, block queue/insert/issue/complete) and report
    per-request lifecycles and the per-layer latency breakdown."""


# --- record ----------------------------------------------------------------------------

@iotrace.command(epilog=RECORD_EXAMPLES)
@click.option("-o", "--output", "record_file", required=True, metavar="FILE",
              type=click.Path(dir_okay=False), help="The record file to write.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), metavar="S",
              help="Stop after S seconds (default: at Ctrl-C).")
@pid_option
@disk_option("Only this disk (and its partitions), e.g. vda, loop0, vda1.")
@tool_options(output=False)
def record(record_file, duration, pid, disk):
    """Record each IO's timestamps at every layer it passes into FILE."""
    from ..._version import __version__
    from ...engine import compile as compile_bpf
    from ...sysinfo.devices import encode_kernel_dev
    from .fileformat import RecordWriter

    out = Output.from_context()
    spec = compile_bpf(os.path.join(os.path.dirname(__file__), "iotrace.bpf.c"))
    # the BPF side compares kernel dev_ts, of the disk and of up to MAX_FS_DEVS filesystems
    fs_devs = [encode_kernel_dev(*d) for d in disk.file_devs[:MAX_FS_DEVS]] if disk else []
    spec.rodata.update({"targ_tgid": pid or 0, "self_tgid": os.getpid(),
                        "targ_disk": encode_kernel_dev(*disk.disk) if disk else 0, "targ_ndevs": len(fs_devs),
                        "targ_fsdevs": fs_devs + [0] * (MAX_FS_DEVS - len(fs_devs))})

    def open_writer():  # only once the programs run: a failed load leaves no file behind
        try:
            writer = RecordWriter(record_file)
        except OSError as exc:
            raise click.BadParameter(f"cannot write {record_file}: {exc.strerror}", param_hint="'-o'") from None
        writer.header(filters={"pid": pid, "disk": disk.name if disk else None}, tool=f"ebpfkit {__version__}")
        return writer

    summary = _record(out, spec, open_writer, duration, record_file)
    out.document(summary, ResultTable([Column("file", key="file"), Column("syscalls", key="syscalls"),
                                       Column("block events", key="block_events"),
                                       Column("files mapped", key="files_mapped"), Column("lost", key="lost")],
                                      [summary], data_keys=list(summary)))
    out.lost(summary["lost"], "records")
    if summary["dropped_syscalls"]:
        out.warn("%d syscalls not recorded: too many in flight at once", summary["dropped_syscalls"])


def _record(out, spec, open_writer, duration, record_file) -> dict:
    from ...sysinfo.devices import decode_kernel_dev, dev_str
    from .devices import device_info
    from .fiemap import FileTracker
    from .fileformat import BlockEvent, Syscall

    tracker = FileTracker()
    writer = None
    devs: set[str] = set()
    counts = {"syscalls": 0, "block_events": 0}
    o_direct = getattr(os, "O_DIRECT", 0)

    def on_event(ev):
        dev = dev_str(decode_kernel_dev(ev.dev))
        if ev.kind == 1:
            regular = ev.mode & _S_IFMT == _S_IFREG
            s = Syscall(ev.ts_enter, ev.ts, ev.tid, ev.tgid, ev.comm, _SYSCALLS.get(ev.syscall, "read"), ev.fd,
                        dev, ev.ino, ev.offset, ev.count, ev.ret, bool(ev.flags & o_direct),
                        "reg" if regular else "blk", ev.gen)
            writer.syscall(s)
            counts["syscalls"] += 1
            if regular:
                tracker.see(ev.tgid, ev.fd, dev, ev.ino, ev.gen)
        else:
            writer.block(BlockEvent(ev.ts, _KIND_STAGE[ev.kind], dev, ev.sector, ev.nr_sector, ev.rwbs,
                                    ev.tid, ev.tgid, ev.comm, ev.error))
            counts["block_events"] += 1
        devs.add(dev)

    started = time.monotonic_ns()
    stop: list[int] = []  # the signal that ended the recording
    try:
        with spec.load() as obj, _stop_signals(stop):
            obj.attach()
            reader = obj.ring_buffer("events", on_event, event_type="iotrace_event")
            writer = open_writer()
            out.banner(f"Recording IO to {record_file}... "
                       + (f"for {duration:g} s." if duration else "Hit Ctrl-C to end."))
            deadline = time.monotonic() + duration if duration else None
            while not stop and (deadline is None or time.monotonic() < deadline):
                wait = 100 if deadline is None else max(0, min(100, int((deadline - time.monotonic()) * 1000)))
                reader.poll(wait)  # a signal interrupts the wait
            for link in obj.links:  # stop the programs, then take what they wrote
                link.close()
            while reader.poll(0):
                pass
            lost, dropped = reader.lost or 0, int(obj.bss["dropped_syscalls"])
            # the layer mapping table, now that the files' blocks are allocated
            files = tracker.finish()
            for dev in sorted(devs):
                info = device_info(dev)
                if info is not None:
                    writer.device(info)
            for m in files:
                writer.file(m)
            writer.end(lost=lost, dropped_syscalls=dropped, duration_ns=time.monotonic_ns() - started)
    finally:
        tracker.close()
        if writer is not None:
            writer.close()
    if stop and stop[0] == signal.SIGTERM:
        raise SystemExit(128 + signal.SIGTERM)  # the file is complete; exit as killed
    return {"file": record_file, **counts, "files_mapped": sum(1 for m in files if m.extents),
            "files": len(files), "lost": lost, "dropped_syscalls": dropped}


@contextmanager
def _stop_signals(stop: list):
    """SIGINT (Ctrl-C) and SIGTERM end a recording: note them instead of raising, so the file
    is always finished (an exception raised inside a ring-buffer callback would be lost)."""
    def note(signum, _frame):
        stop.append(signum)

    old = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


# --- report ----------------------------------------------------------------------------

@iotrace.command(epilog=REPORT_EXAMPLES)
@click.argument("record_file", metavar="FILE", type=click.Path(exists=True, dir_okay=False))
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="List the N slowest requests (0: all).")
@click.option("--partial", is_flag=True, help="Report a truncated file (one without its end record).")
@tool_options
def report(record_file, top, partial):
    """Join FILE's records into per-request lifecycles and show where the time went."""
    from . import stats
    from .fileformat import RecordFileError, read_recording
    from .join import join

    out = Output.from_context()
    try:
        rec = read_recording(record_file, allow_truncated=partial)
    except RecordFileError as exc:
        raise click.BadParameter(str(exc) + (f" ({exc.hint})" if exc.hint else ""),
                                 param_hint="'FILE'") from None
    result = join(rec)
    summary = _summary(rec, result)
    stages = stats.breakdown(result)
    slow = [stats.lifecycle_dict(lc, rec.files) for lc in stats.slowest(result, top or None)]
    procs = stats.per_process(result)

    if rec.truncated:
        out.warn("%s is truncated: the report covers what it holds", record_file)
    out.lost(rec.lost, "records while recording")
    for reason, n in sorted(summary["unmapped"].items()):
        out.warn("%d syscalls not joined to block requests: %s", n, reason)

    out.document({"file": record_file, "format_version": rec.header["version"],
                  "host": rec.header.get("host"), "filters": rec.header.get("filters"),
                  "summary": summary, "stages": stages, "slowest": slow, "processes": procs},
                 _report_tables(record_file, rec, summary, stages, slow, procs))


def _report_tables(record_file, rec, summary, stages, slow, procs) -> list[ResultTable]:
    """The report for people (and CSV): totals, the per-layer breakdown, the slowest
    requests, per process."""
    host = rec.header.get("host") or {}
    us = ".1f"
    with_insert = any(d["stages_us"]["Q2I"] is not None for d in slow)
    block_cols = ["Q2I", "I2D"] if with_insert else ["Q2D"]
    rows = [{"pid": d["pid"], "comm": d["comm"], "call": d["syscall"] or "-", "op": d["op"],
             "bytes": d["block_bytes"], "sector": d["sector"], **d["stages_us"], "total": d["total_us"]}
            for d in slow]
    return [
        ResultTable(
            [Column("syscalls", key="syscalls"), Column("bytes", key="syscall_bytes"),
             Column("block reqs", key="block_requests"), Column("block bytes", key="block_bytes"),
             Column("joined", key="joined_syscalls"), Column("incomplete", key="incomplete_requests"),
             Column("lost", key="lost")], [summary],
            title=f"{record_file}: {host.get('hostname', '?')} ({host.get('kernel', '?')}), "
                  f"{summary['duration_s']:.1f} s"),
        ResultTable(
            [Column("stage", key="stage"), Column("count", key="count"), Column("avg", key="avg", format=us),
             Column("p50", key="p50", format=us), Column("p99", key="p99", format=us),
             Column("max", key="max", format=us), Column("what", key="description", max_width=44)],
            [s for s in stages if s["count"]], title="Per-layer latency (µs)"),
        ResultTable(
            [Column("pid", key="pid"), Column("comm", key="comm", max_width=12), Column("call", key="call"),
             Column("op", key="op"), Column("bytes", key="bytes"), Column("sector", key="sector"),
             *[Column(c, key=c, format=us) for c in ["S2Q", *block_cols, "D2C", "C2R"]],
             Column("total", key="total", format=us)],
            rows, title=f"Slowest {len(rows)} requests (µs)"),
        ResultTable(
            [Column("pid", key="pid"), Column("comm", key="comm", max_width=14),
             Column("syscalls", key="syscalls"), Column("read", key="read_bytes"),
             Column("written", key="write_bytes"), Column("sys avg", key="syscall_avg_us", format=us),
             Column("joined", key="joined"), Column("reqs", key="requests"),
             Column("blk bytes", key="block_bytes"), Column("Q2C avg", key="q2c_avg_us", format=us)],
            procs, title="Per process (µs)"),
    ]


def _summary(rec, result) -> dict:
    syscalls = rec.syscalls
    direct = [lc for lc in result.lifecycles if lc.syscall is not None and lc.syscall.direct
              and lc.syscall.nbytes]
    end = rec.end or {}
    return {"duration_s": (end.get("duration_ns") or 0) / 1e9, "syscalls": len(syscalls),
            "syscall_bytes": sum(s.nbytes for s in syscalls),
            "block_requests": len(result.block.requests),
            "block_bytes": sum(r.bytes for r in result.block.requests),
            "joined_syscalls": len(result.joined),
            "direct_syscalls": len(direct), "direct_joined": sum(1 for lc in direct if lc.requests),
            "incomplete_requests": result.block.incomplete,
            "unmatched_bios": result.block.unmatched_bios,
            "lost": rec.lost, "dropped_syscalls": int(end.get("dropped_syscalls", 0) or 0),
            "truncated": rec.truncated, "unmapped": result.unmapped}
