"""runqlat's session: load runqlat.bpf.c, attach it, and hand out the run-queue latency
histograms gathered since the last sample. No click, no printing, no formats: the CLI,
the exporter and a notebook all read it the same way::

    from ebpfkit.tools import runqlat
    with runqlat.open(per_process=True) as session:
        time.sleep(1)
        for hist in session.sample():      # Log2Histogram, one per process
            print(hist.label, hist.total)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...histogram import Log2Histogram
from ..config import ToolConfig, check_pid
from ..session import ToolSession, choose_typed_or_raw, load_attached

PROGRAM = os.path.join(os.path.dirname(__file__), "runqlat.bpf.c")
TYPED_HOOK = "tp_btf sched_wakeup/sched_switch"
RAW_HOOK = "raw tracepoints sched_wakeup/sched_switch"
SLOTS = 27  # RUNQLAT_SLOTS of runqlat.h: a histogram's slots, the last one holding every longer wait


@dataclass(frozen=True)
class Config(ToolConfig):
    milliseconds: bool = False  # histogram buckets in ms (default µs)
    per_process: bool = False   # one histogram per process
    pid: int | None = None      # only this process (thread group)

    def validate(self) -> None:
        check_pid("pid", self.pid)

    @property
    def unit(self) -> str:
        return "msecs" if self.milliseconds else "usecs"

    @property
    def unit_ns(self) -> int:
        """Nanoseconds in one ``unit``: a bucket's values are whole units (ns // unit_ns)."""
        return 1_000_000 if self.milliseconds else 1000


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        spec = compile_bpf(PROGRAM)
        self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK)
        spec.rodata.update({"targ_ms": config.milliseconds, "targ_per_process": config.per_process,
                            "targ_tgid": config.pid or 0})
        self._obj = load_attached(spec)
        self._hists = self._obj.maps["hists"]

    def sample(self) -> list[Log2Histogram]:
        """The waits since the last sample (the map is drained), one histogram per process
        (sorted by PID) with ``per_process``, else one; never an empty list."""
        result = []
        for key, value in sorted(self._hists.pop_all(), key=lambda kv: kv[0]):
            label = f"pid = {key} {value.comm}" if self.config.per_process else None
            result.append(Log2Histogram.from_counts(list(value.slots), unit=self.config.unit, label=label,
                                                    sum=value.sum_ns / self.config.unit_ns))
        return result or [Log2Histogram.from_counts([], unit=self.config.unit)]

    def program_ids(self) -> dict[str, int]:
        """{name: id} of its BPF programs (what the exporter reports run time of)."""
        return self._obj.program_ids()

    def close(self) -> None:
        self._obj.close()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
