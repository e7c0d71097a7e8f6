"""iofsstat: which processes read and write which files, next to how busy each disk is.

Three views per interval, printed together so a busy disk can be related to the processes
behind it:
  - disks: iostat's r/w IOPS, bytes/s, await and util% from /proc/diskstats deltas;
  - disk IO by process: block IO as it is queued (block_bio_queue), per process and device;
  - file IO by process: read/write calls and bytes per (process, file), with the file's full
    path (built in BPF) and the container the process runs in.
Counting happens in BPF maps that are emptied once per interval.
"""

from __future__ import annotations

import os
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from ...output import MAX_TABLE_WIDTH, Column, Output, ResultTable, tool_options
from ..common import disk_option, interval_arguments, intervals, pid_option

if TYPE_CHECKING:
    from ...sysinfo.devices import Disk

EXAMPLES = """\b
Examples:
  ebpfkit iofsstat 1 5                  every second, five times
  ebpfkit iofsstat -p 185 2             only PID 185, every 2 seconds
  ebpfkit iofsstat --disk sda 1         files on sda (and its partitions), and sda's stats
  ebpfkit iofsstat --container 3f2a 1   only processes of the container whose id starts 3f2a
  ebpfkit iofsstat --sort w_bps -n 5 1  the five biggest writers
  ebpfkit --format json iofsstat 1 1    one JSON object per interval
  ebpfkit -v iofsstat 1 1               also say which hook counts file IO
"""

# How file IO is counted, best first: (feature probe, label, programs). Block IO is always
# counted from the block_bio_queue tracepoint.
_FEXIT = ("fexit", "fexit vfs_read/vfs_write", ("iofs_vfs_read", "iofs_vfs_write"))
_SYSCALLS = ("tracepoint", "syscall exit tracepoints (read/write/pread64/pwrite64/readv/writev)",
             ("iofs_exit_read", "iofs_exit_pread64", "iofs_exit_readv",
              "iofs_exit_write", "iofs_exit_pwrite64", "iofs_exit_writev"))
_HOOKS = {"fexit": _FEXIT, "tracepoint": _SYSCALLS}
# With fexit, the IO that does not pass through vfs_read/vfs_write, each hooked only where the
# kernel's BTF has its target: (what it counts, BTF names needed, programs, else programs).
# Without vfs_readv/vfs_writev the vector calls fall back to their syscall tracepoints.
_FEXIT_EXTRAS = (
    ("readv/writev", ("vfs_readv", "vfs_writev"), ("iofs_vfs_readv", "iofs_vfs_writev"),
     ("iofs_exit_readv", "iofs_exit_writev")),
    ("sendfile/copy_file_range", ("do_splice_direct",), ("iofs_splice_direct",), ()),
    ("splice from a file", ("splice_file_to_pipe",), ("iofs_splice_to_pipe",), ()),
    ("io_uring", ("btf_trace_io_uring_complete", "io_kiocb", "io_cqe"), ("iofs_uring_complete",), ()),
)
_BLOCK_PROGRAMS = ("iofs_bio_queue",)

_PATH_STATES = {0: "complete", 1: "truncated", 2: "detached"}
_PATH_CACHE_SIZE = 65536

# Row keys per view (what JSON/CSV carry, and what --sort accepts).
DISK_KEYS = ("disk", "r_iops", "w_iops", "r_bps", "w_bps", "await", "r_await", "w_await", "util",
             "reads", "writes", "read_bytes", "write_bytes")
BIO_KEYS = ("comm", "pid", "disk", "reads", "r_bps", "writes", "w_bps", "read_bytes",
            "write_bytes", "container")
FILE_KEYS = ("comm", "pid", "reads", "r_bps", "writes", "w_bps", "inode", "device", "path",
             "container", "read_bytes", "write_bytes", "dev")
SORT_KEYS = tuple(dict.fromkeys(FILE_KEYS + BIO_KEYS + DISK_KEYS))


@dataclass
class Interval:
    """One interval's three views, as lists of row dicts."""

    seconds: float
    disks: list[dict] = field(default_factory=list)
    disk_processes: list[dict] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)


class IofsStat:
    """A tracing session: ``start()``, then ``collect()`` once per interval, then ``close()``
    (or use it as a context manager). The command below is a thin shell around it."""

    def __init__(self, pid: int | None = None, container: str | None = None,
                 disk: str | Disk | None = None, hook: str = "auto"):
        from ...sysinfo.containers import CgroupPaths
        from ...sysinfo.devices import resolve_disk

        self.pid, self.container = pid, container
        # a name ("sda", "/dev/sda", "sda1") or an already resolved Disk; unknown: exit 2
        self.disk = resolve_disk(disk) if isinstance(disk, str) else disk
        self.hook_choice = hook
        self.hook = self.hook_label = None  # "fexit" or "tracepoint", and what it covers
        self.cgroups = CgroupPaths()
        self._obj = None
        self._paths: OrderedDict[tuple[int, int], str] = OrderedDict()  # complete paths
        self._partial: dict[tuple[int, int], str] = {}  # this interval's incomplete ones
        self._dev_names: dict[tuple[int, int], str] = {}
        self._allowed_cgroups: set[int] = set()
        self._disk_before = None
        self._when = 0.0

    # --- lifetime ---

    def start(self) -> "IofsStat":
        from ...engine import compile as compile_bpf
        from ...sysinfo.diskstats import read_diskstats

        self.hook, self.hook_label, programs = self._choose_hook()
        spec = compile_bpf(os.path.join(os.path.dirname(__file__), "iofsstat.bpf.c"))
        wanted = set(programs) | set(_BLOCK_PROGRAMS)
        for name, prog in spec.programs.items():
            prog.autoload = name in wanted
        spec.rodata.update({"targ_tgid": self.pid or 0, "targ_self": os.getpid(),
                            "targ_cgroup_filter": self.container is not None})
        self._obj = spec.load()
        try:
            self._update_cgroup_filter()
            self._obj.attach()
        except BaseException:
            self.close()
            raise
        self._disk_before = read_diskstats()
        self._when = time.monotonic()
        return self

    def _choose_hook(self):
        from ...engine import features

        if self.hook_choice != "auto":
            features.require(self.hook_choice)
            best = self.hook_choice
        else:
            best = features.best_hook([_FEXIT[0], _SYSCALLS[0]])
            if best is None:
                features.require(_SYSCALLS[0])  # raises, saying why tracepoints do not work
        return _with_extras(_HOOKS[best]) if best == _FEXIT[0] else _HOOKS[best]

    def close(self) -> None:
        if self._obj is not None:
            obj, self._obj = self._obj, None
            obj.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # --- one interval ---

    def collect(self) -> Interval:
        """Empty the maps and /proc/diskstats deltas into one interval's rows."""
        from ...sysinfo.diskstats import read_diskstats

        # stats before paths: every file counted has its path in the map or already cached
        stats = self._obj.maps["stats"].pop_all()
        bios = self._obj.maps["bio_stats"].pop_all()
        self._partial = {}
        for key, path in self._obj.maps["paths"].pop_all():
            self._remember_path(key, path)
        disks_now, now = read_diskstats(), time.monotonic()
        seconds = max(now - self._when, 1e-6)
        interval = Interval(seconds)
        interval.disks = self._disk_rows(self._disk_before, disks_now, seconds)
        interval.disk_processes = self._bio_rows(bios, seconds)
        interval.files = self._file_rows(stats, seconds)
        self._disk_before, self._when = disks_now, now
        self.cgroups.refresh()
        if self.container is not None:
            self._update_cgroup_filter()  # containers may have made new child cgroups
        return interval

    def _update_cgroup_filter(self) -> None:
        if self.container is None:
            return
        ids = self.cgroups.ids_of_container(self.container)
        allow = self._obj.maps["cgroup_allow"]
        for cid in ids - self._allowed_cgroups:
            allow[cid] = 1
        self._allowed_cgroups |= ids

    # --- paths ---

    def _remember_path(self, key, value) -> None:
        path, complete = decode_path(bytes(value.names[:value.len]), value.state)
        file = (key.dev, key.ino)
        if not complete:
            self._partial[file] = path  # shown only if /proc does not know better
            return
        self._paths[file] = path
        self._paths.move_to_end(file)
        if len(self._paths) > _PATH_CACHE_SIZE:
            self._paths.popitem(last=False)

    def _path(self, tgid: int, dev: int, ino: int, proc_cache: dict) -> str:
        from ...sysinfo.devices import decode_kernel_dev
        from ...sysinfo.files import fd_paths

        path = self._paths.get((dev, ino))
        if path is None:
            if tgid not in proc_cache:
                proc_cache[tgid] = fd_paths(tgid)
            path = proc_cache[tgid].get((*decode_kernel_dev(dev), ino)) or self._partial.get((dev, ino))
        return path or "-"  # closed and gone before we looked, as the source tool shows it

    # --- rows ---

    def _disk_rows(self, before, after, seconds) -> list[dict]:
        from ...sysinfo.devices import whole_disks
        from ...sysinfo.diskstats import disk_rates

        names = [self.disk.name] if self.disk else sorted(whole_disks())
        rows = []
        for name in names:
            if name not in after:
                continue
            rates = disk_rates(before.get(name, after[name]), after[name], seconds)
            if not self.disk and not rates.active:
                continue  # like iostat -z: idle disks would drown the busy ones
            rows.append({"disk": name, "r_iops": round(rates.r_iops, 2), "w_iops": round(rates.w_iops, 2),
                         "r_bps": round(rates.r_bps, 2), "w_bps": round(rates.w_bps, 2),
                         "await": round(rates.await_ms, 3), "r_await": round(rates.r_await, 3),
                         "w_await": round(rates.w_await, 3), "util": round(rates.util, 2),
                         "reads": rates.reads, "writes": rates.writes,
                         "read_bytes": rates.read_bytes, "write_bytes": rates.write_bytes})
        return rows

    def _bio_rows(self, entries, seconds) -> list[dict]:
        from ...sysinfo.devices import decode_kernel_dev

        rows = []
        for key, st in entries:
            dev = decode_kernel_dev(key.dev)
            if self.disk and dev not in self.disk.block_devs:
                continue
            rows.append({"comm": st.comm, "pid": key.tgid, "disk": self._dev_name(dev),
                         "reads": st.reads, "r_bps": _rate(st.read_bytes, seconds),
                         "writes": st.writes, "w_bps": _rate(st.write_bytes, seconds),
                         "read_bytes": st.read_bytes, "write_bytes": st.write_bytes,
                         "container": self._container(st.cgroup_id)})
        return rows

    def _file_rows(self, entries, seconds) -> list[dict]:
        from ...sysinfo.devices import decode_kernel_dev, dev_str

        rows, proc_cache = [], {}
        for key, st in entries:
            dev = decode_kernel_dev(key.file.dev)
            if self.disk and dev not in self.disk.file_devs:
                continue
            rows.append({"comm": st.comm, "pid": key.tgid,
                         "reads": st.reads, "r_bps": _rate(st.read_bytes, seconds),
                         "writes": st.writes, "w_bps": _rate(st.write_bytes, seconds),
                         "inode": key.file.ino, "device": self._dev_name(dev),
                         "path": self._path(key.tgid, key.file.dev, key.file.ino, proc_cache),
                         "container": self._container(st.cgroup_id),
                         "read_bytes": st.read_bytes, "write_bytes": st.write_bytes,
                         "dev": dev_str(dev)})
        return rows

    def _dev_name(self, dev: tuple[int, int]) -> str:
        from ...sysinfo.devices import device_name

        if dev not in self._dev_names:
            self._dev_names[dev] = device_name(dev)
        return self._dev_names[dev]

    def _container(self, cgroup_id: int) -> str | None:
        container = self.cgroups.container(cgroup_id)
        return container.short_id if container else None


def _with_extras(hook):
    """The fexit hook with the extra programs this kernel can take, and a label saying what
    each covers (or, when its target is missing, that it is not counted)."""
    from ...engine import features

    name, label, programs = hook
    have = features.kernel_btf_names({n for _, names, _, _ in _FEXIT_EXTRAS for n in names})
    programs, covered, missing = list(programs), [], []
    for what, names, progs, fallback in _FEXIT_EXTRAS:
        if set(names) <= have:
            programs += progs
            covered.append(what)
        elif fallback:
            programs += fallback
            covered.append(f"{what} by syscall tracepoints")
        else:
            missing.append(what)
    label += f" (+ {', '.join(covered)})" if covered else ""
    label += f"; not counted: {', '.join(missing)} (no BTF for their kernel functions)" if missing else ""
    return name, label, tuple(programs)


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 2)


def decode_path(names: bytes, state: int) -> tuple[str, bool]:
    """The path from BPF's leaf-first names ("c\\0b\\0a\\0" -> "/a/b/c") and whether the walk
    reached the root; a walk that stopped early gives "…/b/c"."""
    parts = names.split(b"\0")[:-1] if names else []
    path = "/" + "/".join(p.decode("utf-8", "surrogateescape") for p in reversed(parts))
    complete = _PATH_STATES.get(state) == "complete"
    return (path, True) if complete else ("…" + path, False)


# --- sorting and printing ----------------------------------------------------------------

def sort_rows(rows: list[dict], key: str | None, default, top: int | None) -> list[dict]:
    """Rows by ``key`` (numbers largest first, text A-Z) if they have it, else by ``default``
    (largest first); then the first ``top``."""
    if key and rows and key in rows[0]:
        numeric = all(isinstance(r[key], (int, float)) or r[key] is None for r in rows)
        if numeric:
            rows = sorted(rows, key=lambda r: r[key] or 0, reverse=True)
        else:
            rows = sorted(rows, key=lambda r: str(r[key] or ""))
    elif default is not None:
        rows = sorted(rows, key=default, reverse=True)
    return rows[:top] if top else rows


def _bytes_total(row) -> int:
    return row["read_bytes"] + row["write_bytes"]


def human_rate(value: float) -> str:
    """Bytes per second, short: 512, 1.5K, 20.0M, 1.2G."""
    for unit in ("", "K", "M", "G"):
        if abs(value) < 1024 or unit == "G":
            return f"{value:.0f}" if not unit else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}G"


def _tail(width: int):
    """Shorten text from the left (a path's file name is what matters)."""
    def fmt(value) -> str:
        text = "-" if value is None else str(value)
        return text if len(text) <= width else "…" + text[-(width - 1):]
    return fmt


def file_label(row: dict) -> str:
    """The path, with the source tool's container suffix."""
    if row.get("container"):
        return f"{row['path']} [containerId:{row['container']}]"
    return row["path"]


def display_tables(interval: Interval, width: int = MAX_TABLE_WIDTH) -> list[ResultTable]:
    """The three views as tables of at most ``width`` columns (the narrow set of fields)."""
    rate = human_rate
    disks = ResultTable([Column("DISK", key="disk"), Column("R_IOPS", key="r_iops", format=".1f"),
                         Column("W_IOPS", key="w_iops", format=".1f"),
                         Column("R_BPS", key="r_bps", format=rate),
                         Column("W_BPS", key="w_bps", format=rate),
                         Column("AWAIT", key="await", format=".2f"),
                         Column("R_AWAIT", key="r_await", format=".2f"),
                         Column("W_AWAIT", key="w_await", format=".2f"),
                         Column("UTIL%", key="util", format=".1f")],
                        interval.disks, title="Disks (await in ms)", data_keys=DISK_KEYS)
    bios = ResultTable([Column("COMM", key="comm", max_width=16), Column("PID", key="pid"),
                        Column("DISK", key="disk"), Column("READS", key="reads"),
                        Column("R_BPS", key="r_bps", format=rate), Column("WRITES", key="writes"),
                        Column("W_BPS", key="w_bps", format=rate),
                        Column("CONTAINER", key="container")],
                       interval.disk_processes, title="Disk IO by process", data_keys=BIO_KEYS)
    columns = [Column("COMM", key="comm", max_width=16), Column("PID", key="pid"),
               Column("READS", key="reads"), Column("R_BPS", key="r_bps", format=rate),
               Column("WRITES", key="writes"), Column("W_BPS", key="w_bps", format=rate),
               Column("INODE", key="inode"), Column("DEVICE", key="device")]
    rows = [dict(r, label=file_label(r)) for r in interval.files]
    # the file column gets what the others leave; cut there from the left, not by rich at the end
    room = min(width, MAX_TABLE_WIDTH) - sum(_width(c, rows) + 2 for c in columns)
    columns.append(Column("FILE", key="label", format=_tail(max(room, 12))))
    files = ResultTable(columns, rows, title="File IO by process", data_keys=FILE_KEYS)
    return [disks, bios, files]


def _width(column: Column, rows: list[dict]) -> int:
    from ...output.values import cell_text

    widest = max((len(cell_text(r.get(column.key), column.format)) for r in rows), default=0)
    return min(max(widest, len(column.name)), column.max_width or 1 << 16)


def show(out: Output, interval: Interval) -> None:
    """Print one interval: table format as one frame (one live redraw), JSON as one object
    (the one --log keeps), CSV as three tables with every field (each with its header line)."""
    from ...output.values import iso_time, now

    out.document({"time": iso_time(now()), "interval": round(interval.seconds, 6),
                  "disks": interval.disks, "disk_processes": interval.disk_processes,
                  "files": interval.files}, display_tables(interval, out.console.width))


# --- the command -----------------------------------------------------------------------------

def _check_container(ctx, param, value):
    from ...sysinfo.containers import CgroupPaths

    if value is None:
        return None
    if not re.fullmatch(r"[0-9a-fA-F]{1,64}", value):
        raise click.BadParameter(f"{value!r} is no container id (hex digits, e.g. the 12 of "
                                 "`docker ps`)", ctx=ctx, param=param)
    if not CgroupPaths().ids_of_container(value):
        raise click.BadParameter(f"no running container's cgroup has an id starting {value!r}",
                                 ctx=ctx, param=param)
    return value.lower()


@click.command(epilog=EXAMPLES)
@pid_option
@click.option("--container", metavar="ID", callback=_check_container,
              help="Only processes of this container (its id, or the start of it).")
@disk_option("Only this disk (e.g. sda, nvme0n1, loop0) and files on it or its partitions, "
             "or one partition (sda1).")
@click.option("--sort", "sort_key", type=click.Choice(SORT_KEYS), metavar="COLUMN",
              help=f"Sort every view that has COLUMN by it (one of: {', '.join(SORT_KEYS)}); "
                   "default: most bytes first.")
@click.option("-n", "--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="Show at most N rows per process view.")
@click.option("--hook", type=click.Choice(["auto", "fexit", "tracepoint"]), default="auto",
              show_default=True, help="How to count file IO (auto: the best this kernel has).")
@tool_options
@interval_arguments
def iofsstat(pid, container, disk, sort_key, top, hook, interval, count):
    """File IO per process and file (with full paths and containers) next to disk IO."""
    out = Output.from_context()
    with IofsStat(pid=pid, container=container, disk=disk, hook=hook) as session:
        out.info("file IO hook: %s", session.hook_label)
        out.banner("Tracing file and disk IO... Hit Ctrl-C to end.")
        with out.live():
            for _ in intervals(interval, count):
                result = session.collect()
                result.disks = sort_rows(result.disks, sort_key, None, None)
                result.disk_processes = sort_rows(result.disk_processes, sort_key, _bytes_total, top)
                result.files = sort_rows(result.files, sort_key, _bytes_total, top)
                show(out, result)
