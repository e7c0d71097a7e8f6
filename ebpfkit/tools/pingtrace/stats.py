"""Per-stage statistics over a run's probes: how many, p50, p99 and max, in path order."""

from __future__ import annotations

import math
from collections import deque

WINDOW = 10_000  # percentiles over each stage's last WINDOW probes (a run may last for days)
RTT = "round trip"


def percentile(sorted_values, q: float) -> float:
    """The ``q`` (0..1) percentile of ``sorted_values``, nearest rank."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


class StageStats:
    def __init__(self, window: int = WINDOW):
        self.window = window
        self.sent = 0
        self.lost = 0
        self._values: dict[str, deque] = {}
        self._max: dict[str, float] = {}
        self._order: dict[str, float] = {}  # a stage's mean position in its probes' paths

    def add(self, probe) -> None:
        self.sent += 1
        if probe.lost:
            self.lost += 1
            return
        self._add(RTT, probe.rtt_us, -1)
        for position, stage in enumerate(probe.stages):
            self._add(stage.name, stage.us, position)

    def _add(self, name: str, us: float, position: int) -> None:
        values = self._values.get(name)
        if values is None:
            values = self._values[name] = deque(maxlen=self.window)
            self._order[name] = position
        values.append(us)
        self._max[name] = max(self._max.get(name, us), us)

    def rows(self) -> list[dict]:
        """One row per stage (the round trip first, then the stages in path order)."""
        rows = []
        for name in sorted(self._values, key=lambda n: self._order[n]):
            values = sorted(self._values[name])
            rows.append({"stage": name, "count": len(values), "p50_us": percentile(values, 0.5),
                         "p99_us": percentile(values, 0.99), "max_us": self._max[name]})
        return rows
