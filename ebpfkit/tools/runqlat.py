"""runqlat: how long runnable tasks wait for a CPU (scheduler run-queue latency)."""

from __future__ import annotations

import click

from ..output import Output, tool_options
from .common import interval_arguments, intervals, pid_option

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
    from ..engine import compile as compile_bpf

    out = Output.from_context()
    spec = compile_bpf("runqlat.bpf.c")
    out.info("hook: %s", _choose_hook(spec))
    spec.rodata.update({"targ_ms": milliseconds, "targ_per_process": per_process,
                        "targ_tgid": pid or 0})
    unit = "msecs" if milliseconds else "usecs"
    with spec.load() as obj:
        obj.attach()
        out.banner("Tracing run queue latency... Hit Ctrl-C to end.")
        hists = obj.maps["hists"]
        with out.live():
            for _ in intervals(interval, count):
                out.histograms(_histograms(hists.pop_all(), unit, per_process))


def _choose_hook(spec) -> str:
    """tp_btf where the kernel has BTF of its own (its arguments typed, no copies), else raw
    tracepoints, which need only CO-RE: a --btf file serves them."""
    from ..engine import features

    typed = features.probe("kernel_btf").supported
    for prog in spec.programs.values():
        prog.autoload = prog.section.startswith("tp_btf/") == typed
    return "tp_btf sched_wakeup/sched_switch" if typed else "raw tracepoints sched_wakeup/sched_switch"


def _histograms(entries, unit, per_process):
    from ..histogram import Log2Histogram

    result = []
    for key, value in sorted(entries, key=lambda kv: kv[0]):
        label = f"pid = {key} {value.comm}" if per_process else None
        result.append(Log2Histogram.from_counts(list(value.slots), unit=unit, label=label))
    if not result:
        result.append(Log2Histogram.from_counts([], unit=unit))
    return result
