"""`ebpfkit runqlen`: options -> Config, the session's histograms (or their occupancy) -> the
output layer."""

from __future__ import annotations

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, interval_arguments, live_intervals

EXAMPLES = """\b
Examples:
  ebpfkit runqlen              one histogram of all CPUs when you press Ctrl-C
  ebpfkit runqlen 1 10         a histogram every second, ten times
  ebpfkit runqlen -C 1 5       one histogram per CPU
  ebpfkit runqlen -O 1         run-queue occupancy (% of samples with a task waiting)
  ebpfkit runqlen -CO 1        occupancy per CPU
  ebpfkit runqlen -F 499 1     sample 499 times a second (default 99)
  ebpfkit --format json runqlen -C 1 1
"""


@click.command(epilog=EXAMPLES)
@click.option("-C", "--per-cpu", is_flag=True, help="One histogram (or occupancy) per CPU.")
@click.option("-O", "--occupancy", is_flag=True,
              help="Run-queue occupancy: the % of samples with at least one task waiting.")
@click.option("-F", "--frequency", type=int, default=99, show_default=True, metavar="HZ",
              help="Samples a second on each CPU.")
@tool_options
@interval_arguments
def runqlen(per_cpu, occupancy, frequency, interval, count):
    """Run-queue length: tasks waiting for a CPU, sampled on every CPU with the cpu-clock
    perf event, as linear histograms (the running task not counted)."""
    from .session import Config, open as open_session

    config = build_config(Config, per_cpu=per_cpu, frequency=frequency)
    out = Output.from_context()
    with open_session(config) as session:
        out.info("hook: %s at %d Hz", session.hook, config.frequency)
        for _ in live_intervals(out, interval, count, "Sampling run queue length..."):
            histograms = session.sample()
            if occupancy:
                out.table(_occupancy_table(histograms))
            else:
                out.histograms(histograms)


def _occupancy_table(histograms) -> ResultTable:
    from .session import occupancy

    rows = [{"cpu": h.label.split()[-1] if h.label else "all", "samples": h.total, "occupancy": occupancy(h)}
            for h in histograms]
    return ResultTable([Column("CPU", key="cpu"), Column("SAMPLES", key="samples"),
                        Column("OCCUPANCY %", key="occupancy", format=".2f")], rows)
