"""iotrace's sessions, in the source's two steps. No click, no printing, no formats: the CLI,
the exporter and a notebook use them alike::

    from ebpfkit.tools import iotrace
    with iotrace.open(record_file="io.iot", duration=5, disk="loop0") as session:
        summary = session.record()          # RecordSummary: syscalls, block events, lost
    result = iotrace.report(record_file="io.iot", top=20)
    result.stages, result.slowest           # the per-layer breakdown, the slowest requests

Recording timestamps each IO at every layer it passes (read/write syscalls, then the block
layer's queue, insert, issue and complete) into a versioned file that also carries the host
identity and the files' extent maps (docs/iotrace-format.md). The report joins the records
into per-request lifecycles and says where the time went.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import ConfigError
from ..config import ToolConfig, check_disk, check_pid, check_positive
from ..session import ToolSession

if TYPE_CHECKING:
    from .fileformat import Recording

PROGRAM = os.path.join(os.path.dirname(__file__), "iotrace.bpf.c")
_KIND_STAGE = {2: "queue", 3: "insert", 4: "issue", 5: "complete"}  # iotrace.h IOTRACE_*
_SYSCALLS = {1: "read", 2: "write", 3: "pread64", 4: "pwrite64", 5: "readv", 6: "writev",
             7: "preadv", 8: "pwritev", 9: "preadv2", 10: "pwritev2"}
_S_IFMT, _S_IFREG = 0o170000, 0o100000
_MAX_FS_DEVS = 16  # iotrace.bpf.c targ_fsdevs


# --- record ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Config(ToolConfig):
    record_file: str               # the record file to write
    duration: float | None = None  # seconds to record (default: until stopped)
    pid: int | None = None         # only this process (thread group)
    disk: str | None = None        # only this disk (and its partitions), or one partition

    def validate(self) -> None:
        check_positive("duration", self.duration)
        check_pid("pid", self.pid)
        check_disk("disk", self.disk)


@dataclass(frozen=True)
class RecordSummary:
    """What a recording wrote (the order is the CSV's)."""

    file: str
    syscalls: int
    block_events: int
    files_mapped: int      # files whose extents (the layer mapping table) were written
    files: int
    lost: int              # records the ring buffer had no room for
    dropped_syscalls: int  # syscalls not recorded: too many in flight at once


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``); ``record()`` writes
    the file. The file is created only once the programs run: a failed load leaves none."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf
        from ...sysinfo.devices import encode_kernel_dev
        from .fiemap import FileTracker

        self.config = config
        self._tracker = FileTracker()
        self._writer = None
        self._devs: set[str] = set()
        self._counts = {"syscalls": 0, "block_events": 0}
        self._o_direct = getattr(os, "O_DIRECT", 0)
        spec = compile_bpf(PROGRAM)
        self._disk = target = check_disk("disk", config.disk)
        # the BPF side compares kernel dev_ts: the disk's, and up to _MAX_FS_DEVS filesystems'
        fs_devs = [encode_kernel_dev(*d) for d in target.file_devs[:_MAX_FS_DEVS]] if target else []
        spec.rodata.update({"targ_tgid": config.pid or 0, "self_tgid": os.getpid(),
                            "targ_disk": encode_kernel_dev(*target.disk) if target else 0,
                            "targ_ndevs": len(fs_devs),
                            "targ_fsdevs": fs_devs + [0] * (_MAX_FS_DEVS - len(fs_devs))})
        self._obj = spec.load()
        try:
            self._obj.attach()
            self._reader = self._obj.ring_buffer("events", self._on_event, event_type="iotrace_event")
        except BaseException:
            self.close()
            raise

    def record(self, stopped=lambda: False, started=lambda: None) -> RecordSummary:
        """Write the file until the configured duration is over or ``stopped()`` is true (it is
        asked every 100 ms); ``started()`` is called once the file is open. Then stop the
        programs, take what they wrote, add the layer mapping table and end the file."""
        began = time.monotonic_ns()
        self._open_file()
        started()
        duration = self.config.duration
        deadline = time.monotonic() + duration if duration else None
        while not stopped() and (deadline is None or time.monotonic() < deadline):
            wait = 100 if deadline is None else max(0, min(100, int((deadline - time.monotonic()) * 1000)))
            self._reader.poll(wait)  # a signal interrupts the wait
        return self._finish(began)

    def _open_file(self) -> None:
        from ..._version import __version__
        from .fileformat import RecordWriter

        path = self.config.record_file
        try:
            self._writer = RecordWriter(path)
        except OSError as exc:
            raise ConfigError("record_file", f"cannot write {path}: {exc.strerror}") from None
        self._writer.header(filters={"pid": self.config.pid, "disk": self._disk.name if self._disk else None},
                            tool=f"ebpfkit {__version__}")

    def _finish(self, began: int) -> RecordSummary:
        from .devices import device_info

        for link in self._obj.links:  # stop the programs, then take what they wrote
            link.close()
        while self._reader.poll(0):
            pass
        lost, dropped = self._reader.lost or 0, int(self._obj.bss["dropped_syscalls"])
        # the layer mapping table, now that the files' blocks are allocated
        files = self._tracker.finish()
        for dev in sorted(self._devs):
            info = device_info(dev)
            if info is not None:
                self._writer.device(info)
        for m in files:
            self._writer.file(m)
        self._writer.end(lost=lost, dropped_syscalls=dropped, duration_ns=time.monotonic_ns() - began)
        return RecordSummary(self.config.record_file, self._counts["syscalls"], self._counts["block_events"],
                             sum(1 for m in files if m.extents), len(files), lost, dropped)

    def _on_event(self, ev) -> None:
        from ...sysinfo.devices import decode_kernel_dev, dev_str
        from .fileformat import BlockEvent, Syscall

        dev = dev_str(decode_kernel_dev(ev.dev))
        if ev.kind == 1:
            regular = ev.mode & _S_IFMT == _S_IFREG
            s = Syscall(ev.ts_enter, ev.ts, ev.tid, ev.tgid, ev.comm, _SYSCALLS.get(ev.syscall, "read"), ev.fd,
                        dev, ev.ino, ev.offset, ev.count, ev.ret, bool(ev.flags & self._o_direct),
                        "reg" if regular else "blk", ev.gen)
            self._writer.syscall(s)
            self._counts["syscalls"] += 1
            if regular:
                self._tracker.see(ev.tgid, ev.fd, dev, ev.ino, ev.gen)
        else:
            self._writer.block(BlockEvent(ev.ts, _KIND_STAGE[ev.kind], dev, ev.sector, ev.nr_sector, ev.rwbs,
                                          ev.tid, ev.tgid, ev.comm, ev.error))
            self._counts["block_events"] += 1
        self._devs.add(dev)

    def close(self) -> None:
        """Detach and unload; a file not ended by ``record()`` stays as written (truncated)."""
        obj, self._obj = self._obj, None
        try:
            if obj is not None:
                obj.close()
        finally:
            self._tracker.close()
            if self._writer is not None:
                self._writer.close()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Load and attach the recorder for ``config``, or a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))


# --- report ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportConfig(ToolConfig):
    record_file: str       # the record file to read
    top: int = 10          # the N slowest requests (0: all)
    partial: bool = False  # report a truncated file (one without its end record)

    def validate(self) -> None:
        if self.top < 0:
            raise ConfigError("top", f"must be 0 or more, got {self.top}")
        if os.path.isdir(self.record_file):
            raise ConfigError("record_file", f"{self.record_file} is a directory")


@dataclass
class Report:
    """A recording joined into per-request lifecycles: its totals (``summary``), the per-layer
    latency breakdown (``stages``), the ``slowest`` requests and the ``processes``."""

    recording: Recording
    summary: dict
    stages: list[dict]
    slowest: list[dict]
    processes: list[dict]


def report(config: ReportConfig | None = None, **settings) -> Report:
    """Read and join ``config.record_file``; a file that is not a (complete) record is a
    ConfigError naming it."""
    from . import stats
    from .fileformat import RecordFileError, read_recording
    from .join import join

    config = ReportConfig.given(config, **settings)
    try:
        rec = read_recording(config.record_file, allow_truncated=config.partial)
    except RecordFileError as exc:
        raise ConfigError("record_file", str(exc) + (f" ({exc.hint})" if exc.hint else "")) from None
    result = join(rec)
    return Report(rec, _summary(rec, result), stats.breakdown(result),
                  [stats.lifecycle_dict(lc, rec.files) for lc in stats.slowest(result, config.top or None)],
                  stats.per_process(result))


def _summary(rec, result) -> dict:
    syscalls = rec.syscalls
    direct = [lc for lc in result.lifecycles if lc.syscall is not None and lc.syscall.direct
              and lc.syscall.nbytes]
    end = rec.end or {}
    return {"duration_s": (end.get("duration_ns") or 0) / 1e9, "syscalls": len(syscalls),
            "syscall_bytes": sum(s.nbytes for s in syscalls),
            "block_requests": len(result.block.requests),
            "block_bytes": sum(r.bytes for r in result.block.requests),
            "joined_syscalls": len(result.joined),
            "direct_syscalls": len(direct), "direct_joined": sum(1 for lc in direct if lc.requests),
            "incomplete_requests": result.block.incomplete,
            "unmatched_bios": result.block.unmatched_bios,
            "lost": rec.lost, "dropped_syscalls": int(end.get("dropped_syscalls", 0) or 0),
            "truncated": rec.truncated, "unmapped": result.unmapped}
