"""iotrace: full-path IO tracing in two steps, as the source's recorder and reporter.

`record` timestamps each IO at every layer it passes (read/write syscalls, then the block
layer's queue, insert, issue and complete) into a versioned file that also carries the
host identity and the files' extent maps. `report` joins the records into per-request
lifecycles and prints where the time went. File format: docs/iotrace-format.md.

The tool is ``session`` (recording and reporting, as data); this is options -> Config, the
session's results -> the output layer."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from dataclasses import asdict

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, pid_option, usage_errors

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
@click.option("--disk", metavar="NAME", help="Only this disk (and its partitions), e.g. vda, loop0, vda1.")
@tool_options(output=False)
def record(record_file, duration, pid, disk):
    """Record each IO's timestamps at every layer it passes into FILE."""
    from .session import Config, open as open_session

    config = build_config(Config, record_file=record_file, duration=duration, pid=pid, disk=disk)
    out = Output.from_context()
    banner = f"Recording IO to {record_file}... " + (f"for {duration:g} s." if duration else "Hit Ctrl-C to end.")
    stop: list[int] = []  # the signal that ended the recording
    with usage_errors(), open_session(config) as session, _stop_signals(stop):
        summary = asdict(session.record(stopped=lambda: bool(stop), started=lambda: out.banner(banner)))
    if stop and stop[0] == signal.SIGTERM:
        raise SystemExit(128 + signal.SIGTERM)  # the file is complete; exit as killed
    out.document(summary, ResultTable([Column("file", key="file"), Column("syscalls", key="syscalls"),
                                       Column("block events", key="block_events"),
                                       Column("files mapped", key="files_mapped"), Column("lost", key="lost")],
                                      [summary], data_keys=list(summary)))
    out.lost(summary["lost"], "records")
    if summary["dropped_syscalls"]:
        out.warn("%d syscalls not recorded: too many in flight at once", summary["dropped_syscalls"])


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
    from .session import ReportConfig, report as read_report

    out = Output.from_context()
    with usage_errors():
        result = read_report(build_config(ReportConfig, record_file=record_file, top=top, partial=partial))
    rec, summary = result.recording, result.summary
    if rec.truncated:
        out.warn("%s is truncated: the report covers what it holds", record_file)
    out.lost(rec.lost, "records while recording")
    for reason, n in sorted(summary["unmapped"].items()):
        out.warn("%d syscalls not joined to block requests: %s", n, reason)

    out.document({"file": record_file, "format_version": rec.header["version"],
                  "host": rec.header.get("host"), "filters": rec.header.get("filters"),
                  "summary": summary, "stages": result.stages, "slowest": result.slowest,
                  "processes": result.processes},
                 _report_tables(record_file, result))


def _report_tables(record_file, result) -> list[ResultTable]:
    """The report for people (and CSV): totals, the per-layer breakdown, the slowest
    requests, per process."""
    summary, slow = result.summary, result.slowest
    host = result.recording.header.get("host") or {}
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
            [s for s in result.stages if s["count"]], title="Per-layer latency (µs)"),
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
            result.processes, title="Per process (µs)"),
    ]
