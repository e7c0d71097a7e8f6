"""hardirqs' session: load hardirqs.bpf.c, attach it to the irq_handler_entry/exit
tracepoints, and hand out, per IRQ handler (and per CPU if asked), how often it ran and for
how long since the last sample. No click, no printing, no formats: the CLI, the exporter and
a notebook all read it the same way::

    from ebpfkit.tools import hardirqs
    with hardirqs.open(dist=True) as session:
        time.sleep(1)
        for stat in session.sample():     # IrqStat, most time first
            print(stat.name, stat.irq, stat.count, stat.total_ns, stat.histogram.total)

``sample()`` returns ``IrqStat`` rows: ``name`` (the handler's name, as /proc/interrupts
shows it, e.g. "virtio0-input.0"), ``irq``, ``cpu`` (None unless ``per_cpu``), ``count``,
``total_ns`` (0 with ``counts_only``, which reads no clock) and ``histogram`` (a labelled
Log2Histogram of the handler's time with ``dist``, else None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...histogram import Log2Histogram
from ..config import ToolConfig, check_exclusive
from ..session import ToolSession, choose_typed_tracepoints

PROGRAM = os.path.join(os.path.dirname(__file__), "hardirqs.bpf.c")
TYPED_HOOK = "tp_btf irq_handler_entry/irq_handler_exit"
RAW_HOOK = "raw tracepoints irq_handler_entry/irq_handler_exit"


@dataclass(frozen=True)
class Config(ToolConfig):
    dist: bool = False         # a log2 histogram of the handler's time per IRQ
    per_cpu: bool = False      # one row (or histogram) per IRQ and CPU
    counts_only: bool = False  # count handler runs, no timing (cheapest)
    nanoseconds: bool = False  # times in ns (default µs)

    def validate(self) -> None:
        check_exclusive("counts_only", self.counts_only, dist=self.dist, nanoseconds=self.nanoseconds)

    @property
    def unit(self) -> str:
        return "nsecs" if self.nanoseconds else "usecs"


@dataclass(frozen=True)
class IrqStat:
    name: str
    irq: int
    cpu: int | None
    count: int
    total_ns: int
    histogram: Log2Histogram | None = None


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        spec = compile_bpf(PROGRAM)
        self.hook = TYPED_HOOK if choose_typed_tracepoints(spec) else RAW_HOOK
        spec.rodata.update({"targ_count": config.counts_only, "targ_dist": config.dist,
                            "targ_ns": config.nanoseconds, "targ_per_cpu": config.per_cpu})
        self._obj = spec.load()
        try:
            self._obj.attach()
        except BaseException:
            self._obj.close()
            raise
        self._stats = self._obj.maps["stats"]

    def sample(self) -> list[IrqStat]:
        """What ran since the last sample (the map is drained), most time (or most runs)
        first."""
        stats = [self._stat(key, value) for key, value in self._stats.pop_all()]
        return sorted(stats, key=lambda s: (-s.total_ns, -s.count, s.irq, s.cpu or 0))

    def _stat(self, key, value) -> IrqStat:
        cpu = key.cpu if self.config.per_cpu else None
        histogram = None
        if self.config.dist:
            label = f"hardirq = {key.name} (irq {key.irq})" + (f" cpu = {cpu}" if cpu is not None else "")
            histogram = Log2Histogram.from_counts(list(value.slots), unit=self.config.unit, label=label)
        return IrqStat(key.name, key.irq, cpu, value.count, value.total_ns, histogram)

    def close(self) -> None:
        self._obj.close()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
