import csv
import io
import json
import re
from datetime import datetime

import click
from rich.console import Console

from ebpfkit.histogram import Log2Histogram
from ebpfkit.output import Column, Output, OutputSettings, ResultTable

CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")


def interval_tables(out, **_):
    with out.live():
        for tick in range(3):
            out.table(ResultTable(["pid", "comm", "count"], [[tick, "bash", tick * 10],
                                                              [100 + tick, "sshd", 5]]))


def per_pid_histograms(out, **_):
    with out.live():
        for _ in range(2):
            out.histograms([Log2Histogram.from_counts([1, 2], unit="usecs", label="pid = 1"),
                            Log2Histogram.from_counts([0, 0, 7], unit="usecs", label="pid = 2")])


def event_stream(out, **_):
    out.banner("Tracing opens... Hit Ctrl-C to end.")
    for i in range(3):
        out.event({"pid": 100 + i, "comm": b"cat\0\0\0", "ms": 0.5 * i, "path": f"/tmp/f{i}"})


def test_json_one_object_per_interval(make_cli, runner):
    result = runner.invoke(make_cli(interval_tables), ["--format", "json", "tool"])
    assert result.exit_code == 0, result.output
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 3
    assert objects[2]["rows"] == [{"pid": 2, "comm": "bash", "count": 20},
                                  {"pid": 102, "comm": "sshd", "count": 5}]
    assert all(datetime.fromisoformat(o["time"]) for o in objects)


def test_json_histograms_per_interval(make_cli, runner):
    result = runner.invoke(make_cli(per_pid_histograms), ["--format", "json", "tool"])
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 2
    hists = objects[0]["histograms"]
    assert [h["label"] for h in hists] == ["pid = 1", "pid = 2"]
    assert hists[1]["buckets"] == [{"low": 4, "high": 7, "count": 7}] and hists[1]["total"] == 7


def test_single_histogram_json_is_its_dict_plus_time(make_cli, runner):
    cli = make_cli(lambda out, **_: out.histogram(Log2Histogram.from_counts([1, 3], unit="ms")))
    data = json.loads(runner.invoke(cli, ["--format", "json", "tool"]).stdout)
    assert set(data) == {"time", "type", "unit", "buckets", "total"} and data["total"] == 4


def test_ndjson_events(make_cli, runner):
    result = runner.invoke(make_cli(event_stream), ["--format", "json", "tool"])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events == [{"pid": 100 + i, "comm": "cat", "ms": 0.5 * i, "path": f"/tmp/f{i}"}
                      for i in range(3)]
    assert "Tracing opens" in result.stderr and "Tracing" not in result.stdout


def test_ndjson_events_with_timestamps(make_cli, runner):
    result = runner.invoke(make_cli(event_stream), ["tool", "--format", "json", "-T"])
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert list(events[0]) == ["time", "pid", "comm", "ms", "path"]


def test_csv_header_once_then_rows(make_cli, runner):
    result = runner.invoke(make_cli(interval_tables), ["--format", "csv", "tool"])
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["time", "pid", "comm", "count"]
    assert len(rows) == 1 + 3 * 2 and all(row[0] != "time" for row in rows[1:])
    assert rows[-1][1:] == ["102", "sshd", "5"]


def test_csv_events_and_histograms(make_cli, runner):
    rows = list(csv.DictReader(io.StringIO(
        runner.invoke(make_cli(event_stream), ["--format", "csv", "tool"]).stdout)))
    assert rows == [{"pid": str(100 + i), "comm": "cat", "ms": str(0.5 * i), "path": f"/tmp/f{i}"}
                    for i in range(3)]
    rows = list(csv.DictReader(io.StringIO(
        runner.invoke(make_cli(per_pid_histograms), ["--format", "csv", "tool"]).stdout)))
    assert len(rows) == 2 * 3
    assert {k: rows[2][k] for k in ("label", "unit", "low", "high", "count")} == \
        {"label": "pid = 2", "unit": "usecs", "low": "4", "high": "7", "count": "7"}


def test_table_intervals_without_a_terminal_get_timestamp_headers(make_cli, runner):
    result = runner.invoke(make_cli(interval_tables), ["tool"])
    blocks = result.stdout.strip("\n").split("\n\n")
    assert len(blocks) == 3
    for tick, block in enumerate(blocks):
        lines = block.splitlines()
        assert CLOCK.match(lines[0])
        assert lines[1].split() == ["pid", "comm", "count"]
        assert lines[2].split() == [str(tick), "bash", str(tick * 10)]


def test_table_intervals_on_a_terminal_redraw_in_place():
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    interval_tables(Output(OutputSettings(), console=console))
    text = console.file.getvalue()
    assert "\x1b[1A" in text or "\x1b[2K" in text  # cursor moved back up to redraw
    for tick in range(3):
        assert f"{tick}  bash" in text
    assert text.count("pid  comm  count") >= 3  # one frame per interval (+ rich's final one)


def test_event_lines_are_aligned_with_one_header(make_cli, runner):
    result = runner.invoke(make_cli(event_stream), ["tool"])
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PID", "COMM", "MS", "PATH"]
    assert [line.split() for line in lines[1:]] == [
        [str(100 + i), "cat", f"{0.5 * i:.2f}", f"/tmp/f{i}"] for i in range(3)]
    starts = {line.index("/tmp") for line in lines[1:]}
    assert starts == {lines[0].index("PATH")}


def test_declared_event_columns_and_timestamps(make_cli, runner):
    def body(out, **_):
        out.event_columns(Column("PID", key="pid", width=7), Column("COMM", key="comm", width=16),
                          Column("LAT(ms)", key="lat", format=".3f"))
        out.event({"pid": 1, "comm": "init", "lat": 0.25, "ignored": True})

    lines = runner.invoke(make_cli(body), ["tool", "-T"]).stdout.splitlines()
    assert lines[0] == "TIME         PID COMM             LAT(ms)"
    assert CLOCK.match(lines[1][:8]) and lines[1][8:] == "       1 init               0.250"


def test_output_file(make_cli, runner, tmp_path):
    target = tmp_path / "result.json"
    result = runner.invoke(make_cli(interval_tables), ["--format", "json", "--output", str(target),
                                                       "tool"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert len([json.loads(line) for line in target.read_text().splitlines()]) == 3


def test_output_file_in_table_format_is_plain_and_100_wide(make_cli, runner, tmp_path):
    target = tmp_path / "result.txt"

    def body(out, **_):
        out.table([{"pid": 1, "path": "/x" * 200}])

    result = runner.invoke(make_cli(body), ["tool", "--output", str(target)])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert "\x1b[" not in text and max(len(line) for line in text.splitlines()) == 100


def test_output_file_that_cannot_be_opened(make_cli, runner, tmp_path):
    result = runner.invoke(make_cli(interval_tables),
                           ["--output", str(tmp_path / "missing" / "x.json"), "tool"])
    assert result.exit_code == 1
    assert "Could not open file" in result.stderr and "x.json" in result.stderr


def test_lost_events_are_warned_about(make_cli, runner):
    def body(out, **_):
        out.lost(0)
        out.lost(17, "samples")
        out.lost(3, "samples")
        assert out.lost_total == 20

    result = runner.invoke(make_cli(body), ["tool"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr.count("WARNING: lost") == 2 and "lost 17 samples" in result.stderr


def test_messages_follow_verbosity(make_cli, runner):
    def body(out, **_):
        out.debug("debug msg")
        out.info("info msg")
        out.warn("warn msg")
        out.error("error msg")

    quiet = runner.invoke(make_cli(body), ["tool"]).stderr
    assert "warn msg" in quiet and "error msg" in quiet and "info msg" not in quiet
    verbose = runner.invoke(make_cli(body), ["-v", "tool"]).stderr
    assert "info msg" in verbose and "debug msg" not in verbose
    very = runner.invoke(make_cli(body), ["-vv", "tool"]).stderr
    assert "debug msg" in very and "ebpfkit.tools.tool" in very


def test_settings_reach_the_tool(make_cli, runner):
    seen = {}

    def body(out, **_):
        seen["settings"] = out.settings
        seen["logger"] = out.log.name

    runner.invoke(make_cli(body), ["--no-color", "-vv", "--format", "CSV", "tool", "-T"])
    assert seen["settings"] == OutputSettings(format="csv", color=False, verbosity=2, timestamps=True)
    assert seen["logger"] == "ebpfkit.tools.tool"


def test_output_without_cli_settings_uses_defaults():
    @click.command()
    def bare():
        out = Output.from_context()
        assert out.settings == OutputSettings() and out is Output.from_context()
        out.event({"a": 1})

    from click.testing import CliRunner

    assert CliRunner().invoke(bare, []).stdout.splitlines()[1].strip() == "1"


def two_views(out, **_):
    wide = [{"pid": 1, "path": "/a", "bytes": 10, "extra": "x"}]
    out.document({"files": wide, "disks": [{"disk": "sda", "ios": 3}]},
                 [ResultTable(["pid", "path"], wide, title="Files", data_keys=["pid", "path", "bytes"]),
                  ResultTable(["disk", "ios"], [{"disk": "sda", "ios": 3}], title="Disks")])


def test_document_with_tables_json_prints_the_document(make_cli, runner):
    result = runner.invoke(make_cli(two_views), ["--format", "json", "tool"])
    assert json.loads(result.stdout) == {"files": [{"pid": 1, "path": "/a", "bytes": 10, "extra": "x"}],
                                         "disks": [{"disk": "sda", "ios": 3}]}


def test_document_with_tables_csv_prints_each_table_with_its_data_keys(make_cli, runner):
    rows = list(csv.reader(io.StringIO(runner.invoke(make_cli(two_views), ["--format", "csv", "tool"]).stdout)))
    assert [row[1:] for row in rows] == [["pid", "path", "bytes"], ["1", "/a", "10"], ["disk", "ios"], ["sda", "3"]]


def test_document_with_tables_table_shows_the_columns_only(make_cli, runner):
    text = runner.invoke(make_cli(two_views), ["--no-color", "tool"]).stdout
    assert "Files" in text and "Disks" in text and "/a" in text and "sda" in text
    assert "bytes" not in text  # a data key, not a column


def test_several_tables_as_json_and_csv(make_cli, runner):
    def body(out, **_):
        out.tables([ResultTable(["a"], [[1]], title="one"), ResultTable(["b"], [[2]])])

    data = json.loads(runner.invoke(make_cli(body), ["--format", "json", "tool"]).stdout)
    assert data["tables"] == [{"title": "one", "rows": [{"a": 1}]}, {"rows": [{"b": 2}]}]
    rows = list(csv.reader(io.StringIO(runner.invoke(make_cli(body), ["--format", "csv", "tool"]).stdout)))
    assert [row[1:] for row in rows] == [["a"], ["1"], ["b"], ["2"]]


def folded_text(out, **_):
    out.refuse_format_with("-f/--folded")
    out.text_lines(["bash;main;-;schedule 10", "sshd 3"], "folded")


def test_text_of_a_tools_own_format_is_written_as_it_is(make_cli, runner, tmp_path):
    log = tmp_path / "log.jsonl"
    result = runner.invoke(make_cli(folded_text), ["--log", str(log), "tool"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "bash;main;-;schedule 10\nsshd 3\n"
    kept = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(r.get("folded") == ["bash;main;-;schedule 10", "sshd 3"] for r in kept), kept


def test_text_of_a_tools_own_format_refuses_json_and_csv(make_cli, runner):
    for fmt in ("json", "csv"):
        result = runner.invoke(make_cli(folded_text), ["--format", fmt, "tool"])
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert f"-f/--folded prints text of its own; it does not combine with --format {fmt}" in result.stderr


def stacks_table(out, **_):
    out.table(ResultTable(["comm", "stack"], [["bash", ["schedule", "do_nanosleep"]]]))


def test_csv_joins_a_list_cell_with_semicolons(make_cli, runner):
    result = runner.invoke(make_cli(stacks_table), ["--format", "csv", "tool"])
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["time", "comm", "stack"] and rows[1][1:] == ["bash", "schedule;do_nanosleep"], rows


def stack_events(out, **_):
    out.event_columns(Column("PID", key="pid", width=5), Column("LAT", key="lat"),
                      data_keys=["pid", "lat", "stack"], detail=lambda r: r["stack"] or ["(none)"])
    out.event({"pid": 1, "lat": 30, "stack": ["inner+0x1", "outer+0x2"]})
    out.event({"pid": 2, "lat": 40, "stack": []})


def test_event_detail_lines_under_each_line_in_tables_only(make_cli, runner):
    table = runner.invoke(make_cli(stack_events), ["tool"]).stdout.splitlines()
    assert [line.split() for line in table] == [["PID", "LAT"], ["1", "30"], ["inner+0x1"], ["outer+0x2"],
                                                 ["2", "40"], ["(none)"]]
    assert table[2].startswith("    ")
    rows = list(csv.reader(io.StringIO(runner.invoke(make_cli(stack_events), ["--format", "csv", "tool"]).stdout)))
    assert rows == [["pid", "lat", "stack"], ["1", "30", "inner+0x1;outer+0x2"], ["2", "40", ""]]
    events = [json.loads(line) for line in
              runner.invoke(make_cli(stack_events), ["--format", "json", "tool"]).stdout.splitlines()]
    assert events[0]["stack"] == ["inner+0x1", "outer+0x2"] and len(events) == 2
