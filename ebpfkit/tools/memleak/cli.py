"""`ebpfkit memleak`: options -> Config, then every interval the session's sample -> the
output layer: a table of the top stacks (bytes, count, oldest, growing, frames) and the
counters of what could not be recorded (one JSON object an interval with --format json).
Without -p/-c it traces the kernel's allocations; --triage SECONDS only compares the
kernel's memory accounts over SECONDS (triage.py) and says where to look first."""

from __future__ import annotations

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, interval_arguments, live_intervals, pid_option
from .session import ALLOCATORS, COUNTERS, KINDS

EXAMPLES = """\b
Examples:
  ebpfkit memleak -p 185              outstanding allocations of PID 185 by stack, every 5 s
  ebpfkit memleak -c "./app --flag"   start ./app and trace it from its first allocation
  ebpfkit memleak -c "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ./app"
                                      ./app on jemalloc (detected: its functions are probed)
  ebpfkit memleak -p 185 -o 10000 10  only allocations older than 10 s, every 10 s
  ebpfkit memleak -p 185 --combined-only -T 5 1 30
                                      per-stack totals kept in the kernel (cheaper), top 5
  ebpfkit memleak -p 185 -z 4096 -s 10   allocations of 4 KiB or more, one in ten
  ebpfkit memleak -p 185 --allocator jemalloc   (detected from the maps when not given)
  ebpfkit memleak -p 185 -O /opt/lib/libmymalloc.so
  ebpfkit memleak --format json -p 185 5 3
  ebpfkit memleak --triage 10         what grew in 10 s (meminfo, slab, vmalloc): where to look
  ebpfkit memleak -o 5000 10          kernel allocations (slab, page, percpu) older than 5 s
  ebpfkit -v memleak --kinds slab     kmalloc and kmem_cache only; -v names the tracepoints
"""

DEFAULT_INTERVAL = 5.0
STACK_COLUMNS = (Column("BYTES", key="bytes"), Column("COUNT", key="count"),
                 Column("OLDEST(ms)", key="oldest_ms"), Column("GROWING", key="growing_flag"),
                 Column("STACK (innermost first)", key="stack", align="left"))
ALLOC_COLUMNS = (Column("ADDRESS", key="address", format="#x"), Column("SIZE", key="size"),
                 Column("AGE(ms)", key="age_ms"), Column("STACK ID", key="stack_id"))
COUNTER_LABELS = {
    "allocs": "allocations recorded", "frees": "frees of recorded allocations",
    "stack_missed": "stacks not recorded (stack map full: raise --stack-storage-size)",
    "allocs_full": "allocations not recorded (allocations map full: raise --max-allocations)",
    "unknown_frees": ("frees of unrecorded addresses (allocated before tracing, or not sampled; "
                      "glibc's thread exit frees the thread's tcache)"),
    "threads_full": "allocator calls not followed (thread map full)"}
WARNED = ("stack_missed", "allocs_full", "threads_full")


@click.command(epilog=EXAMPLES)
@pid_option
@click.option("-c", "--command", metavar="CMD", help='Start "CMD ARGS" and trace it (held until traced).')
@click.option("-o", "--older", "min_age_ms", type=int, default=0, metavar="AGE_MS",
              help="Only allocations at least AGE_MS old.")
@click.option("-T", "--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
              help="Show the N stacks with the most outstanding bytes.")
@click.option("-a", "--show-allocs", is_flag=True, help="Each outstanding allocation too (address, size, age).")
@click.option("--combined-only", is_flag=True,
              help="Per-stack totals kept in the kernel (atomic, cheaper to read); no ages.")
@click.option("-z", "--min-size", type=int, metavar="BYTES", help="Only allocations of at least BYTES.")
@click.option("-Z", "--max-size", type=int, metavar="BYTES", help="Only allocations of at most BYTES.")
@click.option("-s", "--sample-rate", "sample_every", type=int, default=1, metavar="N",
              help="Record one allocation in N (less overhead).")
@click.option("--allocator", type=click.Choice(ALLOCATORS),
              help="The allocator's preset (default: detected from the process's libraries).")
@click.option("-O", "--obj", "library", metavar="LIB", help="Probe the allocator functions of this library.")
@click.option("-K", "--growth-intervals", type=int, default=3, show_default=True, metavar="K",
              help="Flag a stack growing when its bytes grew at each of the last K intervals.")
@click.option("--stack-storage-size", type=int, default=16384, show_default=True, metavar="N",
              help="How many distinct stacks the kernel can keep (a quarter more for stacks "
                   "whose slot another stack took).")
@click.option("--max-allocations", type=int, default=262144, show_default=True, metavar="N",
              help="How many outstanding allocations the kernel can keep.")
@click.option("--kinds", default=",".join(KINDS), show_default=True, metavar="KIND[,KIND]",
              help="Kernel mode: the allocators followed (slab: kmalloc and kmem_cache; page; percpu).")
@click.option("--triage", type=click.FloatRange(min=0.1), metavar="SECONDS",
              help="Only compare /proc/meminfo, slabinfo and vmallocinfo over SECONDS: where to look first.")
@tool_options(short_timestamp=False)
@interval_arguments
def memleak(pid, command, min_age_ms, top, show_allocs, combined_only, min_size, max_size, sample_every,
            allocator, library, growth_intervals, stack_storage_size, max_allocations, kinds, triage,
            interval, count):
    """Outstanding memory allocations of a process (-p PID, or -c CMD to start one), by
    stack, every INTERVAL seconds (default 5): uprobes on malloc, calloc, realloc, free,
    posix_memalign, aligned_alloc, memalign, valloc, pvalloc, mmap/munmap and C++'s operator
    new/delete. User stacks unwind through frame pointers (-fno-omit-frame-pointer).
    Without -p/-c, the kernel's: kmalloc/kfree, kmem_cache_alloc/free, page and percpu
    allocations (kmem and percpu tracepoints), by kernel stack."""
    from ..common import usage_errors
    from .session import Config, open as open_session

    out = Output.from_context()
    if triage is not None:
        _triage(out, triage, pid, command)
        return
    config = build_config(Config, pid=pid, command=command, min_age_ms=min_age_ms, show_allocs=show_allocs,
                          combined_only=combined_only, min_size=min_size, max_size=max_size,
                          sample_every=sample_every, allocator=allocator, library=library,
                          growth_intervals=growth_intervals, stack_storage_size=stack_storage_size,
                          max_allocations=max_allocations, kinds=tuple(k.strip() for k in kinds.split(",")))
    with usage_errors():  # a preset or library the process does not have
        session = open_session(config)
    with session:
        if config.kernel:
            out.info("kernel tracepoints: %s", ", ".join(session.hooks))
            banner = f"Tracing outstanding kernel allocations ({', '.join(config.kinds)})..."
        else:
            out.info("allocator: %s (%s), %d probes", session.plan.allocator, session.plan.library,
                     len(session.plan.probes))
            banner = f"Tracing outstanding allocations of PID {session.pid}..."
        for _ in live_intervals(out, interval or DEFAULT_INTERVAL, count, banner):
            sample = session.sample()
            _print(out, sample, top, show_allocs)
            if session.exited:
                out.info("PID %d exited", session.pid)
                break


def _print(out, sample, top: int, show_allocs: bool) -> None:
    stacks = sample.stacks[:top]
    rows = [dict(s.to_dict(), stack="\n".join(map(str, s.frames)),
                 growing_flag="yes" if s.growing else "") for s in stacks]
    data_keys = ("stack_id", "bytes", "count", "oldest_ms", "growing", "frames",
                 *(("allocations",) if show_allocs else ()))
    tables = [ResultTable(STACK_COLUMNS, rows, title="outstanding allocations by stack", data_keys=data_keys)]
    if show_allocs:
        allocs = [dict(a.__dict__, stack_id=s.stack_id) for s in stacks for a in s.allocations]
        tables.append(ResultTable(ALLOC_COLUMNS, allocs, title="outstanding allocations"))
    tables.append(ResultTable((Column("COUNTER", key="counter", align="left"), Column("VALUE", key="value")),
                              [{"counter": COUNTER_LABELS[n], "value": sample.counters[n]} for n in COUNTERS],
                              title="counters"))
    for name in WARNED:
        if sample.counters[name]:
            out.warn("%d %s", sample.counters[name], COUNTER_LABELS[name])
    out.document({"stacks": [r for r in (s.to_dict() for s in stacks)], "counters": sample.counters},
                 tables)


def _triage(out, seconds: float, pid, command) -> None:
    """--triage: the kernel's accounts compared over ``seconds``, and where to look first."""
    from . import triage

    if pid is not None or command is not None:
        raise click.BadParameter("runs alone: give it without -p/-c", param_hint="'--triage'")
    result = triage.measure(seconds, started=lambda: out.banner(f"Measuring memory for {seconds:g} s..."))
    for path in result.unreadable:
        out.warn("%s could not be read (root only): its part is left out", path)
    rows = [dict(a.__dict__) for a in result.areas]
    tables = [ResultTable((Column("AREA", key="area", align="left"), Column("BEFORE", key="before"),
                           Column("AFTER", key="after"), Column("DELTA", key="delta"),
                           Column("WHAT", key="label", align="left")), rows,
                          title=f"/proc/meminfo over {seconds:g} s (bytes)"),
              ResultTable((Column("SLAB CACHE", align="left"), Column("GREW (bytes)")), result.slab_caches,
                          title="slab caches that grew most"),
              ResultTable((Column("VMALLOC CALLER", align="left"), Column("GREW (bytes)")),
                          result.vmalloc_callers, title="vmalloc callers that grew most")]
    out.document(result.to_dict(), tables)
    out.banner(f"look first at: {result.look_first}" if result.look_first
               else f"nothing grew in {seconds:g} s: no leak in that time")
