"""Bounded series: what keeps the exporter's label sets from growing without end.

Each metric keeps at most ``limit`` series (label sets). A new one beyond that evicts the one
updated longest ago, and the metric's ``dropped`` count (exported as
``ebpfkit_exporter_series_dropped_total{metric=...}``) says how many went that way. Series of
cgroups that no longer exist are dropped at each scrape (``drop_exited_cgroups``), so
short-lived containers do not pile up. No pid label unless the configuration asks for one.

Labels of a cgroup come from its path (sysinfo.containers' ``cgroup_labels``, which
runqlat's ``--by container`` groups by too): the path itself, the container's short id and
the Kubernetes pod UID.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_SERIES_LIMIT = 2000


@dataclass
class Metric:
    """One metric's series: labels (a tuple of values, in ``labelnames`` order) -> value
    (a number for counters and gauges, a ``HistogramValue`` for histograms), least recently
    updated first."""

    name: str
    kind: str  # "counter", "gauge", "histogram"
    help: str
    labelnames: tuple[str, ...]
    limit: int = DEFAULT_SERIES_LIMIT
    series: OrderedDict = field(default_factory=OrderedDict)
    dropped: int = 0  # series evicted to stay within the limit
    shown: set | None = None  # the series the exposition shows (None: every one), e.g. a top N

    def get(self, labels: tuple, factory: Callable[[], object]):
        """The value of ``labels`` (created with ``factory()`` if new), now the most recent."""
        if labels in self.series:
            self.series.move_to_end(labels)
            return self.series[labels]
        while len(self.series) >= self.limit:
            self.series.popitem(last=False)
            self.dropped += 1
        value = self.series[labels] = factory()
        return value

    def add(self, labels: tuple, amount: float) -> None:
        """A counter that BPF hands out as deltas (its map is drained): keep the running total."""
        self.series[labels] = self.get(labels, int) + amount

    def set(self, labels: tuple, value: float) -> None:
        """A value the kernel keeps itself (a pinned counter, a gauge)."""
        self.get(labels, int)
        self.series[labels] = value

    def drop(self, unwanted: Callable[[dict], bool]) -> None:
        """Forget the series whose labels (as a dict) ``unwanted`` says are gone; not counted
        as dropped: nothing will update them again."""
        for labels in [l for l in self.series if unwanted(dict(zip(self.labelnames, l)))]:
            del self.series[labels]

    def remove(self, labels) -> None:
        """Forget these series (label-value tuples; those already gone are skipped)."""
        for key in labels:
            self.series.pop(key, None)

    def visible(self):
        """(labels, value) of the series the exposition shows."""
        if self.shown is None:
            return self.series.items()
        return [(labels, value) for labels, value in self.series.items() if labels in self.shown]


@dataclass
class HistogramValue:
    """A cumulative log2 histogram: counts per slot (slot i: values below 2^(i+1) units; the
    last slot: everything above too), the sum of the values in seconds, and the unit in seconds."""

    counts: list[int]
    unit: float  # seconds per unit of the slots' values
    sum: float = 0.0

    def add(self, counts, total: float) -> None:
        for index, count in enumerate(counts):
            self.counts[min(index, len(self.counts) - 1)] += count
        self.sum += total

    def buckets(self) -> list[tuple[float, int]]:
        """(upper bound in seconds, cumulative count) per slot, the last one's bound +Inf."""
        result, seen = [], 0
        for index, count in enumerate(self.counts):
            seen += count
            last = index == len(self.counts) - 1
            result.append((float("inf") if last else 2 ** (index + 1) * self.unit, seen))
        return result


class MetricTable:
    """Every metric of the exporter by name, shared by the sources (two xdp filters fill one
    metric, told apart by their labels)."""

    def __init__(self, limit: int = DEFAULT_SERIES_LIMIT):
        self.limit = limit
        self.metrics: dict[str, Metric] = {}

    def metric(self, name: str, kind: str, help: str, labelnames=()) -> Metric:  # noqa: A002
        known = self.metrics.get(name)
        if known is None:
            known = self.metrics[name] = Metric(name, kind, help, tuple(labelnames), self.limit)
        elif (known.kind, known.labelnames) != (kind, tuple(labelnames)):
            raise ValueError(f"metric {name} defined twice, differently")
        return known


def drop_exited_cgroups(metric: Metric, root: str | None) -> None:
    """Forget ``metric``'s series of cgroups whose directory under ``root`` is gone."""
    if root:
        metric.drop(lambda labels: bool(labels["cgroup"])
                    and not os.path.isdir(os.path.join(root, labels["cgroup"].lstrip("/"))))
