"""`ebpfkit irqoff`: options -> Config, the session's Sections -> the output layer (or a
rotating -f LOGFILE), one line each with its stack under it, as they come."""

from __future__ import annotations

from datetime import datetime

import click

from ...output import SIZE, Column, Output, RotatingLines, tool_options
from ...output.settings import DEFAULT_LOG_BACKUP
from ...output.values import clock_time
from ..common import build_config

EXAMPLES = """\b
Examples:
  ebpfkit irqoff                 sections longer than 10 ms (the default), until Ctrl-C
  ebpfkit irqoff -t 20 60        sections longer than 20 ms, for 60 seconds
  ebpfkit irqoff -f irqoff.log   into irqoff.log, rotated at 10M, 3 old files kept
  ebpfkit irqoff -f irqoff.log --log-file-size 1M --log-file-backups 5
  ebpfkit irqoff --mode software force hrtimer sampling, whatever the kernel has
  ebpfkit --format json irqoff -t 5 10
"""

COLUMNS = (Column("TIME(irqoff)", key="time", align="left", format=lambda t: clock_time(datetime.fromtimestamp(t))),
           Column("TYPE", key="kind", align="left", width=7), Column("CPU", key="cpu", width=3),
           Column("COMM", key="comm", align="left"), Column("TID", key="tid"),
           Column("LAT(us)", key="lat_us", width=8))
DATA_KEYS = [c.key for c in COLUMNS] + ["stack", "stack_note"]  # CSV: the frames in one cell


@click.command(epilog=EXAMPLES)
@click.argument("duration", type=click.FloatRange(min=0, min_open=True), required=False,
                metavar="[DURATION]")
@click.option("-t", "--threshold", "threshold_ms", type=float, default=10.0, show_default=True,
              metavar="MS", help="Report sections with interrupts (softirqs) off longer than this.")
@click.option("-f", "--log-file", "log_file", type=click.Path(dir_okay=False), metavar="LOGFILE",
              help="Write the sections to LOGFILE (rotated) instead of stdout.")
@click.option("--log-file-size", type=SIZE, default="10M", show_default=True,
              help="Rotate LOGFILE at this size, e.g. 512K, 10M.")
@click.option("--log-file-backups", type=click.IntRange(min=0), default=DEFAULT_LOG_BACKUP,
              show_default=True, metavar="N", help="Rotated LOGFILEs to keep (LOGFILE.1 the newest).")
@click.option("--mode", type=click.Choice(["auto", "exact", "nmi", "software"]), default="auto",
              show_default=True, help="How to find hard-IRQ-off sections (auto: the best this kernel has).")
@tool_options
def irqoff(duration, threshold_ms, log_file, log_file_size, log_file_backups, mode):
    """Sections with hard interrupts off, or softirqs off, longer than -t MS: the time, CPU,
    task (comm, tid), length and kernel stack of each, as they come, for DURATION seconds or
    until Ctrl-C. Exact with preemptirq tracepoints; else NMI sampling where a hardware PMU
    exists (the culprit's stack); else hrtimer sampling (the stack when the late tick ran,
    labelled so; lengths within a tick, a tenth of the threshold)."""
    from .session import Config, open as open_session

    config = build_config(Config, threshold_ms=threshold_ms, mode=mode)
    out = _output(log_file, log_file_size, log_file_backups)
    out.event_columns(*COLUMNS, data_keys=DATA_KEYS, detail=_stack_lines)
    with open_session(config) as session:
        out.info("mode: %s (%s)", session.mode, session.hook)
        out.banner(f"irqoff mode: {session.mode}: {session.hook}")
        if session.softirqs_unwatched:
            out.warn("%s", session.softirqs_unwatched)
        try:  # first, so a Ctrl-C right after the banner ends the run cleanly too
            out.banner(f"Tracing sections with interrupts off longer than {threshold_ms:g} ms"
                       + (f" for {duration:g} s" if duration else "") + "... Hit Ctrl-C to end.")
            for section in session.events(timeout=duration):
                out.event(section.to_dict())
        except KeyboardInterrupt:  # the end: what the kernel had sent still counts
            pass
        for section in session.finish():  # detached first: a flood cannot keep it going
            out.event(section.to_dict())
        out.lost(session.lost)


def _output(log_file, size, backups) -> Output:
    out = Output.from_context()
    if not log_file:
        return out
    try:
        stream = RotatingLines(log_file, size, backups)
    except OSError as exc:
        raise click.FileError(log_file, hint=exc.strerror or str(exc)) from None
    click.get_current_context().call_on_close(stream.close)
    return Output(out.settings, name=out.name, stream=stream)


def _stack_lines(record) -> list[str]:
    """Under each section in table format: its stack, innermost first, and whose it is."""
    frames = record["stack"] or ["(no kernel stack: user space was running)" if record["kind"] == "hardirq"
                                 else "(no stack)"]
    return frames + ([record["stack_note"]] if record["stack_note"] else [])
