"""Bounded series: the cap evicts the least recently updated series and counts it, series of
cgroups that are gone are dropped, and the log2
histograms come out as Prometheus histograms (checked by prometheus_client's own parser)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ebpfkit.exporter.collector import ExporterCollector
from ebpfkit.exporter.labels import HistogramValue, Metric, MetricTable, drop_exited_cgroups
from ebpfkit.exporter.sources import Source

ID = "3f2a9c0e1b7d4c5a8e6f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"


def test_the_cap_evicts_the_least_recently_updated_and_counts_it():
    metric = Metric("ebpfkit_x_total", "counter", "x", ("comm",), limit=3)
    for comm in "abc":
        metric.add((comm,), 1)
    metric.add(("a",), 5)  # a is now the most recent: b goes first
    metric.add(("d",), 1)
    assert dict(metric.series) == {("c",): 1, ("a",): 6, ("d",): 1}
    assert metric.dropped == 1
    metric.add(("e",), 2)
    metric.add(("f",), 2)
    assert list(metric.series) == [("d",), ("e",), ("f",)] and metric.dropped == 3
    metric.add(("b",), 1)  # an evicted series comes back from 0 (a counter reset to Prometheus)
    assert metric.series[("b",)] == 1 and metric.dropped == 4


def test_set_keeps_the_kernels_value_and_drop_forgets_without_counting():
    metric = Metric("ebpfkit_y_total", "counter", "y", ("iface", "rule"), limit=10)
    metric.set(("eth1", "r1"), 10)
    metric.set(("eth1", "r1"), 12)
    metric.set(("eth2", "r1"), 3)
    metric.drop(lambda labels: labels["iface"] == "eth1")
    assert dict(metric.series) == {("eth2", "r1"): 3} and metric.dropped == 0


def test_one_metric_per_name_shared_by_sources():
    table = MetricTable(limit=7)
    one = table.metric("ebpfkit_z_total", "counter", "z", ("iface",))
    assert table.metric("ebpfkit_z_total", "counter", "z", ("iface",)) is one and one.limit == 7
    with pytest.raises(ValueError, match="defined twice"):
        table.metric("ebpfkit_z_total", "gauge", "z", ("iface",))


def test_series_of_exited_cgroups_are_dropped(tmp_path):
    (tmp_path / "alive" / "child").mkdir(parents=True)
    metric = Metric("ebpfkit_file_reads_total", "counter", "r", ("comm", "cgroup", "container", "pod_uid"))
    for cgroup in ("/alive", "/alive/child", "/gone", ""):
        metric.add(("cat", cgroup, "", ""), 1)
    drop_exited_cgroups(metric, str(tmp_path))
    assert sorted(l[1] for l in metric.series) == ["", "/alive", "/alive/child"]


def test_log2_slots_become_le_buckets_in_seconds():
    value = HistogramValue([0] * 4, unit=1e-6)  # µs slots: [0,2) [2,4) [4,8) [8,inf)
    value.add([3, 0, 2], 0.000011)
    value.add([1, 1, 0, 1, 9], 0.5)  # beyond the last slot: counted in it (+Inf)
    assert value.buckets() == [(2e-06, 4), (4e-06, 5), (8e-06, 7), (float("inf"), 17)]
    assert value.sum == pytest.approx(0.500011)


class _Filled(Source):
    """A source whose collect() records one scrape more each time (the collector's contract)."""

    kind = "filled"

    def start(self):
        self.session = self
        self.hist = self.table.metric("ebpfkit_test_seconds", "histogram", "h")
        self.reads = self.table.metric("ebpfkit_test_reads_total", "counter", "r", ("comm",))

    def collect(self):
        self.hist.get((), lambda: HistogramValue([0] * 3, 1e-3)).add([1, 2, 3], 0.25)
        self.reads.add(("cat",), 4)

    def program_ids(self):
        return {}

    def close(self):
        pass


class _Broken(Source):
    kind = "broken"

    def start(self):
        from ebpfkit.errors import NotSupportedError

        raise NotSupportedError("fexit", "trampolines are locked here")


def _scrape(registry) -> dict:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_collector_accumulates_and_reports_sources_down():
    table = MetricTable(limit=10)
    collector = ExporterCollector([_Filled(None, table), _Broken(None, table)], table)
    collector.start()
    registry = CollectorRegistry()
    registry.register(collector)
    _scrape(registry)
    samples = _scrape(registry)  # two scrapes: totals of both
    assert samples[("ebpfkit_test_seconds_bucket", (("le", "0.002"),))] == 2
    assert samples[("ebpfkit_test_seconds_bucket", (("le", "0.004"),))] == 6
    assert samples[("ebpfkit_test_seconds_bucket", (("le", "+Inf"),))] == 12
    assert samples[("ebpfkit_test_seconds_count", ())] == 12
    assert samples[("ebpfkit_test_seconds_sum", ())] == 0.5
    assert samples[("ebpfkit_test_reads_total", (("comm", "cat"),))] == 8
    assert samples[("ebpfkit_exporter_source_up", (("source", "filled"),))] == 1
    assert samples[("ebpfkit_exporter_source_up", (("source", "broken"),))] == 0
    assert samples[("ebpfkit_exporter_series_dropped_total", (("metric", "ebpfkit_test_reads_total"),))] == 0
    assert ("ebpfkit_exporter_source_scrape_duration_seconds", (("source", "broken"),)) in samples


def test_publish_keeps_exactly_a_sources_series_and_forget_drops_them_only():
    """Two pinned filters share a metric: each source's publish() replaces only its own
    series (a rule gone is dropped), and forget() (the source went down) leaves the other's."""
    table = MetricTable(limit=10)
    metric = table.metric("ebpfkit_rule_packets_total", "counter", "p", ("iface", "rule"))
    eth1, eth2 = Source(None, table), Source(None, table)
    eth1.publish(metric, {("eth1", "r1"): 5, ("eth1", "r2"): 7})
    eth2.publish(metric, {("eth2", "r1"): 1})
    eth1.publish(metric, {("eth1", "r2"): 9, ("eth1", "r3"): 0})  # r1 deleted, r3 added
    assert dict(metric.series) == {("eth2", "r1"): 1, ("eth1", "r2"): 9, ("eth1", "r3"): 0}
    eth1.forget()
    assert dict(metric.series) == {("eth2", "r1"): 1} and metric.dropped == 0
    eth1.forget()  # twice: nothing more goes
    assert dict(metric.series) == {("eth2", "r1"): 1}


def test_a_top_n_view_shows_only_the_series_it_names_and_keeps_counting_the_rest():
    table = MetricTable(limit=10)
    metric = table.metric("ebpfkit_bytes_total", "counter", "b", ("comm",))
    for comm, amount in (("dd", 100), ("cat", 5), ("tar", 50)):
        metric.add((comm,), amount)
    metric.shown = {("dd",), ("tar",)}
    assert dict(metric.visible()) == {("dd",): 100, ("tar",): 50}
    metric.add(("cat",), 500)  # cat keeps counting while hidden
    assert dict(metric.series)[("cat",)] == 505
    registry = CollectorRegistry()
    registry.register(ExporterCollector([], table))
    shown = {labels for name, labels in _scrape(registry) if name == "ebpfkit_bytes_total"}
    assert shown == {(("comm", "dd"),), (("comm", "tar"),)}
