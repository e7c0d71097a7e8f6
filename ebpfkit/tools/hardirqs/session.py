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
``total_ns`` (0 with ``counts_only``, which reads no clock) and ``histogram`` (a Log2Histogram
of the handler's time labelled "hardirq = NAME (irq N)" with ``dist``, else None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..handler_stats import HandlerStat, HandlerStatsConfig, HandlerStatsSession

TYPED_HOOK = "tp_btf irq_handler_entry/irq_handler_exit"
BCC_HOOK = "raw tracepoints irq_handler_entry/irq_handler_exit, through BCC"
RAW_HOOK = "raw tracepoints irq_handler_entry/irq_handler_exit"


@dataclass(frozen=True)
class Config(HandlerStatsConfig):
    """dist, per_cpu, counts_only, nanoseconds: per IRQ handler."""


@dataclass(frozen=True)
class IrqStat(HandlerStat):
    irq: int


class Session(HandlerStatsSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    PROGRAM = os.path.join(os.path.dirname(__file__), "hardirqs.bpf.c")
    HOOKS = (TYPED_HOOK, RAW_HOOK)
    BCC_PROGRAM = os.path.join(os.path.dirname(__file__), "hardirqs.bcc.c")
    BCC_HOOK = BCC_HOOK

    def _stat(self, key, value) -> IrqStat:
        label = f"hardirq = {value.name} (irq {key.irq})"
        return IrqStat(irq=key.irq, **self._fields(key, value.stat, value.name, label))


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
