"""`ebpfkit runqslower`: options -> Config, the session's Wakeups -> the output layer, one
line (or JSON object, or CSV row) each as they come."""

from __future__ import annotations

from datetime import datetime

import click

from ...output import Column, Output, tool_options
from ...output.values import clock_time
from ..common import build_config, pid_option

EXAMPLES = """\b
Examples:
  ebpfkit runqslower              waits of 10 ms or more (the default), until Ctrl-C
  ebpfkit runqslower 1000         waits of 1 ms or more
  ebpfkit runqslower -p 185       only PID 185
  ebpfkit runqslower -t 188       only thread 188
  ebpfkit runqslower -P 500       with the task each one replaced on its CPU
  ebpfkit --format json runqslower 2000
"""

COLUMNS = (Column("TIME", key="time", format=lambda t: clock_time(datetime.fromtimestamp(t))),
           Column("COMM", key="comm", align="left"), Column("PID", key="pid"), Column("TID", key="tid"),
           Column("LAT(us)", key="delay_us", width=8), Column("CPU", key="cpu", width=3))
PREVIOUS = (Column("PREV COMM", key="prev_comm", align="left"), Column("PREV TID", key="prev_tid"))
WAKER = (Column("WAKER COMM", key="waker_comm", align="left"), Column("WAKER PID", key="waker_pid"))


@click.command(epilog=EXAMPLES)
@click.argument("min_us", type=int, default=10000, required=False, metavar="[MIN_US]")
@pid_option
@click.option("-t", "--tid", type=int, metavar="TID", help="Only this thread.")
@click.option("-P", "--previous", is_flag=True, help="Also the task each one replaced on its CPU.")
@tool_options
def runqslower(min_us, pid, tid, previous):
    """Each run-queue wait of at least MIN_US µs (default 10000): the task, its CPU, how long
    it waited, and the task that woke it (none when it was preempted); -P adds the task it
    replaced."""
    from .session import open as open_session, Config

    config = build_config(Config, min_us=min_us, pid=pid, tid=tid)
    out = Output.from_context()
    columns = COLUMNS + (PREVIOUS if previous else ()) + WAKER
    out.event_columns(*columns)
    keys = [c.key for c in columns]
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        try:  # first, so a Ctrl-C right after the banner ends the run cleanly too
            out.banner(f"Tracing run queue waits of {min_us} µs or more... Hit Ctrl-C to end.")
            for wakeup in session.events():
                _print(out, wakeup, keys)
        except KeyboardInterrupt:  # the end: what the kernel had sent still counts
            for wakeup in session.finish():
                _print(out, wakeup, keys)
        out.lost(session.lost)


def _print(out, wakeup, keys) -> None:
    record = wakeup.to_dict()
    out.event({key: record[key] for key in keys})
