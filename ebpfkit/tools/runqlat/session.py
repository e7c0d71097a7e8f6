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
from ..session import ToolSession, choose_typed_or_raw, load_attached
from ..task_times import SLOTS, TaskTimesConfig, drain_histograms  # noqa: F401 - SLOTS: the exporter's

PROGRAM = os.path.join(os.path.dirname(__file__), "runqlat.bpf.c")
TYPED_HOOK = "tp_btf sched_wakeup/sched_switch"
RAW_HOOK = "raw tracepoints sched_wakeup/sched_switch"


@dataclass(frozen=True)
class Config(TaskTimesConfig):
    """milliseconds, per_process, pid: the settings of every task-times tool."""


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        spec = compile_bpf(PROGRAM)
        self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK)
        spec.rodata.update(config.rodata())
        self._obj = load_attached(spec)
        self._hists = self._obj.maps["hists"]

    def sample(self) -> list[Log2Histogram]:
        """The waits since the last sample (the map is drained), one histogram per process
        (sorted by PID) with ``per_process``, else one; never an empty list."""
        return drain_histograms(self._hists, self.config, "pid" if self.config.per_process else None)

    def program_ids(self) -> dict[str, int]:
        """{name: id} of its BPF programs (what the exporter reports run time of)."""
        return self._obj.program_ids()

    def close(self) -> None:
        self._obj.close()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
