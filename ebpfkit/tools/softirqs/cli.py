"""`ebpfkit softirqs`: options -> Config, the session's rows -> a table (or histograms with
-d) through the output layer (handler_stats.show_stats)."""

from __future__ import annotations

import click

from ...output import Output, tool_options
from ..common import build_config, interval_arguments
from ..handler_stats import handler_stats_options, run_command

EXAMPLES = """\b
Examples:
  ebpfkit softirqs              time per softirq vector when you press Ctrl-C
  ebpfkit softirqs 1 10         every second, ten times
  ebpfkit softirqs -c 1         counts only (no timing: cheapest)
  ebpfkit softirqs -C 1         per vector and CPU
  ebpfkit softirqs -d 5         a histogram of the handler's time per vector, every 5 s
  ebpfkit softirqs -dN 1 3      the histograms in nanoseconds
  ebpfkit --format json softirqs 1 1
  ebpfkit -v softirqs 1 1       also say which hook it attached to
"""


@click.command(epilog=EXAMPLES)
@handler_stats_options("vector")
@tool_options
@interval_arguments
def softirqs(dist, per_cpu, counts_only, nanoseconds, engine, interval, count):
    """Softirqs: how often each vector's handler ran and for how long, per vector (and CPU)."""
    from .session import Config, open as open_session

    config = build_config(Config, dist=dist, per_cpu=per_cpu, counts_only=counts_only,
                          nanoseconds=nanoseconds, engine=engine)
    run_command(Output.from_context(), open_session, config, interval, count,
                "Tracing softirqs...", "softirq", "vector")
