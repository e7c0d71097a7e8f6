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
  ebpfkit runqlat -L 1 3       one histogram per thread
  ebpfkit runqlat --pidnss 5   one histogram per PID namespace
  ebpfkit runqlat -p 185 1     only PID 185
  ebpfkit runqlat -c /sys/fs/cgroup/system.slice/nginx.service 1
                               only the tasks of that cgroup (v2) and below it
  ebpfkit runqlat --by cgroup 1 5
                               one histogram per cgroup, named by its path
  ebpfkit runqlat --by container -c /sys/fs/cgroup/kubepods.slice 5
                               one per container (or pod) of the Kubernetes pods
  ebpfkit --format json runqlat 1 1
"""


@click.command(epilog=EXAMPLES)
@click.option("-m", "--milliseconds", is_flag=True, help="Histogram in milliseconds (default µs).")
@click.option("-P", "--per-process", is_flag=True, help="One histogram per process.")
@click.option("-L", "--tids", "per_thread", is_flag=True, help="One histogram per thread.")
@click.option("--pidnss", "per_pidns", is_flag=True, help="One histogram per PID namespace.")
@click.option("--by", type=click.Choice(["cgroup", "container"]),
              help="One histogram per cgroup (v2; named by its path), or per container (or pod, "
                   "from the cgroup's path: docker, containerd, CRI-O, podman, Kubernetes).")
@pid_option
@click.option("-c", "--cgroup", metavar="PATH",
              help="Only the tasks of this cgroup v2 directory (and of the cgroups below it).")
@tool_options
@interval_arguments
def runqlat(milliseconds, per_process, per_thread, per_pidns, by, pid, cgroup, interval, count):
    """Run-queue latency: time from a task becoming runnable until it runs, as log2 histograms."""
    from .session import Config, open as open_session

    config = build_config(Config, milliseconds=milliseconds, per_process=per_process, per_thread=per_thread,
                          per_pidns=per_pidns, by=by, pid=pid, cgroup=cgroup)
    out = Output.from_context()
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        for _ in live_intervals(out, interval, count, "Tracing run queue latency..."):
            out.histograms(session.sample())
