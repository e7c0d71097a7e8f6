"""iofsstat's session: load iofsstat.bpf.c, attach it, and hand out, once per interval, which
processes read and wrote which files and how busy each disk was. No click, no printing, no
formats: the CLI, the exporter and a notebook read it alike::

    from ebpfkit.tools import iofsstat
    with iofsstat.open(pid=os.getpid()) as session:
        ...                                  # do some IO
        interval = session.sample()          # Interval: disks, disk_processes, files
        for row in interval.files:
            print(row["path"], row["write_bytes"])

Three views per interval, so a busy disk can be related to the processes behind it:
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

from ...errors import ConfigError
from ..config import ToolConfig, check_disk, check_pid
from ..session import ToolSession

HOOK_CHOICES = ("auto", "fexit", "tracepoint")


@dataclass(frozen=True)
class Config(ToolConfig):
    pid: int | None = None        # only this process (thread group)
    container: str | None = None  # only processes of this container (its id, or the start of it)
    disk: str | None = None       # only this disk, and files on it or its partitions
    hook: str = "auto"            # how to count file IO: auto (the best here), fexit, tracepoint

    def validate(self) -> None:
        check_pid("pid", self.pid)
        _check_container("container", self.container)
        check_disk("disk", self.disk)
        if self.hook not in HOOK_CHOICES:
            raise ConfigError("hook", f"{self.hook!r} is not one of {', '.join(HOOK_CHOICES)}")


def _check_container(name: str, container: str | None) -> None:
    from ...sysinfo.containers import CgroupPaths

    if container is None:
        return
    if not re.fullmatch(r"[0-9a-fA-F]{1,64}", container):
        raise ConfigError(name, f"{container!r} is no container id (hex digits, e.g. the 12 of `docker ps`)")
    if not CgroupPaths().ids_of_container(container):
        raise ConfigError(name, f"no running container's cgroup has an id starting {container!r}")


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

@dataclass
class Interval:
    """One interval's three views, as lists of row dicts."""

    seconds: float
    disks: list[dict] = field(default_factory=list)
    disk_processes: list[dict] = field(default_factory=list)
    files: list[dict] = field(default_factory=list)


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``); ``sample()`` once per
    interval. ``hook`` is "fexit" or "tracepoint", ``hook_label`` what it covers."""

    def __init__(self, config: Config):
        from ...sysinfo.containers import CgroupPaths

        self.config = config
        self.pid, self.container = config.pid, config.container
        self.disk = check_disk("disk", config.disk)  # a sysinfo.devices.Disk, or None
        self.cgroups = CgroupPaths()
        self._obj = None
        self._paths: OrderedDict[tuple[int, int], str] = OrderedDict()  # complete paths
        self._partial: dict[tuple[int, int], str] = {}  # this interval's incomplete ones
        self._dev_names: dict[tuple[int, int], str] = {}
        self._allowed_cgroups: set[int] = set()
        self._disk_before = None
        self._when = 0.0

        self._start()

    # --- lifetime ---

    def _start(self) -> None:
        from ...engine import compile as compile_bpf
        from ...sysinfo.diskstats import read_diskstats

        self.hook, self.hook_label, programs = self._choose_hook()
        spec = compile_bpf(os.path.join(os.path.dirname(__file__), "iofsstat.bpf.c"))
        wanted = set(programs) | set(_BLOCK_PROGRAMS)
        for name, prog in spec.programs.items():
            prog.autoload = name in wanted
        # the tool's own IO is never counted, unless its PID is the one asked for (a notebook's)
        own = 0 if self.pid == os.getpid() else os.getpid()
        spec.rodata.update({"targ_tgid": self.pid or 0, "targ_self": own,
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

    def _choose_hook(self):
        from ...engine import features

        # every program walks a file's path with bpf_loop (5.17): before it, exit 3 saying so
        features.require("bpf_loop")
        if self.config.hook != "auto":
            features.require(self.config.hook)
            best = self.config.hook
        else:
            best = features.best_hook([_FEXIT[0], _SYSCALLS[0]])
            if best is None:
                features.require(_SYSCALLS[0])  # raises, saying why tracepoints do not work
        return _with_extras(_HOOKS[best]) if best == _FEXIT[0] else _HOOKS[best]

    def program_ids(self) -> dict[str, int]:
        """{name: id} of its BPF programs (what the exporter reports run time of)."""
        return self._obj.program_ids() if self._obj is not None else {}

    def close(self) -> None:
        if self._obj is not None:
            obj, self._obj = self._obj, None
            obj.close()


    # --- one interval ---

    def sample(self) -> Interval:
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
                         "container": self._container(st.cgroup_id), "cgroup_id": st.cgroup_id})
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
                         "dev": dev_str(dev), "cgroup_id": st.cgroup_id})
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


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
