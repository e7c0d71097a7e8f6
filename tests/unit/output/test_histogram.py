import io
import json
import sys

import pytest
from rich.console import Console

from ebpfkit.errors import NotSupportedError
from ebpfkit.histogram import Log2Histogram, LinearHistogram

BCC_LOOK = (
    "     usecs               : count    distribution\n"
    "         0 -> 1          : 3        |****                                    |\n"
    "         2 -> 3          : 27       |****************************************|\n"
    "         4 -> 7          : 0        |                                        |\n"
    "         8 -> 15         : 10       |**************                          |"
)


def test_log2_renders_like_bcc():
    hist = Log2Histogram.from_counts([3, 27, 0, 10], unit="usecs")
    assert str(hist) == BCC_LOOK


def test_log2_trims_leading_and_trailing_empty_buckets():
    hist = Log2Histogram.from_counts([0, 0, 0, 5, 0, 1, 0, 0], unit="usecs")
    lines = str(hist).splitlines()
    assert lines[1].split(":")[0].split() == ["8", "->", "15"]
    assert lines[-1].split(":")[0].split() == ["32", "->", "63"]
    assert len(lines) == 4  # header + buckets 3, 4 (empty, kept: inside the range), 5


def test_log2_star_scaling():
    hist = Log2Histogram.from_counts([1, 2, 4, 80], unit="x")
    bars = [line.split("|")[1] for line in str(hist).splitlines()[1:]]
    assert all(len(bar) == 40 for bar in bars)
    assert [bar.count("*") for bar in bars] == [0, 1, 2, 40]  # floor(40 * n / max)


def test_log2_from_dict_bucket_bounds_and_add():
    hist = Log2Histogram.from_counts({2: 1, 0: 4}, unit="ns")
    assert hist.counts == [4, 0, 1]
    assert [hist.bounds(i) for i in range(4)] == [(0, 1), (2, 3), (4, 7), (8, 15)]
    for value, bucket in [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (1023, 9), (1024, 10)]:
        assert hist.bucket_of(value) == bucket
    hist.add(1000)
    assert hist.counts[9] == 1 and hist.total == 6


def test_label_is_a_section_header():
    hist = Log2Histogram.from_counts([1], unit="usecs", label="pid = 42")
    assert str(hist).splitlines()[0] == "pid = 42"
    assert hist.to_dict()["label"] == "pid = 42"


def test_empty_histogram_prints_only_the_header():
    hist = Log2Histogram.from_counts([0, 0], unit="usecs")
    assert str(hist) == "     usecs               : count    distribution"
    assert hist.total == 0 and hist.percentile(50) is None and hist.buckets() == []


def test_percentile_is_the_bucket_high_end():
    hist = Log2Histogram.from_counts([10, 0, 80, 10])  # [0,1] [2,3] [4,7] [8,15]
    assert hist.percentile(0) == 1
    assert hist.percentile(10) == 1
    assert hist.percentile(50) == 7
    assert hist.percentile(90) == 7
    assert hist.percentile(99) == 15
    assert hist.percentile(100) == 15
    with pytest.raises(ValueError):
        hist.percentile(101)


def test_to_dict_is_json_ready():
    hist = Log2Histogram.from_counts([0, 2, 1], unit="usecs")
    data = json.loads(json.dumps(hist.to_dict()))
    assert data == {"type": "log2", "unit": "usecs", "total": 3,
                    "buckets": [{"low": 2, "high": 3, "count": 2}, {"low": 4, "high": 7, "count": 1}]}


def test_linear_step_one_renders_single_values():
    hist = LinearHistogram.from_counts([0, 0, 4, 8, 1], unit="queue")
    assert str(hist) == (
        "     queue         : count    distribution\n"
        "        2          : 4        |********************                    |\n"
        "        3          : 8        |****************************************|\n"
        "        4          : 1        |*****                                   |")


def test_linear_with_base_and_step():
    hist = LinearHistogram.from_counts({1: 4, 2: 8}, base=100, step=50, unit="msecs")
    assert hist.bounds(0) == (100, 149)
    assert hist.bucket_of(175) == 1
    assert str(hist) == (
        "     msecs               : count    distribution\n"
        "       150 -> 199        : 4        |********************                    |\n"
        "       200 -> 249        : 8        |****************************************|")
    data = hist.to_dict()
    assert (data["type"], data["base"], data["step"], data["total"]) == ("linear", 100, 50, 12)
    assert hist.percentile(50) == 249 and hist.percentile(30) == 199
    with pytest.raises(ValueError):
        LinearHistogram(step=0)


def test_wide_values_widen_the_columns():
    hist = Log2Histogram.from_counts({40: 1}, unit="ns")
    low, high = hist.bounds(40)
    line = str(hist).splitlines()[1]
    assert line.startswith(f"{low} -> {high} : 1")
    header = str(hist).splitlines()[0]
    assert header.index(":") == line.index(":")


def test_rich_rendering_matches_str():
    hist = Log2Histogram.from_counts([3, 27, 0, 10], unit="usecs")
    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    console.print(hist)
    assert console.file.getvalue() == BCC_LOOK + "\n"


def test_dataframe():
    frame = Log2Histogram.from_counts([0, 2, 1], unit="usecs").to_dataframe()
    assert list(frame.columns) == ["low", "high", "count"]
    assert frame["count"].tolist() == [2, 1]


def test_dataframe_without_pandas(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes "import pandas" fail
    with pytest.raises(NotSupportedError) as info:
        Log2Histogram.from_counts([1]).to_dataframe()
    assert info.value.feature == "pandas"
    assert info.value.hint == "pip install ebpfkit[notebook]"


def test_notebook_display():
    bundle = Log2Histogram.from_counts([3, 27, 0, 10], unit="usecs")._repr_mimebundle_()
    assert bundle["text/plain"] == BCC_LOOK
    assert "<pre" in bundle["text/html"] and "distribution" in bundle["text/html"]


def test_importing_histogram_does_not_import_rich_or_pandas():
    import subprocess

    code = ("import sys, ebpfkit.histogram, ebpfkit.output; "
            "print(any(m.split('.')[0] in ('rich', 'pandas', 'click') for m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
