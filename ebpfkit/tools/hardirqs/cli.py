"""`ebpfkit hardirqs`: options -> Config, the session's rows -> a table (or histograms with
-d) through the output layer."""

from __future__ import annotations

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, interval_arguments, live_intervals

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
@click.option("-d", "--dist", is_flag=True, help="A log2 histogram of the handler's time per IRQ.")
@click.option("-C", "--per-cpu", is_flag=True, help="One row (or histogram) per IRQ and CPU.")
@click.option("-c", "--count", "counts_only", is_flag=True, help="Count handler runs only (no timing).")
@click.option("-N", "--nanoseconds", is_flag=True, help="Times in nanoseconds (default µs).")
@tool_options
@interval_arguments
def hardirqs(dist, per_cpu, counts_only, nanoseconds, interval, count):
    """Hard interrupt handlers: how often each ran and for how long, per IRQ (and CPU)."""
    from .session import Config, open as open_session

    config = build_config(Config, dist=dist, per_cpu=per_cpu, counts_only=counts_only,
                          nanoseconds=nanoseconds)
    out = Output.from_context()
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        for _ in live_intervals(out, interval, count, "Tracing hard IRQ handlers..."):
            stats = session.sample()
            if config.dist:
                out.histograms([s.histogram for s in stats])
            else:
                out.table(irq_table(stats, config))


def irq_table(stats, config) -> ResultTable:
    """One row per IRQ (and CPU): its handler's name and number, runs and total time; JSON
    and CSV carry the time in ns whatever the display unit."""
    columns = [Column("HARDIRQ", key="name"), Column("IRQ", key="irq")]
    keys = ["name", "irq"]
    if config.per_cpu:
        columns.append(Column("CPU", key="cpu"))
        keys.append("cpu")
    columns.append(Column("COUNT", key="count"))
    keys.append("count")
    if not config.counts_only:
        divisor = 1 if config.nanoseconds else 1000
        columns.append(Column(f"TOTAL_{config.unit}", key="total_ns", format=lambda ns: str(ns // divisor)))
        keys.append("total_ns")
    return ResultTable(columns, [vars(s) for s in stats], data_keys=keys)
