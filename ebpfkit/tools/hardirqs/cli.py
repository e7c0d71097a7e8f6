"""`ebpfkit hardirqs`: options -> Config, the session's rows -> a table (or histograms with
-d) through the output layer (handler_stats.show_stats)."""

from __future__ import annotations

import click

from ...output import Output, tool_options
from ..common import build_config, interval_arguments
from ..handler_stats import handler_stats_options, run_command

EXAMPLES = """\b
Examples:
  ebpfkit hardirqs              time per IRQ handler when you press Ctrl-C
  ebpfkit hardirqs 1 10         every second, ten times
  ebpfkit hardirqs -c 1         counts only (no timing: cheapest)
  ebpfkit hardirqs -C 1         per IRQ and CPU
  ebpfkit hardirqs -d 5         a histogram of the handler's time per IRQ, every 5 s
  ebpfkit hardirqs -dN 1 3      the histograms in nanoseconds
  ebpfkit --format json hardirqs 1 1
  ebpfkit -v hardirqs 1 1       also say which hook it attached to
"""


@click.command(epilog=EXAMPLES)
@handler_stats_options("IRQ")
@tool_options
@interval_arguments
def hardirqs(dist, per_cpu, counts_only, nanoseconds, engine, interval, count):
    """Hard interrupt handlers: how often each ran and for how long, per IRQ (and CPU)."""
    from .session import Config, open as open_session

    config = build_config(Config, dist=dist, per_cpu=per_cpu, counts_only=counts_only,
                          nanoseconds=nanoseconds, engine=engine)
    run_command(Output.from_context(), open_session, config, interval, count,
                "Tracing hard IRQ handlers...", "hardirq", "irq")
