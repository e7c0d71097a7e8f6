import json
import logging
from datetime import datetime

import click
import pytest

from ebpfkit.histogram import Log2Histogram
from ebpfkit.output import ResultTable, get_logger, parse_size, setup_logging
from ebpfkit.output.logs import event_log_enabled, level_for


@pytest.mark.parametrize("text, size", [
    ("1", 1), ("4096", 4096), ("512K", 512 * 1024), ("512k", 512 * 1024), ("10M", 10 << 20),
    ("10MB", 10 << 20), ("10MiB", 10 << 20), ("1G", 1 << 30), ("1.5G", 3 << 29), (" 2 T ", 2 << 40),
    (2048, 2048),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, complaint", [
    ("", "is not a size"), ("M", "is not a size"), ("10X", "is not a size"), ("-1M", "is not a size"),
    ("ten", "is not a size"), ("1 0M", "is not a size"), ("0", "at least 1 byte"),
    ("0K", "at least 1 byte"), (0, "at least 1 byte"),
])
def test_parse_size_errors(text, complaint):
    with pytest.raises(click.BadParameter, match=complaint):
        parse_size(text)


def test_log_size_option_error_names_the_option(make_cli, runner):
    result = runner.invoke(make_cli(lambda out, **_: None), ["--log-size", "10Q", "tool"])
    assert result.exit_code == 2
    assert "Invalid value for '--log-size'" in result.stderr
    assert "512K, 10M, 1G" in result.stderr


def test_log_backup_must_not_be_negative(make_cli, runner):
    assert runner.invoke(make_cli(lambda out, **_: None), ["--log-backup", "-1", "tool"]).exit_code == 2


def test_levels():
    assert [level_for(v) for v in (0, 1, 2, 5)] == [logging.WARNING, logging.INFO, logging.DEBUG,
                                                     logging.DEBUG]
    assert get_logger("runqlat").name == "ebpfkit.tools.runqlat"
    assert get_logger("ebpfkit.engine").name == "ebpfkit.engine"


def log_lines(*paths) -> list[dict]:
    """Every line of the --log files, parsed: each must be one JSON object."""
    return [json.loads(line) for path in paths for line in path.read_text().splitlines()]


def test_log_file_rotation(make_cli, runner, tmp_path):
    log = tmp_path / "ebpfkit.log"

    def body(out, **_):
        for i in range(400):
            out.info("record %04d %s", i, "x" * 60)

    result = runner.invoke(make_cli(body), ["--log", str(log), "--log-size", "2K", "--log-backup", "3",
                                            "tool"])
    assert result.exit_code == 0, result.output
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["ebpfkit.log", "ebpfkit.log.1", "ebpfkit.log.2", "ebpfkit.log.3"]
    for path in tmp_path.iterdir():
        assert 0 < path.stat().st_size <= 2048
    kept = log_lines(*(tmp_path / name for name in reversed(files)))  # oldest file first
    numbers = [int(line["message"].split()[1]) for line in kept]
    assert numbers == list(range(numbers[0], 400))  # the newest, none missing in between
    assert {(line["level"], line["logger"]) for line in kept} == {("INFO", "ebpfkit.tools.tool")}
    assert "record" not in result.stderr  # INFO goes to the file, not the console (no -v)


def test_event_records_go_only_to_the_log_file(make_cli, runner, tmp_path):
    log = tmp_path / "events.log"

    def body(out, **_):
        out.log_event({"pid": 1, "comm": b"ping\0", "rtt_us": 87})

    result = runner.invoke(make_cli(body), ["--log", str(log), "tool"])
    assert result.exit_code == 0, result.output
    (line,) = log_lines(log)
    assert datetime.fromisoformat(line.pop("time"))
    assert line == {"tool": "tool", "pid": 1, "comm": "ping", "rtt_us": 87}
    assert "rtt_us" not in result.stderr and "rtt_us" not in result.stdout


def tables_and_events(out, **_):
    out.warn("about to print")
    out.table(ResultTable(["pid", "comm"], [[1, "init"]], title="procs"))
    out.histogram(Log2Histogram.from_counts([0, 2], unit="usecs"))
    out.document({"answer": 42}, ResultTable(["answer"], [[42]]))
    out.document({"state": "quiet"})
    out.event({"pid": 7, "comm": b"cat\0"})


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_every_result_goes_to_the_log_as_its_json_form_in_every_format(make_cli, runner, tmp_path, fmt):
    log = tmp_path / "results.log"
    result = runner.invoke(make_cli(tables_and_events), ["--log", str(log), "--format", fmt, "tool"])
    assert result.exit_code == 0, result.output
    lines = log_lines(log)
    assert all(datetime.fromisoformat(line.pop("time")) for line in lines)
    assert lines == [
        {"level": "WARNING", "logger": "ebpfkit.tools.tool", "message": "about to print"},
        {"tool": "tool", "title": "procs", "rows": [{"pid": 1, "comm": "init"}]},
        {"tool": "tool", "type": "log2", "unit": "usecs", "buckets": [{"low": 2, "high": 3, "count": 2}],
         "total": 2},
        {"tool": "tool", "answer": 42},
        {"tool": "tool", "state": "quiet"},
        {"tool": "tool", "pid": 7, "comm": "cat"},
    ]
    if fmt == "json":  # what stdout printed is what the log kept
        printed = [json.loads(line) for line in result.stdout.splitlines()]
        assert [p.get("rows", p.get("answer", p.get("state", p.get("pid")))) for p in printed] == \
            [[{"pid": 1, "comm": "init"}], None, 42, "quiet", 7]


def test_event_log_is_a_no_op_without_log_file(tmp_path):
    setup_logging(0)
    assert not event_log_enabled()
    setup_logging(0, log_file=str(tmp_path / "a.log"))
    assert event_log_enabled()


def test_setup_logging_twice_does_not_duplicate_handlers(tmp_path):
    setup_logging(1, log_file=str(tmp_path / "a.log"))
    setup_logging(2, log_file=str(tmp_path / "b.log"))
    root = logging.getLogger("ebpfkit")
    assert len(root.handlers) == 2 and root.level == logging.DEBUG
    get_logger("t").info("once")
    assert (tmp_path / "b.log").read_text().count("once") == 1
    assert "once" not in (tmp_path / "a.log").read_text()
