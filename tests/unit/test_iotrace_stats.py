"""The report's numbers from known lifecycles."""

from __future__ import annotations

import pytest

from ebpfkit.tools.iotrace import stats
from ebpfkit.tools.iotrace.fileformat import BlockEvent, Device, Extent, FileMap, Recording, Syscall
from ebpfkit.tools.iotrace.join import join

DISK = "7:0"


def test_percentile_nearest_rank():
    v = list(range(1, 101))
    assert stats.percentile(v, 50) == 50 and stats.percentile(v, 99) == 99 and stats.percentile(v, 100) == 100
    assert stats.percentile([7], 99) == 7 and stats.percentile([], 50) is None
    assert stats.percentile([1, 2], 0) == 1


def test_summarize_in_microseconds():
    s = stats.summarize([1000, 2000, 3000, 10000])
    assert s == {"count": 4, "avg": 4.0, "p50": 2.0, "p99": 10.0, "max": 10.0}
    assert stats.summarize([])["count"] == 0


def _rec():
    """pid 10: a direct write joined to one request (queue 1000, insert 1200, issue 1500,
    complete 5500); pid 20: a cached read (no IO); kworker 30: a writeback request."""
    rec = Recording("x", {"version": 1})
    rec.syscalls = [Syscall(500, 6000, 10, 10, "db", "pwrite64", 3, DISK, 12, 0, 4096, 4096, True, "reg"),
                    Syscall(100, 300, 20, 20, "cat", "read", 3, DISK, 12, 0, 4096, 100, False, "reg")]
    ev = [(1000, "queue", 0), (1200, "insert", 0), (1500, "issue", 0), (5500, "complete", 0),
          (7000, "queue", 800), (7100, "issue", 800), (9100, "complete", 800)]
    rec.block = [BlockEvent(t, st, DISK, sec, 8, "W", 10 if sec == 0 else 30, 10 if sec == 0 else 30,
                            "db" if sec == 0 else "kworker/u8:1") for t, st, sec in ev]
    rec.devices[DISK] = Device(DISK, "loop0", DISK)
    rec.files[(DISK, 12)] = FileMap(DISK, 12, "/data", [Extent(0, 0, 1 << 20)])
    return rec


def test_breakdown_per_stage():
    rows = {r["stage"]: r for r in stats.breakdown(join(_rec()))}
    assert rows["syscall"]["count"] == 2 and rows["syscall"]["max"] == 5.5
    assert rows["S2Q"]["count"] == 1 and rows["S2Q"]["avg"] == 0.5
    assert rows["Q2I"]["count"] == 1 and rows["Q2I"]["avg"] == 0.2
    assert rows["I2D"]["avg"] == pytest.approx(0.3)
    assert rows["Q2D"]["count"] == 2 and rows["D2C"]["count"] == 2 and rows["D2C"]["max"] == 4.0
    assert rows["Q2C"]["max"] == 4.5 and rows["C2R"]["avg"] == 0.5
    assert [r["stage"] for r in stats.breakdown(join(_rec()))] == [s for s, _ in stats.STAGES]


def test_slowest_and_lifecycle_dict():
    res = join(_rec())
    top = stats.slowest(res, 10)
    assert len(top) == 2  # the cached read never reached the block layer
    d = stats.lifecycle_dict(top[0], _rec().files)
    assert d["pid"] == 10 and d["syscall"] == "pwrite64" and d["file"]["path"] == "/data"
    assert d["total_us"] == 5.5 and d["stages_us"]["D2C"] == 4.0 and d["stages_us"]["C2R"] == 0.5
    assert d["requests"][0]["queue_ns"] == 1000 and d["requests"][0]["complete_ns"] == 5500
    wb = stats.lifecycle_dict(top[1], {})
    assert wb["syscall"] is None and wb["comm"] == "kworker/u8:1" and wb["total_us"] == 2.1
    assert stats.slowest(res, 1) == top[:1] and len(stats.slowest(res, None)) == 2


def test_per_process_attribution():
    rows = {r["pid"]: r for r in stats.per_process(join(_rec()))}
    assert rows[10]["syscalls"] == 1 and rows[10]["write_bytes"] == 4096 and rows[10]["joined"] == 1
    assert rows[10]["requests"] == 1 and rows[10]["block_bytes"] == 4096
    assert rows[20]["read_bytes"] == 100 and rows[20]["requests"] == 0 and rows[20]["q2c_avg_us"] is None
    assert rows[30]["syscalls"] == 0 and rows[30]["requests"] == 1 and rows[30]["q2c_avg_us"] == 2.1


def test_report_command_on_a_written_file(tmp_path):
    import json

    from click.testing import CliRunner

    from ebpfkit.cli import cli
    from ebpfkit.tools.iotrace.fileformat import RecordWriter

    rec = _rec()
    path = tmp_path / "r.iot"
    with RecordWriter(str(path)) as w:
        w.header(filters={"pid": None, "disk": None}, tool="test")
        for s in rec.syscalls:
            w.syscall(s)
        for b in rec.block:
            w.block(b)
        w.device(rec.devices[DISK])
        w.file(rec.files[(DISK, 12)])
        w.end(lost=0, dropped_syscalls=0, duration_ns=10**9)
    result = CliRunner().invoke(cli, ["iotrace", "report", str(path), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["summary"]["joined_syscalls"] == 1 and doc["summary"]["block_requests"] == 2
    assert doc["host"]["hostname"] and doc["format_version"] == 1
    assert [lc["pid"] for lc in doc["slowest"]] == [10, 30]
    table = CliRunner().invoke(cli, ["iotrace", "report", str(path)], catch_exceptions=False)
    assert table.exit_code == 0
    for title in ("Per-layer latency", "Slowest 2 requests", "Per process", "kworker"):
        assert title in table.output
