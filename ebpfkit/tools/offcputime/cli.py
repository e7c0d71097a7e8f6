"""`ebpfkit offcputime`: options -> Config, trace for DURATION seconds (or until Ctrl-C), then
the session's entries -> a table of stacks through the output layer (JSON and CSV rows with
-/--format), or folded lines for flame graphs with -f."""

from __future__ import annotations

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, intervals, pid_option

EXAMPLES = """\b
Examples:
  ebpfkit offcputime                  every task's off-CPU time by stack, until Ctrl-C
  ebpfkit offcputime 5                for 5 seconds
  ebpfkit offcputime -p 185 5         only PID 185
  ebpfkit offcputime -t 188           only thread 188
  ebpfkit offcputime -u -p 185        user stacks only (no kernel frames)
  ebpfkit offcputime -k --state 2     kernel stacks of uninterruptible sleeps (D state)
  ebpfkit offcputime -m 1000 -M 100000   only blocks of 1 ms to 100 ms
  ebpfkit offcputime -f -p 185 10 > out.folded
                                      folded stacks, then: flamegraph.pl --color=io out.folded
  ebpfkit --format json offcputime -p 185 5
"""

COLUMNS = (Column("COMM", key="comm", align="left"), Column("PID", key="pid"), Column("TID", key="tid"),
           Column("COUNT", key="count"), Column("OFF-CPU(us)", key="total_us"),
           Column("STACK (innermost first: kernel, --, user)", key="stack", align="left"))
DATA_KEYS = ("comm", "pid", "tid", "count", "total_us", "kernel_stack", "user_stack")


@click.command(epilog=EXAMPLES)
@click.argument("duration", type=click.IntRange(min=1), required=False)
@pid_option
@click.option("-t", "--tid", type=int, metavar="TID", help="Only this thread.")
@click.option("-u", "--user-stacks-only", is_flag=True, help="User stacks only (no kernel frames).")
@click.option("-k", "--kernel-stacks-only", is_flag=True, help="Kernel stacks only (no user frames).")
@click.option("--state", type=int, metavar="N",
              help="Only tasks leaving the CPU in this state: 0 preempted (runnable), 1 sleeping "
                   "(S), 2 uninterruptible (D), 4 stopped (T), ... (the state bits ps shows).")
@click.option("-m", "--min-block-time", type=int, default=1, show_default=True, metavar="US",
              help="Count only times off the CPU of at least US µs.")
@click.option("-M", "--max-block-time", type=int, metavar="US",
              help="Count only times off the CPU of at most US µs.")
@click.option("-f", "--folded", is_flag=True,
              help="Folded stacks (comm;user frames;-;kernel frames µs), for flamegraph.pl or speedscope.")
@click.option("--stack-storage-size", type=int, default=1024, show_default=True, metavar="N",
              help="How many distinct stacks the kernel can keep (more stacks show as missed).")
@tool_options
def offcputime(duration, pid, tid, user_stacks_only, kernel_stacks_only, state, min_block_time,
               max_block_time, folded, stack_storage_size):
    """Time tasks spent off the CPU (blocked, sleeping, preempted), summed by thread and by
    the kernel and user stacks they left it with, printed at the end: after DURATION seconds
    or at Ctrl-C. User stacks unwind through frame pointers (-fno-omit-frame-pointer)."""
    from .session import MISSED_KERNEL, MISSED_USER, Config, open as open_session

    config = build_config(Config, pid=pid, tid=tid, user_stacks_only=user_stacks_only,
                          kernel_stacks_only=kernel_stacks_only, state=state, min_block_time=min_block_time,
                          max_block_time=max_block_time, stack_storage_size=stack_storage_size)
    out = Output.from_context()
    if folded:
        out.refuse_format_with("-f/--folded")
    for_how_long = f"for {duration} s" if duration else "until Ctrl-C"
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        started = lambda: out.banner(f"Tracing off-CPU time {for_how_long}... Hit Ctrl-C to end.")  # noqa: E731
        for _ in intervals(1.0, duration, started):  # meanwhile, read the maps of new processes
            session.remember_processes()
        entries = session.sample()
    missed = sum(1 for e in entries if MISSED_KERNEL in e.kernel_stack or MISSED_USER in e.user_stack)
    if missed:  # a full map, or a hash bucket already holding another stack (-EEXIST)
        out.warn("%d of %d accounts lost a stack: a larger --stack-storage-size (now %d) makes that rarer",
                 missed, len(entries), stack_storage_size)
    if folded:
        from .folded import folded_lines

        out.text_lines(folded_lines(entries), "folded")
    else:
        rows = [dict(e.to_dict(), stack=_stack_text(e)) for e in entries]
        out.table(ResultTable(COLUMNS, rows, data_keys=DATA_KEYS))


def _stack_text(entry) -> str:
    """The frames one a line, as libbpf-tools prints them: kernel, "--", then user."""
    middle = ["--"] if entry.kernel_stack and entry.user_stack else []
    return "\n".join([*entry.kernel_stack, *middle, *entry.user_stack])
