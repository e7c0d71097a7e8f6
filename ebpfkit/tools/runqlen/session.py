"""runqlen's session: sample every CPU's run-queue length with a cpu-clock perf event (the
software event: no hardware PMU needed) and hand out linear histograms of the lengths seen
since the last sample. No click, no printing, no formats::

    from ebpfkit.tools import runqlen
    with runqlen.open(per_cpu=True) as session:
        time.sleep(1)
        for hist in session.sample():      # LinearHistogram, one per CPU ("cpu = 0", ...)
            print(hist.label, hist.total, runqlen.occupancy(hist))

A length is the number of tasks waiting in the CPU's run queue, the running one not counted
(as BCC's runqlen): 0 is an idle CPU or one running alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ConfigError
from ...histogram import LinearHistogram
from ..config import ToolConfig, check_positive
from ..session import ToolSession

PROGRAM = os.path.join(os.path.dirname(__file__), "runqlen.bpf.c")
HOOK = "perf_event cpu-clock sampling"
MAX_FREQUENCY = 10_000  # the kernel's perf_event_max_sample_rate is about this, or lower
UNIT = "runqlen"


@dataclass(frozen=True)
class Config(ToolConfig):
    per_cpu: bool = False  # one histogram per CPU
    frequency: int = 99    # samples a second on each CPU (99: out of step with timer ticks)

    def validate(self) -> None:
        check_positive("frequency", self.frequency)
        if self.frequency > MAX_FREQUENCY:
            raise ConfigError("frequency", f"at most {MAX_FREQUENCY} samples a second, got {self.frequency}")


class Session(ToolSession):
    """Sampling until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        self.hook = HOOK
        spec = compile_bpf(PROGRAM)
        spec.rodata.update({"targ_per_cpu": config.per_cpu})
        self._obj = spec.load()
        try:
            self._obj.programs["runqlen_sample"].attach_perf_event(frequency=config.frequency)
        except BaseException:
            self._obj.close()
            raise
        self._hists = self._obj.maps["hists"]

    def sample(self) -> list[LinearHistogram]:
        """The samples since the last call (the map is drained): one histogram per CPU
        (sorted, labelled "cpu = N") with ``per_cpu``, else one; never an empty list."""
        result = []
        for key, value in sorted(self._hists.pop_all(), key=lambda kv: kv[0]):
            label = f"cpu = {key}" if self.config.per_cpu else None
            result.append(LinearHistogram.from_counts(list(value.slots), unit=UNIT, label=label))
        return result or [LinearHistogram.from_counts([], unit=UNIT)]

    def close(self) -> None:
        self._obj.close()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start sampling with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))


def occupancy(histogram: LinearHistogram) -> float | None:
    """Run-queue occupancy: the percentage of samples that saw at least one task waiting
    (None for an empty histogram)."""
    total = histogram.total
    if not total:
        return None
    idle_or_alone = histogram.counts[0] if histogram.counts else 0
    return 100.0 * (total - idle_or_alone) / total
