"""iofsstat's user-space half: paths from BPF's name lists, sorting, the printed views, and
bad input (which must be a usage error, exit 2, before anything is loaded)."""

import io
import json

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.output import MAX_TABLE_WIDTH, Output, OutputSettings
from ebpfkit.tools import TOOLS
from ebpfkit.tools.iofsstat.session import Interval, decode_path
from ebpfkit.tools.iofsstat.views import SORT_KEYS, display_tables, file_label, human_rate, show, sort_rows


def test_paths_are_names_from_the_leaf_up():
    assert decode_path(b"c.txt\0b\0a\0", 0) == ("/a/b/c.txt", True)
    assert decode_path(b"", 0) == ("/", True)  # the root directory itself
    assert decode_path("é\0".encode(), 0) == ("/é", True)
    assert decode_path(b"x\xff\0", 0) == ("/x\udcff", True)  # not UTF-8: kept, not dropped
    # stopped early (too deep, or a detached mount): the part seen, marked, and not cached
    assert decode_path(b"c\0b\0", 1) == ("…/b/c", False)
    assert decode_path(b"c\0", 2) == ("…/c", False)


def row(pid, path, rb=0, wb=0, comm="app", container=None):
    return {"comm": comm, "pid": pid, "reads": 1, "r_bps": float(rb), "writes": 1, "w_bps": float(wb),
            "inode": 12, "device": "loop0", "path": path, "container": container,
            "read_bytes": rb, "write_bytes": wb, "dev": "7:0"}


def test_sorting_default_by_bytes_then_any_column():
    rows = [row(1, "/a", rb=10), row(2, "/b", wb=30), row(3, "/c", rb=5, wb=5)]
    total = lambda r: r["read_bytes"] + r["write_bytes"]  # noqa: E731
    assert [r["pid"] for r in sort_rows(rows, None, total, None)] == [2, 1, 3]
    assert [r["pid"] for r in sort_rows(rows, "r_bps", total, None)] == [1, 3, 2]
    assert [r["path"] for r in sort_rows(rows, "path", total, None)] == ["/a", "/b", "/c"]  # text: A-Z
    assert [r["pid"] for r in sort_rows(rows, "util", total, 2)] == [2, 1]  # not a column here
    assert sort_rows([], "pid", total, 3) == []
    assert "await" in SORT_KEYS and "path" in SORT_KEYS and "r_bps" in SORT_KEYS


def test_human_rates():
    assert [human_rate(v) for v in (0, 512, 1536, 20 * 2 ** 20, 3 * 2 ** 30, 5 * 2 ** 40)] == \
        ["0", "512", "1.5K", "20.0M", "3.0G", "5120.0G"]


def test_container_suffix_as_the_source_tool_shows_it():
    assert file_label(row(1, "/data/x", container="3f2a9c0e1b7d")) == "/data/x [containerId:3f2a9c0e1b7d]"
    assert file_label(row(1, "/data/x")) == "/data/x"


def interval():
    long_path = "/srv/" + "/".join(f"level{i}" for i in range(20)) + "/the-file-name.log"
    return Interval(1.0, disks=[{"disk": "loop0", "r_iops": 1.0, "w_iops": 2.0, "r_bps": 4096.0,
                                 "w_bps": 8192.0, "await": 0.5, "r_await": 0.25, "w_await": 0.625,
                                 "util": 3.0, "reads": 1, "writes": 2, "read_bytes": 4096,
                                 "write_bytes": 8192}],
                    disk_processes=[{"comm": "dd", "pid": 7, "disk": "loop0", "reads": 1,
                                     "r_bps": 4096.0, "writes": 0, "w_bps": 0.0, "read_bytes": 4096,
                                     "write_bytes": 0, "container": None}],
                    files=[row(7, long_path, rb=4096, comm="dd", container="3f2a9c0e1b7d")])


def test_table_keeps_the_file_name_of_long_paths_within_the_width():
    out = io.StringIO()
    show(Output(OutputSettings(), stream=out), interval())
    text = out.getvalue()
    assert all(len(line) <= MAX_TABLE_WIDTH for line in text.splitlines())
    assert "the-file-name.log [containerId:3f2a9c0e1b7d]" in text
    assert "…" in text  # the path was cut at its start
    for title in ("Disks", "Disk IO by process", "File IO by process"):
        assert title in text
    assert len(display_tables(interval())) == 3


def test_json_is_one_object_per_interval_with_all_fields():
    out = io.StringIO()
    show(Output(OutputSettings(format="json"), stream=out), interval())
    (line,) = out.getvalue().splitlines()
    doc = json.loads(line)
    assert set(doc) == {"time", "interval", "disks", "disk_processes", "files"}
    assert doc["files"][0]["path"].endswith("/the-file-name.log")  # never shortened
    assert doc["files"][0]["container"] == "3f2a9c0e1b7d"
    assert doc["disks"][0]["await"] == 0.5


def test_csv_has_a_header_per_view():
    out = io.StringIO()
    show(Output(OutputSettings(format="csv"), stream=out), interval())
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("time,disk,r_iops")
    assert any(line.startswith("time,comm,pid,disk") for line in lines)
    assert any(line.startswith("time,comm,pid,reads") for line in lines)
    assert sum(1 for line in lines if ",dd," in line) == 2


@pytest.mark.parametrize("args, message", [
    (["-p", "999999999"], "no process with PID 999999999"),
    (["--disk", "no-such-disk0"], "no block device 'no-such-disk0'"),
    (["--container", "not-hex"], "is no container id"),
    (["--container", "ffffffffffff"], "no running container"),
    (["--sort", "nonsense"], "nonsense"),
    (["-n", "0"], "0"),
])
def test_bad_input_is_a_usage_error(args, message):
    result = CliRunner().invoke(cli, ["iofsstat", *args, "1", "1"])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_registered_with_both_hooks():
    info = TOOLS["iofsstat"]
    assert info.module == "ebpfkit.tools.iofsstat.cli"
    assert [needs for _, needs in info.hooks] == [("btf", "kernel_btf", "fexit", "bpf_loop", "tracepoint", "lockdown"),
                                                  ("btf", "bpf_loop", "tracepoint", "lockdown")]
