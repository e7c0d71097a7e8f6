"""softirqs' session: load softirqs.bpf.c, attach it to the softirq_entry/exit tracepoints,
and hand out, per softirq vector (and per CPU if asked), how often its handler ran and for
how long since the last sample. No click, no printing, no formats: the CLI, the exporter and
a notebook all read it the same way::

    from ebpfkit.tools import softirqs
    with softirqs.open(per_cpu=True) as session:
        time.sleep(1)
        for stat in session.sample():     # SoftirqStat, most time first
            print(stat.name, stat.vector, stat.cpu, stat.count, stat.total_ns)

``sample()`` returns ``SoftirqStat`` rows: ``name`` (the vector's name as /proc/softirqs
shows it: HI, TIMER, NET_TX, NET_RX, BLOCK, IRQ_POLL, TASKLET, SCHED, HRTIMER, RCU, read from
the kernel's own enum in its BTF), ``vector`` (its number), ``cpu`` (None unless
``per_cpu``), ``count``, ``total_ns`` (0 with ``counts_only``, which reads no clock) and
``histogram`` (a Log2Histogram of the handler's time labelled "softirq = NAME" with ``dist``,
else None).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..handler_stats import HandlerStat, HandlerStatsConfig, HandlerStatsSession

TYPED_HOOK = "tp_btf softirq_entry/softirq_exit"
BCC_HOOK = "tracepoints irq:softirq_entry/softirq_exit, through BCC"
RAW_HOOK = "raw tracepoints softirq_entry/softirq_exit"


@dataclass(frozen=True)
class Config(HandlerStatsConfig):
    """dist, per_cpu, counts_only, nanoseconds: per softirq vector."""


@dataclass(frozen=True)
class SoftirqStat(HandlerStat):
    vector: int


def vector_names() -> dict[int, str]:
    """{vector: name} from the kernel's ``enum { HI_SOFTIRQ, ..., NR_SOFTIRQS }`` (anonymous:
    found by its last enumerator), named as /proc/softirqs names them; from /proc/softirqs'
    rows, which come in the same order, on a kernel without BTF (engine="bcc")."""
    from ...engine import kernel_enum
    from ...errors import EbpfkitError
    from ...sysinfo.events import softirq_names

    try:
        enum = kernel_enum("NR_SOFTIRQS")
    except EbpfkitError:
        return softirq_names()
    return {value: name.removesuffix("_SOFTIRQ") for name, value in enum.items() if name != "NR_SOFTIRQS"}


class Session(HandlerStatsSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    PROGRAM = os.path.join(os.path.dirname(__file__), "softirqs.bpf.c")
    HOOKS = (TYPED_HOOK, RAW_HOOK)
    BCC_PROGRAM = os.path.join(os.path.dirname(__file__), "softirqs.bcc.c")
    BCC_HOOK = BCC_HOOK

    def __init__(self, config: Config):
        self.names = vector_names()
        super().__init__(config)

    def _stat(self, key, value) -> SoftirqStat:
        name = self.names.get(key.vec, f"VEC{key.vec}")  # a vector this kernel's BTF does not name
        return SoftirqStat(vector=key.vec, **self._fields(key, value, name, f"softirq = {name}"))


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
