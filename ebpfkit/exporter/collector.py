"""The prometheus_client collector: at each scrape it has every source read its session, then
hands prometheus_client the metric families (which write the text or OpenMetrics format).

A source that cannot run (a kernel feature missing, a pinned program not attached) is
``ebpfkit_exporter_source_up 0`` with a log line when that changes; the others go on. Self
metrics: each source's up and scrape duration, series dropped per metric, and each BPF
program's run time and runs as the kernel counts them (while run-time statistics are on).
"""

from __future__ import annotations

import threading
import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ..errors import EbpfkitError
from ..output import get_logger
from .labels import MetricTable

log = get_logger("ebpfkit.exporter")


class SourceState:
    """A source and what the last scrape found: up or not, and why not."""

    def __init__(self, source):
        self.source = source
        self.up = False
        self.tried = False
        self.problem: str | None = None
        self.seconds = 0.0

    def scrape(self) -> None:
        started = time.perf_counter()
        try:
            if self.source.session is None and not self.source.retry and self.tried:
                return  # it could not start, and nothing will change that
            self.tried = True
            if self.source.session is None:
                self.source.start()
            self.source.collect()
            self._report(None)
        except (EbpfkitError, OSError) as exc:
            self._down(str(exc))
        except Exception as exc:  # noqa: BLE001 - a source's bug must not take the exporter down
            log.debug("source %s failed", self.source.name, exc_info=True)
            self._down(f"{type(exc).__name__}: {exc}")
        finally:
            self.seconds = time.perf_counter() - started

    def start(self) -> None:
        """Open the source at startup, so a failure is logged at once (and not at the first scrape)."""
        if self.tried:
            return  # a scrape came first and opened it
        try:
            self.tried = True
            self.source.start()
            self._report(None)
        except (EbpfkitError, OSError) as exc:
            self._down(str(exc))

    def _down(self, problem: str) -> None:
        self.source.close()
        self.source.forget()
        self._report(problem)

    def _report(self, problem: str | None) -> None:
        up = problem is None
        if up and not self.up and self.problem is not None:
            log.warning("source %s is up again", self.source.name)
        elif not up and (self.up or problem != self.problem):
            log.warning("source %s is down: %s", self.source.name, problem)
        self.up, self.problem = up, problem


class ExporterCollector:
    """Reads every source at scrape time (one scrape at a time: sessions are not thread-safe)."""

    def __init__(self, sources, table: MetricTable, bpf_stats: bool = False):
        self.states = [SourceState(s) for s in sources]
        self.table = table
        self.bpf_stats = bpf_stats  # run-time statistics are on (BPF_ENABLE_STATS)
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            for state in self.states:
                state.start()

    def close(self) -> None:
        with self.lock:
            for state in self.states:
                state.source.close()

    def describe(self):
        return []  # families are known only at scrape time; nothing to check at registration

    def collect(self):
        """The families, one at a time: prometheus_client writes each before the next is
        made, so a scrape of 10k series holds one metric's samples at once, not all."""
        with self.lock:
            started = time.perf_counter()
            for state in self.states:
                state.scrape()
            took = time.perf_counter() - started
            for metric in self.table.metrics.values():
                yield _family(metric)
            yield from self._self_metrics()
            yield from self._program_metrics()
            yield GaugeMetricFamily("ebpfkit_exporter_scrape_duration_seconds",
                                    "Time the exporter took to read every source.", value=took)

    def _self_metrics(self) -> list:
        up = GaugeMetricFamily("ebpfkit_exporter_source_up", "1 if the source could be read at this scrape.",
                               labels=["source"])
        seconds = GaugeMetricFamily("ebpfkit_exporter_source_scrape_duration_seconds",
                                    "Time a source took to be read at this scrape.", labels=["source"])
        for state in self.states:
            up.add_metric([state.source.name], 1 if state.up else 0)
            seconds.add_metric([state.source.name], state.seconds)
        dropped = CounterMetricFamily("ebpfkit_exporter_series_dropped_total",
                                      "Series evicted to keep a metric within series_limit.", labels=["metric"])
        for metric in self.table.metrics.values():
            dropped.add_metric([metric.name], metric.dropped)
        stats = GaugeMetricFamily("ebpfkit_exporter_bpf_stats_enabled",
                                  "1 if the kernel counts BPF programs' run time (BPF_ENABLE_STATS).",
                                  value=1 if self.bpf_stats else 0)
        return [up, seconds, dropped, stats]

    def _program_metrics(self) -> list:
        from ..engine import inventory

        run_time = CounterMetricFamily("ebpfkit_bpf_program_run_seconds_total",
                                       "Time the kernel spent running the source's BPF program.",
                                       labels=["source", "program", "id"])
        runs = CounterMetricFamily("ebpfkit_bpf_program_runs_total", "Runs of the source's BPF program.",
                                   labels=["source", "program", "id"])
        for state in self.states:
            if not state.up:
                continue
            try:
                programs = {name: inventory.program(i) for name, i in state.source.program_ids().items()}
            except (EbpfkitError, OSError) as exc:
                log.debug("programs of %s: %s", state.source.name, exc)
                continue
            for name, prog in programs.items():
                if prog is not None:
                    labels = [state.source.name, name, str(prog.id)]
                    run_time.add_metric(labels, prog.run_time_ns / 1e9)
                    runs.add_metric(labels, prog.run_cnt)
        return [run_time, runs]


def _family(metric):
    """A metric's series as a prometheus_client family (its label values are already in
    ``labelnames`` order)."""
    names = list(metric.labelnames)
    if metric.kind == "histogram":
        family = HistogramMetricFamily(metric.name, metric.help, labels=names)
        for labels, value in metric.visible():
            buckets = [(floatToGoString(le), count) for le, count in value.buckets()]
            family.add_metric(list(labels), buckets, sum_value=value.sum)
        return family
    family_class = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
    family = family_class(metric.name, metric.help, labels=names)
    for labels, value in metric.visible():
        family.add_metric(list(labels), value)
    return family
