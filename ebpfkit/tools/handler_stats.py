"""What the tools that count and time a kernel handler per key share (hardirqs: per IRQ,
softirqs: per vector): their settings, a session over a program built on
``ek_handler_stats.h`` (its ``stats`` map drained at each sample) and the view the CLI shows.
Each tool names its key (its stat rows) and its program; it knows no other tool.

Either engine: ebpfkit's (the default: the CO-RE program, against BTF) or BCC's
(``engine="bcc"``: the tool's program in BCC's dialect, on ``handler_stats.bcc.h``, which
BCC compiles against this kernel's headers, for kernels that have those but no BTF). The
session reads the ``stats`` map through the engine-neutral Table either way."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..histogram import Log2Histogram
from .common import live_intervals
from .config import ToolConfig, check_choice, check_exclusive
from .session import ToolSession, choose_typed_tracepoints, load_attached


ENGINES = ("ebpfkit", "bcc")
BCC_HEADER = os.path.join(os.path.dirname(__file__), "handler_stats.bcc.h")


@dataclass(frozen=True)
class HandlerStatsConfig(ToolConfig):
    dist: bool = False         # a log2 histogram of the handler's time per key
    per_cpu: bool = False      # one row (or histogram) per key and CPU
    counts_only: bool = False  # count handler runs, no timing (cheapest)
    nanoseconds: bool = False  # times in ns (default µs)
    engine: str = "ebpfkit"    # or "bcc": BCC itself runs the program (kernel headers, no BTF)

    def validate(self) -> None:
        check_choice("engine", self.engine, ENGINES)
        check_exclusive("counts_only", self.counts_only, dist=self.dist, nanoseconds=self.nanoseconds)

    @property
    def unit(self) -> str:
        return "nsecs" if self.nanoseconds else "usecs"


@dataclass(frozen=True)
class HandlerStat:
    """One key's row (a tool's subclass adds its number: ``irq``, ``vector``)."""

    name: str
    cpu: int | None  # None unless per CPU
    count: int
    total_ns: int  # 0 when counting only
    histogram: Log2Histogram | None  # with dist


class HandlerStatsSession(ToolSession):
    """Loads ``PROGRAM`` (its tp_btf programs where the kernel has BTF, else its raw_tp ones:
    ``hook`` says which, as ``HOOKS`` names them), or with ``engine="bcc"`` ``BCC_PROGRAM``
    through BCC (``BCC_HOOK``), and attaches it until ``close()``. A tool defines
    ``_stat(key, value)``: one row of its own from a ``stats`` map entry."""

    PROGRAM: str
    HOOKS: tuple[str, str]  # (typed, raw)
    BCC_PROGRAM: str
    BCC_HOOK: str

    def __init__(self, config: HandlerStatsConfig):
        self.config = config
        if config.engine == "bcc":
            self._obj = self._load_bcc(config)
            self.hook = self.BCC_HOOK
            self._stats = self._obj.table("stats")
            return
        from ..engine import compile as compile_bpf

        spec = compile_bpf(self.PROGRAM)
        self.hook = self.HOOKS[0] if choose_typed_tracepoints(spec) else self.HOOKS[1]
        spec.rodata.update({"targ_count": config.counts_only, "targ_dist": config.dist,
                            "targ_ns": config.nanoseconds, "targ_per_cpu": config.per_cpu})
        self._obj = load_attached(spec)
        self._stats = self._obj.maps["stats"]

    @classmethod
    def _load_bcc(cls, config: HandlerStatsConfig, engine: str = "bcc"):
        """``BCC_PROGRAM`` loaded and attached by ``engine`` (the tests also run it through
        ebpfkit's BCC translation, to check the program where BCC cannot run)."""
        from ..bcc.neutral import Program

        settings = {"EK_COUNT": config.counts_only, "EK_DIST": config.dist, "EK_NS": config.nanoseconds,
                    "EK_PER_CPU": config.per_cpu}
        cflags = [f"-D{name}={int(value)}" for name, value in settings.items()]
        with open(BCC_HEADER) as header, open(cls.BCC_PROGRAM) as program:  # one file: both rewrite only the main one
            text = header.read() + program.read()
        return Program(text=text, cflags=cflags, engine=engine)

    def sample(self) -> list:
        """What ran since the last sample (the map is drained), most time (or most runs)
        first."""
        stats = [self._stat(key, value) for key, value in self._stats.pop_all()]
        return sorted(stats, key=lambda s: (-s.total_ns, -s.count, s.name, s.cpu or 0))

    def _stat(self, key, value) -> HandlerStat:
        raise NotImplementedError

    def _fields(self, key, value, name: str, label: str) -> dict:
        """The HandlerStat fields of a ``stats`` entry whose key is called ``name``; its
        histogram (with ``dist``) is labelled ``label`` and the CPU."""
        cpu = key.cpu if self.config.per_cpu else None
        histogram = None
        if self.config.dist:
            label += f" cpu = {cpu}" if cpu is not None else ""
            histogram = Log2Histogram.from_counts(list(value.slots), unit=self.config.unit, label=label)
        return {"name": name, "cpu": cpu, "count": value.count, "total_ns": value.total_ns,
                "histogram": histogram}

    def close(self) -> None:
        self._obj.close()


def handler_stats_options(per: str):
    """The command's options, named after HandlerStatsConfig's fields (so a ConfigError
    names the option): -d, -C, -c/--count, -N, --engine, for handlers counted per ``per`` ("IRQ")."""
    import click

    options = [
        click.option("-d", "--dist", is_flag=True, help=f"A log2 histogram of the handler's time per {per}."),
        click.option("-C", "--per-cpu", is_flag=True, help=f"One row (or histogram) per {per} and CPU."),
        click.option("-c", "--count", "counts_only", is_flag=True, help="Count handler runs only (no timing)."),
        click.option("-N", "--nanoseconds", is_flag=True, help="Times in nanoseconds (default µs)."),
        click.option("--engine", type=click.Choice(ENGINES), default="ebpfkit", show_default=True,
                     help="bcc: BCC itself compiles the program against this kernel's headers "
                     "(for a kernel without BTF)."),
    ]

    def decorate(func):
        for option in reversed(options):  # so --help lists them in the order above
            func = option(func)
        return func
    return decorate


def run_command(out, open_session, config: HandlerStatsConfig, interval, count, banner: str,
                name: str, number: str) -> None:
    """The command: open the session, say which hook, then show_stats every interval."""
    with open_session(config) as session:
        out.info("hook: %s", session.hook)
        for _ in live_intervals(out, interval, count, banner):
            show_stats(out, session.sample(), config, name, number)


def show_stats(out, stats: list, config: HandlerStatsConfig, name: str, number: str) -> None:
    """One interval: the histograms with ``dist``, else a table of one row per key (and
    CPU): its ``name`` and ``number`` (the columns' headers, upper-cased, and the rows'
    keys), runs and total time. JSON and CSV carry the time in ns whatever the unit shown."""
    from ..output import Column, ResultTable

    if config.dist:
        out.histograms([s.histogram for s in stats])
        return
    keys = ["name", number] + (["cpu"] if config.per_cpu else []) + ["count"]
    columns = [Column(name.upper(), key="name")] + [Column(k.upper(), key=k) for k in keys[1:]]
    if not config.counts_only:
        divisor = 1 if config.nanoseconds else 1000
        columns.append(Column(f"TOTAL_{config.unit}", key="total_ns", format=lambda ns: str(ns // divisor)))
        keys.append("total_ns")
    out.table(ResultTable(columns, [vars(s) for s in stats], data_keys=keys))
