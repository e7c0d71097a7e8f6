"""What hardirqs and softirqs share, without a kernel: their settings' rules (the same error
whoever builds the Config) and the view of their rows in each format."""

import csv
import io
import json

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.histogram import Log2Histogram
from ebpfkit.output import Output, OutputSettings
from ebpfkit.tools import hardirqs, softirqs
from ebpfkit.tools.handler_stats import show_stats


@pytest.mark.parametrize("tool", [hardirqs, softirqs])
def test_counting_only_excludes_timing_settings(tool):
    for other in ("dist", "nanoseconds"):
        with pytest.raises(ConfigError, match=f"counts_only: cannot be combined with {other}"):
            tool.Config(counts_only=True, **{other: True})
        with pytest.raises(ConfigError, match=f"cannot be combined with {other}"):
            tool.Config.from_mapping({"counts-only": True, other: True})
    assert tool.Config(dist=True, nanoseconds=True, per_cpu=True).unit == "nsecs"
    assert tool.Config().unit == "usecs"
    with pytest.raises(ConfigError, match="per_cpu: expected bool"):
        tool.Config.from_mapping({"per_cpu": 1})


def rows():
    from ebpfkit.tools.hardirqs.session import IrqStat

    hist = Log2Histogram.from_counts([0, 2, 1], unit="usecs", label="hardirq = virtio1-req.0 (irq 36)")
    return [IrqStat(name="virtio1-req.0", irq=36, cpu=1, count=3, total_ns=12_345, histogram=hist),
            IrqStat(name="virtio3-tx", irq=42, cpu=0, count=1, total_ns=999,
                    histogram=Log2Histogram.from_counts([1], unit="usecs", label="hardirq = virtio3-tx (irq 42)"))]


def shown(fmt: str, **settings) -> str:
    stream = io.StringIO()
    out = Output(OutputSettings(format=fmt), stream=stream)
    show_stats(out, rows(), hardirqs.Config(**settings), "hardirq", "irq")
    return stream.getvalue()


def test_json_and_csv_carry_ns_whatever_the_unit_shown():
    (record,) = [json.loads(line) for line in shown("json", per_cpu=True).splitlines()]
    assert record["rows"][0] == {"name": "virtio1-req.0", "irq": 36, "cpu": 1, "count": 3, "total_ns": 12345}
    table = list(csv.DictReader(io.StringIO(shown("csv"))))
    assert [r["name"] for r in table] == ["virtio1-req.0", "virtio3-tx"]
    assert "cpu" not in table[0] and table[0]["total_ns"] == "12345"
    assert "total_ns" not in shown("csv", counts_only=True)


def test_table_shows_the_unit_chosen():
    text = shown("table")
    assert "TOTAL_usecs" in text and "12 " in text.replace("\n", " ") + " "
    assert "TOTAL_nsecs" in shown("table", nanoseconds=True) and "12345" in shown("table", nanoseconds=True)
    assert "CPU" in shown("table", per_cpu=True) and "CPU" not in text


def test_dist_shows_the_histograms():
    text = shown("table", dist=True)
    assert "hardirq = virtio1-req.0 (irq 36)" in text and "distribution" in text
