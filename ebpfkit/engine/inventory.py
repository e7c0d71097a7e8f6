"""What BPF programs, links and maps the kernel holds now, system-wide, by id (what
``bpftool prog/link/map list`` shows): ids from BPF_*_GET_NEXT_ID, each object's info
from an fd opened by its id and closed at once.

    >>> [p.name for p in programs() if p.type == ProgType.XDP]
    ['xdp_filter']
    >>> link(7)
    LinkInfo(id=7, type=<LinkType.XDP: 6>, prog_id=42, attach_type=None, target='ifindex 3')

An object can go between its id and its fd (freeing is deferred): listings leave it out,
and ``program(id)``/``link(id)``/``map(id)`` say None. Listing needs CAP_SYS_ADMIN.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass, field

from ..errors import EbpfkitError, PermissionDeniedError
from . import _libbpf as L
from .constants import AttachType, LinkType, MapType, ProgType
from .pinned import fill_info

KINDS = ("prog", "link", "map")


@dataclass(frozen=True)
class ProgramInfo:
    id: int
    type: ProgType | int
    name: str
    tag: str  # hex of the kernel's 8-byte hash of the instructions (what bpftool shows)
    # time spent running, and runs: counted only while run-time statistics are on
    # (ebpfkit.engine.run_time_stats); live figures, so not part of what makes two infos equal
    run_time_ns: int = field(default=0, compare=False)
    run_cnt: int = field(default=0, compare=False)


@dataclass(frozen=True)
class LinkInfo:
    id: int
    type: LinkType | int
    prog_id: int
    attach_type: AttachType | int | None  # where the kernel reports one for the link's kind
    target: str  # what the program is attached to, e.g. "ifindex 3", "cgroup id 1234"
    places: int | None = None  # a uprobe_multi link's uprobes


@dataclass(frozen=True)
class MapInfo:
    id: int
    type: MapType | int
    name: str
    key_size: int
    value_size: int
    max_entries: int
    flags: int


# --- ids and fds ---------------------------------------------------------------------------

def _libbpf_call(kind: str, what: str):
    if kind not in KINDS:
        raise ValueError(f"no BPF object kind {kind!r}; known: {', '.join(KINDS)}")
    return getattr(L.lib, f"bpf_{kind}_{what}")


def ids(kind: str) -> list[int]:
    """Every id of ``kind`` ("prog", "link", "map") in the kernel, ascending; opens nothing."""
    next_id = _libbpf_call(kind, "get_next_id")
    found, cur = [], ctypes.c_uint32(0)
    while (err := next_id(cur.value, ctypes.byref(cur))) == 0:
        found.append(cur.value)
    if abs(err) in (errno.EPERM, errno.EACCES):
        raise PermissionDeniedError(f"listing BPF {kind}s needs privileges ({os.strerror(abs(err))})")
    return found


def open_by_id(kind: str, obj_id: int) -> int | None:
    """An fd of the ``kind`` object ``obj_id`` (the caller closes it), or None when it is gone."""
    fd = _libbpf_call(kind, "get_fd_by_id")(obj_id)
    if fd >= 0:
        return fd
    if -fd == errno.ENOENT:
        return None
    if -fd in (errno.EPERM, errno.EACCES):
        raise PermissionDeniedError(f"cannot open BPF {kind} {obj_id}: {os.strerror(-fd)}")
    raise EbpfkitError(f"cannot open BPF {kind} {obj_id}: {os.strerror(-fd)}")


# --- info from an fd -----------------------------------------------------------------------

def _enum(cls, value: int):
    try:
        return cls(value)
    except ValueError:  # newer than our constants
        return value


def program_info(fd: int) -> ProgramInfo:
    info = fill_info(fd, L.bpf_prog_info())
    return ProgramInfo(info.id, _enum(ProgType, info.type), info.name.decode(errors="replace"),
                       bytes(info.tag).hex(), info.run_time_ns, info.run_cnt)


def map_info(fd: int) -> MapInfo:
    info = fill_info(fd, L.bpf_map_info())
    return MapInfo(info.id, _enum(MapType, info.type), info.name.decode(errors="replace"), info.key_size,
                   info.value_size, info.max_entries, info.map_flags)


_UNION = L.bpf_link_info._union.offset
_NAME_MAX = 512
# link types whose info names their target in a string the caller gives room for:
# (offset of the pointer, of the length) inside the union of struct bpf_link_info
_NAMED = {LinkType.RAW_TRACEPOINT: (0, 8), LinkType.ITER: (0, 8), LinkType.PERF_EVENT: (8, 16)}
_PERF_EVENT_KINDS = {1: "uprobe", 2: "uretprobe", 3: "kprobe", 4: "kretprobe", 5: "tracepoint",
                     6: "perf event"}


def _named_union(fd: int, link_type: int) -> tuple[bytes, str] | None:
    """A named link's info union again, now with room for its name; None if the kernel
    would not write it (e.g. ENOSPC for a longer name)."""
    info, name = L.bpf_link_info(), ctypes.create_string_buffer(_NAME_MAX)
    ptr_at, len_at = _NAMED[link_type]
    base = ctypes.addressof(info) + _UNION
    ctypes.c_uint64.from_address(base + ptr_at).value = ctypes.addressof(name)
    ctypes.c_uint32.from_address(base + len_at).value = _NAME_MAX
    try:
        fill_info(fd, info)
    except EbpfkitError:
        return None
    return bytes(info._union), name.value.decode(errors="replace")


def _link_target(link_type: int, union: bytes, name: str) -> tuple[int | None, str]:
    """(attach type, target) from the union of struct bpf_link_info, by link type."""
    u32 = lambda at: struct.unpack_from("=I", union, at)[0]  # noqa: E731
    if link_type in (LinkType.RAW_TRACEPOINT, LinkType.ITER):
        return None, name
    if link_type == LinkType.TRACING:
        return u32(0), f"btf id {u32(8)} (btf object {u32(4)})"
    if link_type == LinkType.CGROUP:
        return u32(8), f"cgroup id {struct.unpack_from('=Q', union, 0)[0]}"
    if link_type == LinkType.NETNS:
        return u32(4), f"netns inode {u32(0)}"
    if link_type == LinkType.XDP:
        return None, f"ifindex {u32(0)}"
    if link_type in (LinkType.TCX, LinkType.NETKIT):
        return u32(4), f"ifindex {u32(0)}"
    if link_type == LinkType.SOCKMAP:
        return u32(4), f"map id {u32(0)}"
    if link_type == LinkType.STRUCT_OPS:
        return None, f"map id {u32(0)}"
    if link_type == LinkType.NETFILTER:
        pf, hook, priority = struct.unpack_from("=IIi", union, 0)
        return None, f"netfilter pf {pf} hook {hook} priority {priority}"
    if link_type == LinkType.PERF_EVENT:
        kind = _PERF_EVENT_KINDS.get(u32(0), "perf event")  # kernels < 6.6 report no kind
        return None, f"{kind} {name}".rstrip()
    if link_type == LinkType.UPROBE_MULTI:  # 4 pointers (left 0), path size, count, flags, pid
        count, flags, pid = u32(36), u32(40), u32(44)
        kind = "uretprobes" if flags & 1 else "uprobes"
        return None, f"{count} {kind}" + (f", pid {pid}" if pid else "")
    return None, ""


def link_info(fd: int) -> LinkInfo:
    head = fill_info(fd, L.bpf_link_info())
    named = _named_union(fd, head.type) if head.type in _NAMED else None
    union, name = named or (bytes(head._union), "")
    attach_type, target = _link_target(head.type, union, name)
    places = struct.unpack_from("=I", union, 36)[0] if head.type == LinkType.UPROBE_MULTI else None
    return LinkInfo(head.id, _enum(LinkType, head.type), head.prog_id,
                    None if attach_type is None else _enum(AttachType, attach_type), target, places)


# --- by id, and listings -------------------------------------------------------------------

_INFO = {"prog": program_info, "link": link_info, "map": map_info}


def _by_id(kind: str, obj_id: int):
    fd = open_by_id(kind, obj_id)
    if fd is None:
        return None
    try:
        return _INFO[kind](fd)
    finally:
        os.close(fd)


def program(prog_id: int) -> ProgramInfo | None:
    return _by_id("prog", prog_id)


def link(link_id: int) -> LinkInfo | None:
    return _by_id("link", link_id)


def map(map_id: int) -> MapInfo | None:  # noqa: A001 (the module's namespace: inventory.map)
    return _by_id("map", map_id)


def _listing(kind: str) -> list:
    found = []
    for obj_id in ids(kind):
        try:
            info = _by_id(kind, obj_id)
        except PermissionDeniedError:  # a policy (an LSM such as ebpfkit's guard) keeps it from us
            continue
        if info is not None:
            found.append(info)
    return found


def programs() -> list[ProgramInfo]:
    return _listing("prog")


def links() -> list[LinkInfo]:
    return _listing("link")


def maps() -> list[MapInfo]:
    return _listing("map")


_FD_KINDS = {"anon_inode:bpf-prog": "prog", "anon_inode:bpf_link": "link", "anon_inode:bpf-map": "map"}


def held_by(pid: int | str) -> dict[str, list[int]]:
    """The ids of the BPF programs, links and maps process ``pid`` holds an fd of, by kind (its
    fdinfo; a program held only through a link is not listed under "prog"). Empty lists when
    the process is gone."""
    held: dict[str, list[int]] = {kind: [] for kind in KINDS}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return held
    for fd in fds:
        try:
            kind = _FD_KINDS.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
            if kind is None:
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            held[kind].append(int(fields[f"{kind}_id"]))
        except (OSError, KeyError, ValueError):
            continue  # closed meanwhile
    return held


def cgroup_programs(path: str) -> list[tuple[int, AttachType]]:
    """The (program id, attach type) of every program attached to cgroup v2 directory ``path``,
    by BPF_PROG_QUERY of each attach type (bpftool's `cgroup show`, without giving up on a
    kernel that refuses the query for a type newer than itself, as 5.10 does)."""
    found = []
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for attach_type in AttachType:
            ids, count, flags = (ctypes.c_uint32 * 64)(), ctypes.c_uint32(64), ctypes.c_uint32()
            if L.lib.bpf_prog_query(fd, int(attach_type), 0, ctypes.byref(flags), ids, ctypes.byref(count)):
                continue  # not a type this kernel knows, or not a cgroup's
            found += [(prog_id, attach_type) for prog_id in ids[:count.value]]
    finally:
        os.close(fd)
    return found


def perf_event_program(pid: int, fd: int) -> int | None:
    """The id of the program attached to perf event fd ``fd`` of process ``pid``
    (BPF_TASK_FD_QUERY, as `bpftool perf` lists them): before perf links (5.15) a kprobe's,
    uprobe's or perf event's program has no link, only this. None if it has none."""
    buf, length = ctypes.create_string_buffer(256), ctypes.c_uint32(256)
    prog_id, fd_type, offset, addr = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint64(), ctypes.c_uint64()
    if L.lib.bpf_task_fd_query(pid, fd, 0, buf, ctypes.byref(length), ctypes.byref(prog_id), ctypes.byref(fd_type),
                               ctypes.byref(offset), ctypes.byref(addr)):
        return None
    return prog_id.value
