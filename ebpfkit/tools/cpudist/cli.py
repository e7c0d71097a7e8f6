"""`ebpfkit cpudist`: options -> Config, the session's histograms -> the output layer."""

from __future__ import annotations

import click

from ...output import Output, tool_options
from ..common import build_config, interval_arguments, live_intervals, pid_option

EXAMPLES = """\b
Examples:
  ebpfkit cpudist              on-CPU time of all tasks, one histogram when you press Ctrl-C
  ebpfkit cpudist 1 10         a histogram every second, ten times
  ebpfkit cpudist -O 1 5       off-CPU time (asleep, blocked or waiting for a CPU) instead
  ebpfkit cpudist -m 5         milliseconds, every 5 seconds
  ebpfkit cpudist -P 1 3       one histogram per process
  ebpfkit cpudist -L -p 185 1  one histogram per thread of PID 185
  ebpfkit --format json cpudist -O 1 1
"""


@click.command(epilog=EXAMPLES)
@click.option("-O", "--offcpu", is_flag=True, help="Time off CPU, from switch out to switch in (default: on CPU).")
@click.option("-m", "--milliseconds", is_flag=True, help="Histogram in milliseconds (default µs).")
@click.option("-P", "--per-process", is_flag=True, help="One histogram per process.")
@click.option("-L", "--per-thread", is_flag=True, help="One histogram per thread.")
@pid_option
@tool_options
@interval_arguments
def cpudist(offcpu, milliseconds, per_process, per_thread, pid, interval, count):
    """Time on CPU per scheduling (from a task's switch in to its switch out), or with -O
    off CPU, as log2 histograms."""
    from .session import Config, open as open_session

    config = build_config(Config, offcpu=offcpu, milliseconds=milliseconds, per_process=per_process,
                          per_thread=per_thread, pid=pid)
    out = Output.from_context()
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        what = "off-CPU" if offcpu else "on-CPU"
        for _ in live_intervals(out, interval, count, f"Tracing {what} time..."):
            out.histograms(session.sample())
