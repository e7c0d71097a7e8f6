"""What the tools that keep log2 histograms of a time per task share (runqlat: run-queue
waits; cpudist: time on or off CPU): their common settings and the histograms of a program
built on ``ek_task_times.h`` (its ``hists`` map, drained at each sample). Each tool names its
own program and hooks; it knows no other tool."""

from __future__ import annotations

from dataclasses import dataclass

from ..histogram import Log2Histogram
from .config import ToolConfig, check_pid

SLOTS = 27  # EK_TASK_TIMES_SLOTS of ek_task_times.h: the last slot holds every longer time


@dataclass(frozen=True)
class TaskTimesConfig(ToolConfig):
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

    def rodata(self) -> dict:
        """The program's settings (its const volatile globals) these fields set."""
        return {"targ_ms": self.milliseconds, "targ_per_process": self.per_process, "targ_tgid": self.pid or 0}


def drain_histograms(hists, config: TaskTimesConfig, keyed_by: str | None) -> list[Log2Histogram]:
    """The times counted in the ``hists`` map since the last call (it is drained): one
    histogram per key, sorted, labelled "``keyed_by`` = KEY COMM" ("pid = 185 nginx"), or
    the one histogram of key 0 when ``keyed_by`` is None; never an empty list."""
    result = []
    for key, value in sorted(hists.pop_all(), key=lambda kv: kv[0]):
        label = f"{keyed_by} = {key} {value.comm}" if keyed_by else None
        result.append(Log2Histogram.from_counts(list(value.slots), unit=config.unit, label=label,
                                                sum=value.sum_ns / config.unit_ns))
    return result or [Log2Histogram.from_counts([], unit=config.unit)]
