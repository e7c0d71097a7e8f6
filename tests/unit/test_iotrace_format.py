"""The iotrace record file: what the writer writes the reader reads back, and every way a
file can be wrong gives a RecordFileError naming the problem (and the CLI exit 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.tools.iotrace.fileformat import (FORMAT, VERSION, BlockEvent, Device, Extent, FileMap,
                                        RecordFileError, RecordWriter, Syscall, host_identity,
                                        read_recording)

SYS = Syscall(enter=1000, exit=5000, tid=42, pid=42, comm="dd", call="pwrite64", fd=3, dev="7:0",
              ino=12, offset=8192, count=4096, ret=4096, direct=True, file_type="reg", gen=7)
BLK = BlockEvent(ts=2000, stage="queue", dev="7:0", sector=100, nr_sector=8, rwbs="WS", tid=42, pid=42,
                 comm="dd")


def write_file(path, *, end=True, syscalls=(SYS,), block=(BLK,)):
    with RecordWriter(str(path)) as w:
        w.header(filters={"pid": None, "disk": "loop0"}, tool="ebpfkit test")
        for s in syscalls:
            w.syscall(s)
        for b in block:
            w.block(b)
        w.device(Device("7:0", "loop0", "7:0", 0))
        w.file(FileMap("7:0", 12, "/mnt/f", [Extent(0, 4096 * 100, 1 << 20, 1)]))
        w.file(FileMap("7:0", 13, None, [], error="gone"))
        if end:
            w.end(lost=3, dropped_syscalls=1, duration_ns=10**9)
    return path


def test_round_trip(tmp_path):
    rec = read_recording(str(write_file(tmp_path / "a.iot")))
    assert rec.header["format"] == FORMAT and rec.header["version"] == VERSION
    assert rec.header["clock"] == "CLOCK_MONOTONIC" and rec.header["filters"]["disk"] == "loop0"
    assert set(rec.header["host"]) >= {"hostname", "machine_id", "boot_id", "kernel"}
    assert rec.syscalls == [SYS] and rec.block == [BLK]
    assert rec.devices["7:0"] == Device("7:0", "loop0", "7:0", 0)
    assert rec.files[("7:0", 12)].extents == [Extent(0, 409600, 1 << 20, 1)]
    assert rec.files[("7:0", 13)].error == "gone"
    assert rec.lost == 3 and not rec.truncated and rec.end["records"] == 2


def test_every_line_is_json_with_a_type(tmp_path):
    lines = write_file(tmp_path / "a.iot").read_text().splitlines()
    objs = [json.loads(line) for line in lines]
    assert [o["type"] for o in objs] == ["header", "sys", "blk", "device", "file", "file", "end"]


def test_host_identity_names_the_boot():
    host = host_identity()
    assert host["hostname"] and host["kernel"]
    assert host["boot_id"]  # what makes monotonic times of two files comparable


def test_unknown_record_types_are_skipped(tmp_path):
    path = write_file(tmp_path / "a.iot")
    lines = path.read_text().splitlines()
    lines.insert(1, json.dumps({"type": "guest-note", "anything": 1}))
    path.write_text("\n".join(lines) + "\n")
    assert len(read_recording(str(path)).syscalls) == 1


def _error(path, **kw) -> str:
    with pytest.raises(RecordFileError) as err:
        read_recording(str(path), **kw)
    assert err.value.exit_code == 2
    return str(err.value)


def test_truncated_file(tmp_path):
    path = write_file(tmp_path / "t.iot", end=False)
    assert "truncated" in _error(path)
    rec = read_recording(str(path), allow_truncated=True)
    assert rec.truncated and len(rec.syscalls) == 1


def test_file_cut_in_the_middle_of_a_line(tmp_path):
    path = write_file(tmp_path / "t.iot")
    data = path.read_bytes()
    path.write_bytes(data[:data.index(b'"type":"blk"') + 20])
    assert "truncated" in _error(path)
    rec = read_recording(str(path), allow_truncated=True)
    assert len(rec.syscalls) == 1 and rec.block == []


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"\x00\xff\xfe garbage \x01\x02", "not an iotrace record file"),
    (b'{"type": "header", "format": "perf", "version": 1}\n', "not an iotrace record file"),
    (b"[1, 2, 3]\n", "not an iotrace record file"),
    (json.dumps({"type": "header", "format": FORMAT, "version": VERSION + 1, "host": {},
                 "started_ns": 0}).encode() + b"\n", "format version"),
    (json.dumps({"type": "header", "format": FORMAT, "version": "one"}).encode() + b"\n", "no valid version"),
])
def test_not_a_record_file(tmp_path, content, message):
    path = tmp_path / "x.iot"
    path.write_bytes(content)
    assert message in _error(path)


@pytest.mark.parametrize("edit, message", [
    (lambda o: o.pop("ino"), "lacks 'ino'"),
    (lambda o: o.update(ret="many"), "'ret' is not an integer"),
    (lambda o: o.update(call="mmap"), "unknown syscall"),
])
def test_corrupt_syscall_line(tmp_path, edit, message):
    path = write_file(tmp_path / "c.iot")
    lines = path.read_text().splitlines()
    obj = json.loads(lines[1])
    edit(obj)
    lines[1] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    err = _error(path)
    assert "line 2" in err and message in err


def test_corrupt_json_in_the_middle(tmp_path):
    path = write_file(tmp_path / "c.iot")
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:15] + "}}}"
    path.write_text("\n".join(lines) + "\n")
    assert "line 3 is corrupt" in _error(path)


def test_lines_after_the_end(tmp_path):
    path = write_file(tmp_path / "c.iot")
    path.write_text(path.read_text() + json.dumps({"type": "sys"}) + "\n")
    assert "follows the end" in _error(path)


def test_unreadable(tmp_path):
    assert "cannot read" in _error(tmp_path / "missing.iot")
    assert "cannot read" in _error(tmp_path)  # a directory


def test_report_cli_exits_2_on_bad_files(tmp_path):
    bad = tmp_path / "bad.iot"
    bad.write_bytes(b"\x00garbage")
    cut = write_file(tmp_path / "cut.iot", end=False)
    for path in (bad, cut, tmp_path / "missing.iot", tmp_path):
        result = CliRunner().invoke(cli, ["iotrace", "report", str(path)])
        assert result.exit_code == 2, result.output
        assert "Error:" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["iotrace", "report", "--partial", str(cut)])
    assert result.exit_code == 0, result.output
