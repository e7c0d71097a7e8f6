"""`ebpfkit iofsstat`: options -> Config, each interval of the session -> sorted -> the
output layer. The tool is ``session``; the tables are ``views``."""

from __future__ import annotations

import click

from ...output import Output, tool_options
from ..common import build_config, interval_arguments, live_intervals, pid_option
from .session import HOOK_CHOICES
from .views import SORT_KEYS

EXAMPLES = """\b
Examples:
  ebpfkit iofsstat 1 5                  every second, five times
  ebpfkit iofsstat -p 185 2             only PID 185, every 2 seconds
  ebpfkit iofsstat --disk sda 1         files on sda (and its partitions), and sda's stats
  ebpfkit iofsstat --container 3f2a 1   only processes of the container whose id starts 3f2a
  ebpfkit iofsstat --sort w_bps -n 5 1  the five biggest writers
  ebpfkit --format json iofsstat 1 1    one JSON object per interval
  ebpfkit -v iofsstat 1 1               also say which hook counts file IO
"""


@click.command(epilog=EXAMPLES)
@pid_option
@click.option("--container", metavar="ID",
              help="Only processes of this container (its id, or the start of it).")
@click.option("--disk", metavar="NAME",
              help="Only this disk (e.g. sda, nvme0n1, loop0) and files on it or its partitions.")
@click.option("--sort", "sort_key", type=click.Choice(SORT_KEYS), metavar="COLUMN",
              help=f"Sort every view that has COLUMN by it (one of: {', '.join(SORT_KEYS)}); "
                   "default: most bytes first.")
@click.option("-n", "--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="Show at most N rows per process view.")
@click.option("--hook", type=click.Choice(HOOK_CHOICES), default="auto",
              show_default=True, help="How to count file IO (auto: the best this kernel has).")
@tool_options
@interval_arguments
def iofsstat(pid, container, disk, sort_key, top, hook, interval, count):
    """File IO per process and file (with full paths and containers) next to disk IO."""
    from .session import Config, open as open_session
    from .views import bytes_total, show, sort_rows

    config = build_config(Config, pid=pid, container=container, disk=disk, hook=hook)
    out = Output.from_context()
    with open_session(config) as session:
        out.info("file IO hook: %s", session.hook_label)
        for _ in live_intervals(out, interval, count, "Tracing file and disk IO..."):
            result = session.sample()
            result.disks = sort_rows(result.disks, sort_key, None, None)
            result.disk_processes = sort_rows(result.disk_processes, sort_key, bytes_total, top)
            result.files = sort_rows(result.files, sort_key, bytes_total, top)
            show(out, result)
