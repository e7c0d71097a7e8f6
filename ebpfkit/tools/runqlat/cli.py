"""`ebpfkit runqlat`: options -> Config, the session's histograms -> the output layer."""

from __future__ import annotations

import click

from ...output import Output, tool_options
from ..common import build_config, interval_arguments, live_intervals, pid_option

EXAMPLES = """\b
Examples:
  ebpfkit runqlat              one histogram of all tasks when you press Ctrl-C
  ebpfkit runqlat 1 10         a histogram every second, ten times
  ebpfkit runqlat -m 5         milliseconds, every 5 seconds
  ebpfkit runqlat -P 1 3       one histogram per process
  ebpfkit runqlat -p 185 1     only PID 185
  ebpfkit --format json runqlat 1 1
"""


@click.command(epilog=EXAMPLES)
@click.option("-m", "--milliseconds", is_flag=True, help="Histogram in milliseconds (default µs).")
@click.option("-P", "--per-process", is_flag=True, help="One histogram per process.")
@pid_option
@tool_options
@interval_arguments
def runqlat(milliseconds, per_process, pid, interval, count):
    """Run-queue latency: time from a task becoming runnable until it runs, as log2 histograms."""
    from .session import Config, open as open_session

    config = build_config(Config, milliseconds=milliseconds, per_process=per_process, pid=pid)
    out = Output.from_context()
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        for _ in live_intervals(out, interval, count, "Tracing run queue latency..."):
            out.histograms(session.sample())
