"""The iotrace record file: JSON lines, one object per line, each with a ``type``.
See docs/iotrace-format.md for the specification; this module writes and reads it.

A file is a ``header`` line, then ``sys`` and ``blk`` records in the order they were
received, then ``device`` and ``file`` lines (the layer mapping table, taken when the
recording ended) and an ``end`` line. A file without its ``end`` line was cut short.
"""

from __future__ import annotations

import json
import platform
import socket
import time
from dataclasses import dataclass, field

from ...errors import EbpfkitError

FORMAT = "ebpfkit-iotrace"
VERSION = 1
STAGES = ("queue", "insert", "issue", "complete")  # block layer stages, in lifecycle order
SYSCALLS = ("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2",
            "pwritev2")


class RecordFileError(EbpfkitError):
    """The record file can't be read: missing, not an iotrace file, corrupt or truncated."""

    exit_code = 2


# --- records --------------------------------------------------------------------------

@dataclass(slots=True)
class Syscall:
    """One read/write-family syscall on a regular file or a block device."""

    enter: int
    exit: int
    tid: int
    pid: int
    comm: str
    call: str
    fd: int
    dev: str  # "major:minor" of the file's filesystem (of the device for a block device file)
    ino: int
    offset: int  # file offset of the IO; -1 unknown
    count: int  # bytes asked for (0: unknown, readv/writev)
    ret: int
    direct: bool  # opened with O_DIRECT
    file_type: str  # "reg" or "blk"
    gen: int = 0  # the inode's generation: (ino, gen) is a file handle on ext4/xfs

    @property
    def op(self) -> str:
        return "W" if "write" in self.call else "R"

    @property
    def nbytes(self) -> int:
        return max(self.ret, 0)


@dataclass(slots=True)
class BlockEvent:
    """One hit of block_bio_queue / block_rq_insert / _issue / _complete."""

    ts: int
    stage: str  # one of STAGES
    dev: str  # "major:minor" of the whole disk
    sector: int
    nr_sector: int
    rwbs: str
    tid: int
    pid: int
    comm: str
    error: int = 0


@dataclass
class Extent:
    logical: int  # byte offset in the file
    physical: int  # byte offset on the filesystem's device
    length: int
    flags: int = 0


@dataclass
class FileMap:
    """The extent map of one file (FIEMAP): the layer mapping table's file part."""

    dev: str
    ino: int
    path: str | None
    extents: list[Extent] = field(default_factory=list)
    error: str | None = None  # why there is no map


@dataclass
class Device:
    """A block device seen in the recording: a partition is mapped to its disk."""

    dev: str
    name: str
    disk: str  # "major:minor" of the whole disk (itself if not a partition)
    start_sector: int = 0  # the partition's first sector on the disk


@dataclass
class Recording:
    path: str
    header: dict
    syscalls: list[Syscall] = field(default_factory=list)
    block: list[BlockEvent] = field(default_factory=list)
    files: dict[tuple[str, int], FileMap] = field(default_factory=dict)
    devices: dict[str, Device] = field(default_factory=dict)
    end: dict | None = None

    @property
    def truncated(self) -> bool:
        return self.end is None

    @property
    def lost(self) -> int:
        return int((self.end or {}).get("lost", 0) or 0)


# --- host identity --------------------------------------------------------------------

def _read_first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def host_identity() -> dict:
    """What names this host and boot, so a guest's and a host's files can be told apart and
    joined: a monotonic clock is only comparable within one boot_id."""
    uname = platform.uname()
    return {"hostname": socket.gethostname(), "machine_id": _read_first_line("/etc/machine-id"),
            "boot_id": _read_first_line("/proc/sys/kernel/random/boot_id"),
            "kernel": uname.release, "arch": uname.machine}


# --- writing --------------------------------------------------------------------------

class RecordWriter:
    """Writes a record file line by line (buffered: a recording can be large)."""

    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "w", encoding="utf-8", buffering=1 << 20)
        self.records = 0

    def _line(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def header(self, *, filters: dict, tool: str) -> dict:
        mono, real = time.monotonic_ns(), time.time_ns()
        header = {"type": "header", "format": FORMAT, "version": VERSION, "host": host_identity(),
                  "clock": "CLOCK_MONOTONIC", "unit": "ns", "started_ns": mono,
                  # wall clock = monotonic + this: lines up files of different hosts/boots
                  "realtime_offset_ns": real - mono,
                  "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(real / 1e9)),
                  "filters": filters, "tool": tool}
        self._line(header)
        self._f.flush()  # a reader (or a test) can see the recording has begun
        return header

    def syscall(self, s: Syscall) -> None:
        self.records += 1
        self._line({"type": "sys", "enter": s.enter, "exit": s.exit, "tid": s.tid, "pid": s.pid,
                    "comm": s.comm, "call": s.call, "fd": s.fd, "dev": s.dev, "ino": s.ino,
                    "offset": s.offset, "count": s.count, "ret": s.ret, "direct": s.direct,
                    "file_type": s.file_type, "gen": s.gen})

    def block(self, b: BlockEvent) -> None:
        self.records += 1
        self._line({"type": "blk", "ts": b.ts, "stage": b.stage, "dev": b.dev, "sector": b.sector,
                    "nr_sector": b.nr_sector, "rwbs": b.rwbs, "tid": b.tid, "pid": b.pid,
                    "comm": b.comm, "error": b.error})

    def device(self, d: Device) -> None:
        self._line({"type": "device", "dev": d.dev, "name": d.name, "disk": d.disk,
                    "start_sector": d.start_sector})

    def file(self, m: FileMap) -> None:
        line = {"type": "file", "dev": m.dev, "ino": m.ino, "path": m.path,
                "extents": [[e.logical, e.physical, e.length, e.flags] for e in m.extents]}
        if m.error:
            line["error"] = m.error
        self._line(line)

    def end(self, *, lost: int, dropped_syscalls: int, duration_ns: int) -> None:
        self._line({"type": "end", "records": self.records, "lost": lost,
                    "dropped_syscalls": dropped_syscalls, "duration_ns": duration_ns})

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --- reading --------------------------------------------------------------------------

def _int(obj: dict, key: str) -> int:
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"'{key}' is not an integer")
    return value


def _str(obj: dict, key: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        raise ValueError(f"'{key}' is not a string")
    return value


def _parse_sys(o: dict) -> Syscall:
    call = _str(o, "call")
    if call not in SYSCALLS:
        raise ValueError(f"unknown syscall '{call}'")
    return Syscall(enter=_int(o, "enter"), exit=_int(o, "exit"), tid=_int(o, "tid"), pid=_int(o, "pid"),
                   comm=_str(o, "comm"), call=call, fd=_int(o, "fd"), dev=_str(o, "dev"),
                   ino=_int(o, "ino"), offset=_int(o, "offset"), count=_int(o, "count"),
                   ret=_int(o, "ret"), direct=bool(o["direct"]), file_type=_str(o, "file_type"),
                   gen=int(o.get("gen", 0)))


def _parse_blk(o: dict) -> BlockEvent:
    stage = _str(o, "stage")
    if stage not in STAGES:
        raise ValueError(f"unknown block stage '{stage}'")
    return BlockEvent(ts=_int(o, "ts"), stage=stage, dev=_str(o, "dev"), sector=_int(o, "sector"),
                      nr_sector=_int(o, "nr_sector"), rwbs=_str(o, "rwbs"), tid=_int(o, "tid"),
                      pid=_int(o, "pid"), comm=_str(o, "comm"), error=_int(o, "error"))


def _parse_file(o: dict) -> FileMap:
    extents = []
    for e in o["extents"]:
        if not (isinstance(e, list) and len(e) == 4 and all(isinstance(v, int) for v in e)):
            raise ValueError("an extent is not [logical, physical, length, flags]")
        extents.append(Extent(*e))
    return FileMap(dev=_str(o, "dev"), ino=_int(o, "ino"), path=o.get("path"), extents=extents,
                   error=o.get("error"))


def _parse_device(o: dict) -> Device:
    return Device(dev=_str(o, "dev"), name=_str(o, "name"), disk=_str(o, "disk"),
                  start_sector=_int(o, "start_sector"))


def _check_header(path: str, header) -> dict:
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("type") != "header":
        raise RecordFileError(f"{path} is not an iotrace record file (no '{FORMAT}' header)",
                              hint="record one with `ebpfkit iotrace record -o FILE`")
    version = header.get("version")
    if not isinstance(version, int) or version < 1:
        raise RecordFileError(f"{path}: the header has no valid version")
    if version > VERSION:
        raise RecordFileError(f"{path} is format version {version}; this ebpfkit reads up to {VERSION}",
                              hint="upgrade ebpfkit to read it")
    for key in ("host", "started_ns"):
        if key not in header:
            raise RecordFileError(f"{path}: the header lacks '{key}'")
    return header


def read_recording(path: str, allow_truncated: bool = False) -> Recording:
    """Parse a record file; RecordFileError (with the line number) if it is not one, is
    corrupt, or (unless ``allow_truncated``) lacks its end line."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise RecordFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        rec: Recording | None = None
        lineno = 0
        parsers = {"sys": _parse_sys, "blk": _parse_blk}
        try:
            for lineno, raw in enumerate(f, 1):
                try:
                    obj = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    if not raw.endswith(b"\n") and rec is not None:
                        break  # the last line was cut in the middle: truncated (no end line)
                    if rec is None:
                        raise RecordFileError(f"{path} is not an iotrace record file (line 1 is not JSON)",
                                              hint="record one with `ebpfkit iotrace record -o FILE`") from None
                    raise RecordFileError(f"{path}: line {lineno} is corrupt (not JSON)") from None
                if rec is None:
                    rec = Recording(path, _check_header(path, obj))
                    continue
                if rec.end is not None:
                    raise RecordFileError(f"{path}: line {lineno} follows the end record")
                if not isinstance(obj, dict):
                    raise RecordFileError(f"{path}: line {lineno} is not a JSON object")
                kind = obj.get("type")
                try:
                    if kind in parsers:
                        (rec.syscalls if kind == "sys" else rec.block).append(parsers[kind](obj))
                    elif kind == "file":
                        m = _parse_file(obj)
                        rec.files[(m.dev, m.ino)] = m
                    elif kind == "device":
                        d = _parse_device(obj)
                        rec.devices[d.dev] = d
                    elif kind == "end":
                        rec.end = obj
                    # other types: written by a later minor revision; skipping them is safe
                except KeyError as exc:
                    raise RecordFileError(f"{path}: line {lineno} ({kind} record) lacks {exc}") from None
                except (ValueError, TypeError) as exc:
                    raise RecordFileError(f"{path}: line {lineno} ({kind} record) is invalid: {exc}") from None
        except OSError as exc:  # e.g. EISDIR
            raise RecordFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if rec is None:
        raise RecordFileError(f"{path} is empty, not an iotrace record file")
    if rec.end is None and not allow_truncated:
        raise RecordFileError(f"{path} is truncated: it has no end record (the recorder was killed, "
                              f"or the disk filled up)",
                              hint="`ebpfkit iotrace report --partial` reports what it holds")
    return rec
