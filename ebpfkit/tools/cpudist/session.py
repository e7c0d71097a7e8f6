"""cpudist's session: load cpudist.bpf.c, attach it to sched_switch, and hand out log2
histograms of how long tasks ran each time they got a CPU (from switch in to switch out),
or with ``offcpu`` how long they were off it (from switch out to the next switch in:
asleep, blocked, or waiting runnable), gathered since the last sample. No click, no
printing, no formats::

    from ebpfkit.tools import cpudist
    with cpudist.open(per_process=True, milliseconds=True) as session:
        time.sleep(1)
        for hist in session.sample():      # Log2Histogram, one per process ("pid = 185 nginx")
            print(hist.label, hist.total, hist.sum)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...histogram import Log2Histogram
from ..config import check_exclusive
from ..session import ToolSession, choose_typed_or_raw, load_attached
from ..task_times import TaskTimesConfig, drain_histograms

PROGRAM = os.path.join(os.path.dirname(__file__), "cpudist.bpf.c")
TYPED_HOOK = "tp_btf sched_switch"
RAW_HOOK = "raw tracepoint sched_switch"


@dataclass(frozen=True)
class Config(TaskTimesConfig):
    """milliseconds, per_process, pid (as runqlat's), and:"""

    offcpu: bool = False      # time off CPU (default: on CPU)
    per_thread: bool = False  # one histogram per thread

    def validate(self) -> None:
        super().validate()
        check_exclusive("per_thread", self.per_thread, per_process=self.per_process)

    @property
    def keyed_by(self) -> str | None:
        """What a histogram's label names: "pid", "tid", or None for the one histogram."""
        return "pid" if self.per_process else "tid" if self.per_thread else None


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        spec = compile_bpf(PROGRAM)
        self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK)
        spec.rodata.update({**config.rodata(), "targ_offcpu": config.offcpu,
                            "targ_per_thread": config.per_thread})
        self._obj = load_attached(spec)
        self._hists = self._obj.maps["hists"]

    def sample(self) -> list[Log2Histogram]:
        """The times since the last sample (the map is drained): one histogram per process or
        thread (sorted by its id) with ``per_process``/``per_thread``, else one; never empty."""
        return drain_histograms(self._hists, self.config, self.config.keyed_by)

    def close(self) -> None:
        self._obj.close()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
