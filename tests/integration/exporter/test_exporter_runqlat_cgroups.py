"""The exporter's runqlat source with ``by: cgroup``, in process (the exporter's own
collector, read as its /metrics serves it): two spinners in a container-named cgroup below
the test's, one outside, on one CPU. The container's series counts its spinners' waits as
the kernel accounted them (/proc/PID/schedstat), labelled with the cgroup's path and the
container's short id; the outside spinner's waits are the root cgroup's; once the cgroup is
removed, its series goes."""

from __future__ import annotations

import os

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ebpfkit.exporter.config import parse_config
from ebpfkit.exporter.server import build_collector
from ebpfkit.net import ChildCgroup
from ebpfkit.sysinfo.cgroups import cgroup2_mount
from helpers import SPIN_SECONDS, Spinners, schedstat

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

CONTAINER = "3f2a9c0e1b7d4c5a8e6f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
LATENCY = "ebpfkit_runqueue_latency_seconds"


def scrape(registry) -> dict:
    """{(sample name, cgroup label): value} of the latency histogram's _count and _sum."""
    text = generate_latest(registry).decode()
    return {(s.name, s.labels["cgroup"]): (s.value, s.labels) for family in text_string_to_metric_families(text)
            if family.name == LATENCY for s in family.samples if s.name != f"{LATENCY}_bucket"}


def test_by_cgroup_gives_each_cgroup_its_series_and_drops_removed_ones(child_cgroup):
    collector = build_collector(parse_config("sources:\n  - source: runqlat\n    by: cgroup\n"), False)
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        with ChildCgroup(parent=child_cgroup.path, name=f"docker-{CONTAINER}.scope") as container:
            path = "/" + os.path.relpath(container.path, cgroup2_mount())
            inside, outside = Spinners(2, launch=container.popen), Spinners(1)
            try:
                collector.start()
                before = [schedstat(pid) for pid in inside.pids + outside.pids]  # they sleep on stdin
                inside.go()
                outside.go()
                after = inside.done() + outside.done()
            finally:
                inside.close()
                outside.close()
            (*ours, other) = [a.since(b) for a, b in zip(after, before)]
            samples = scrape(registry)
            (count, labels), (total, _) = samples[(f"{LATENCY}_count", path)], samples[(f"{LATENCY}_sum", path)]
            assert labels == {"cgroup": path, "container": CONTAINER[:12], "pod_uid": ""}
            runs, waited_us = sum(t.runs for t in ours), sum(t.waited_us for t in ours)
            assert waited_us >= SPIN_SECONDS * 1e6, ours  # they waited for each other (and the third)
            assert abs(count - runs) <= max(2, runs // 100), (count, ours)
            assert waited_us * 0.95 - 1000 <= total * 1e6 <= waited_us * 1.05 + 1000, (total, ours)
            assert samples[(f"{LATENCY}_count", "/")][0] >= other.runs - max(2, other.runs // 100), samples
        samples = scrape(registry)  # the container's cgroup is gone: so is its series
        assert (f"{LATENCY}_count", path) not in samples and (f"{LATENCY}_count", "/") in samples, samples
    finally:
        collector.close()
