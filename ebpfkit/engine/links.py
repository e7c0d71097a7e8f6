"""Attaching programs. One function per hook kind, each returning a Link.

Everything goes through a kernel bpf_link where the kernel has one for that hook, so a
process that dies (even by SIGKILL) leaves nothing attached: the kernel drops the link
with the last fd. What must outlive the process is pinned under /sys/fs/bpf/ebpfkit/.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from ..errors import AttachError, NotSupportedError, PermissionDeniedError
from . import _libbpf as L
from .resource import Resource
from .constants import XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE, AttachType, ProgType
from ._log import get_logger

log = get_logger("ebpfkit.engine.links")


class Link(Resource):
    """One attachment of one program. ``close()`` detaches it (a pinned link stays until unpinned)."""

    def __init__(self, kind: str, target: str, *, ptr=None, fd: int | None = None,
                 detach: Callable[[], None] | None = None):
        self.kind, self.target = kind, target
        self._ptr, self._fd, self._detach = ptr, fd, detach
        self.pinned_at: str | None = None

    @property
    def fd(self) -> int:
        if self._ptr:
            return L.lib.bpf_link__fd(self._ptr)
        return -1 if self._fd is None else self._fd

    @property
    def is_bpf_link(self) -> bool:
        """True when the kernel holds this as a bpf_link (it vanishes with its last fd)."""
        return self._detach is None

    def pin(self, path: str) -> None:
        if not self.is_bpf_link:
            raise NotSupportedError("pin", f"a {self.kind} attachment without bpf_link cannot be pinned")
        from . import mounts

        mounts.ensure_bpffs()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        err = L.lib.bpf_obj_pin(self.fd, os.fsencode(path))
        if err:
            raise AttachError(f"cannot pin {self.kind} link at {path}: {os.strerror(-err)}")
        self.pinned_at = path

    def info(self):
        """What the kernel says of this bpf_link (an ``inventory.LinkInfo``: id, type,
        program id, target)."""
        from .inventory import link_info

        return link_info(self.fd)

    def unpin(self) -> None:
        if self.pinned_at:
            os.unlink(self.pinned_at)
            self.pinned_at = None

    def close(self) -> None:
        """Detach (unless pinned) and free. Safe to call twice."""
        if self._ptr:
            # closes our fds only: a pinned link lives on in bpffs (the kernel link holds
            # its perf event); bpf_link__disconnect would instead leak the fds in this process
            L.lib.bpf_link__destroy(self._ptr)
            self._ptr = None
        elif self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._detach is not None:
            detach, self._detach = self._detach, None
            detach()
            self._detach = None

    def __repr__(self):
        pin = f" pinned at {self.pinned_at}" if self.pinned_at else ""
        return f"<Link {self.kind} {self.target}{pin}>"


class LinkGroup(Link):
    """Several links that act as one (e.g. a perf_event program on every CPU)."""

    def __init__(self, kind: str, target: str, links: list[Link]):
        super().__init__(kind, target)
        self.links = links

    @property
    def fd(self) -> int:
        return self.links[0].fd if self.links else -1

    def pin(self, path: str) -> None:
        raise NotSupportedError("pin", "a group of links cannot be pinned as one")

    def close(self) -> None:
        for link in reversed(self.links):
            link.close()
        self.links = []


def _from_ptr(ptr, kind: str, target: str, program: str) -> Link:
    if not ptr:
        raise attach_error(L.errno(), kind, target, program)
    return Link(kind, target, ptr=ptr)


def attach_error(err: int, kind: str, target: str, program: str) -> Exception:
    """A clear exception for a failed attach of ``program`` to ``kind`` ``target``."""
    err = abs(err)
    what = f"cannot attach program '{program}' to {kind} {target}".rstrip()
    if err in (1, 13):
        if os.geteuid() != 0:
            return PermissionDeniedError(f"{what}: permission denied", hint="run as root")
        return NotSupportedError(kind, f"{what}: the kernel refused it (EPERM)",
                                 hint="the kernel may lock this hook: lockdown (boot with lockdown=none or "
                                      "integrity), or BPF trampolines disabled")
    if err == 2:
        return AttachError(f"{what}: {target or 'target'} does not exist on this kernel")
    from . import perf

    if err in (95, 524, 22) and kind in ("kprobe", "kretprobe") and perf.pmu_type("kprobe") is None:
        return NotSupportedError(kind, f"{what}: this kernel has no kprobes (CONFIG_KPROBES is off)",
                                 hint="use a tracepoint-based hook, or a kernel with CONFIG_KPROBES=y")
    if err in (95, 524):
        return NotSupportedError(kind, f"{what}: not supported by this kernel ({os.strerror(err)})")
    raw_tp = target if kind == "raw_tracepoint" else \
        target.split("/", 1)[1] if kind == "auto" and target.startswith(("raw_tp/", "raw_tracepoint/")) else None
    if err == 22 and raw_tp:
        count = raw_tracepoint_arg_count(raw_tp)
        if count is not None:  # the kernel checks the program's reach into ctx->args[] against it
            return AttachError(f"{what}: the kernel refused it (EINVAL): {raw_tp} passes {count} arguments "
                               f"here (ctx->args[0..{count - 1}]); a program reading further was written for "
                               "another kernel's signature of it")
    return AttachError(f"{what}: {os.strerror(err)}")


def raw_tracepoint_arg_count(name: str) -> int | None:
    """How many arguments raw tracepoint ``name`` passes, from the kernel's BTF (its
    ``btf_trace_<name>`` typedef: a pointer to a prototype whose first parameter is the
    tracepoint's own data pointer); None when BTF does not say."""
    from .btftypes import BTF, Kind

    try:
        with open("/sys/kernel/btf/vmlinux", "rb") as f:
            btf = BTF.from_bytes(f.read())
        pointer = btf.type(btf.resolve(btf.find(f"btf_trace_{name}", Kind.TYPEDEF)))
        proto = btf.type(pointer.type_id)
    except (OSError, KeyError, ValueError):
        return None
    return len(proto.params) - 1 if proto.kind == Kind.FUNC_PROTO and proto.params else None


# --- one function per hook kind; ``prog`` is an ebpfkit Program (has .ptr, .fd, .name) ---

def auto(prog) -> Link:
    """Attach as the program's SEC() name says (tp/, raw_tp/, tp_btf/, fentry/, lsm/, kprobe/, ...)."""
    if prog.section.startswith(("tp/", "tracepoint/")):
        from . import mounts  # here: most attaches need no mount table

        mounts.ensure_tracefs()
    return _from_ptr(L.lib.bpf_program__attach(prog.ptr), "auto", prog.section, prog.name)


def tracepoint(prog, category: str, name: str) -> Link:
    from . import mounts

    mounts.ensure_tracefs()
    ptr = L.lib.bpf_program__attach_tracepoint(prog.ptr, category.encode(), name.encode())
    return _from_ptr(ptr, "tracepoint", f"{category}/{name}", prog.name)


def raw_tracepoint(prog, name: str) -> Link:
    return _from_ptr(L.lib.bpf_program__attach_raw_tracepoint(prog.ptr, name.encode()),
                     "raw_tracepoint", name, prog.name)


def trace(prog) -> Link:
    """tp_btf, fentry, fexit, fmod_ret: the target was fixed at load time."""
    return _from_ptr(L.lib.bpf_program__attach_trace(prog.ptr), "trace", prog.section, prog.name)


def lsm(prog) -> Link:
    return _from_ptr(L.lib.bpf_program__attach_lsm(prog.ptr), "lsm", prog.section, prog.name)


def kprobe(prog, function: str, retprobe: bool = False, offset: int = 0) -> Link:
    opts = L.bpf_kprobe_opts(retprobe=retprobe, offset=offset)
    ptr = L.lib.bpf_program__attach_kprobe_opts(prog.ptr, function.encode(), ctypes.byref(opts))
    return _from_ptr(ptr, "kretprobe" if retprobe else "kprobe", function, prog.name)


def uprobe(prog, binary: str, symbol: str | None = None, offset: int = 0, pid: int = -1,
           retprobe: bool = False, ref_ctr_offset: int = 0) -> Link:
    """A uprobe on ``symbol`` (+``offset``) of the ELF file ``binary`` (for all processes, or
    ``pid``); ``ref_ctr_offset``: the file offset of a USDT semaphore the kernel raises while
    the probe is attached (the probed code runs only when it is not 0)."""
    if not os.path.exists(binary):
        raise AttachError(f"cannot attach uprobe: {binary} does not exist")
    opts = L.bpf_uprobe_opts(retprobe=retprobe, func_name=symbol.encode() if symbol else None,
                             ref_ctr_offset=ref_ctr_offset)
    ptr = L.lib.bpf_program__attach_uprobe_opts(prog.ptr, pid, os.fsencode(binary), offset,
                                                ctypes.byref(opts))
    target = f"{binary}:{symbol or hex(offset)}"
    return _from_ptr(ptr, "uretprobe" if retprobe else "uprobe", target, prog.name)


def usdt(prog, binary: str, provider: str, name: str, pid: int = -1, cookie: int = 0) -> Link:
    """``prog`` (which includes <bpf/usdt.bpf.h>) at every place USDT probe provider:name is
    written in ``binary``, for all processes or ``pid``: libbpf reads the ELF notes, sets the
    probe's semaphore (the kernel's uprobe reference counter) and tells the program how to
    fetch each argument (bpf_usdt_arg)."""
    if not os.path.exists(binary):
        raise AttachError(f"cannot attach USDT probe: {binary} does not exist")
    opts = L.bpf_usdt_opts(usdt_cookie=cookie)
    ptr = L.lib.bpf_program__attach_usdt(prog.ptr, pid, os.fsencode(binary), provider.encode(), name.encode(),
                                         ctypes.byref(opts))
    return _from_ptr(ptr, "usdt", f"{binary}:{provider}:{name}", prog.name)


def uprobe_multi(prog, binary: str, offsets: list[int], pid: int = -1, retprobe: bool = False) -> Link:
    """``prog`` at every file offset of ``binary`` through one uprobe_multi link (kernel 6.6;
    the program loaded for it, see Program.use_uprobe_multi). Attaching costs what N uprobes
    cost, but detaching waits for one grace period instead of N (~50 ms each here)."""
    if not os.path.exists(binary):
        raise AttachError(f"cannot attach uprobe: {binary} does not exist")
    path = ctypes.create_string_buffer(os.fsencode(binary))
    places = (ctypes.c_uint64 * len(offsets))(*offsets)
    attr = L.bpf_attr_uprobe_multi(
        prog_fd=prog.fd, attach_type=AttachType.TRACE_UPROBE_MULTI, path=ctypes.addressof(path),
        offsets=ctypes.addressof(places), cnt=len(offsets), pid=max(pid, 0),
        multi_flags=L.BPF_F_UPROBE_MULTI_RETURN if retprobe else 0)
    fd = L.bpf_syscall(L.BPF_LINK_CREATE, attr)
    kind = "uretprobe.multi" if retprobe else "uprobe.multi"
    target = f"{binary}:{len(offsets)} places"
    if fd < 0:
        raise attach_error(fd, kind, target, prog.name)
    return Link(kind, target, fd=fd)


def perf_event(prog, frequency: int = 0, period: int = 0, cpus: list[int] | None = None,
               pid: int = -1, **attr_fields) -> LinkGroup:
    """Run ``prog`` on a perf event (default: cpu-clock sampling) on every online CPU."""
    from . import perf

    links: list[Link] = []
    try:
        for cpu in cpus if cpus is not None else perf.online_cpus():
            attr = perf.sampling_attr(frequency, period, **attr_fields)
            pfd = perf.open_event(attr, pid=pid, cpu=cpu)
            opts = L.bpf_perf_event_opts()
            ptr = L.lib.bpf_program__attach_perf_event_opts(prog.ptr, pfd, ctypes.byref(opts))
            err = L.errno()
            if not ptr:
                os.close(pfd)
                raise attach_error(err, "perf_event", f"cpu {cpu}", prog.name)
            # libbpf owns pfd now: bpf_link__destroy closes it
            links.append(Link("perf_event", f"cpu {cpu}", ptr=ptr))
    except BaseException:
        for link in links:
            link.close()
        raise
    return LinkGroup("perf_event", f"{len(links)} cpus", links)


def _link_create(prog, target_fd: int, attach_type: int, kind: str, target: str, flags: int = 0) -> Link:
    opts = L.bpf_link_create_opts(flags=flags)
    fd = L.lib.bpf_link_create(prog.fd, target_fd, attach_type, ctypes.byref(opts))
    if fd < 0:
        raise attach_error(fd, kind, target, prog.name)
    return Link(kind, target, fd=fd)


XDP_MODES = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE, "auto": 0}


def xdp(prog, ifindex: int, mode: str = "auto") -> Link:
    """XDP on ``ifindex`` (in the calling thread's network namespace) through a bpf_link."""
    if mode not in XDP_MODES:
        raise AttachError(f"unknown XDP mode {mode!r}: use native, generic or auto")
    return _link_create(prog, ifindex, AttachType.XDP, "xdp", f"ifindex {ifindex} ({mode})",
                        XDP_MODES[mode])


def tc(prog, ifindex: int, direction: str = "ingress") -> Link:
    """A tc (sched_cls) program on ``ifindex``: a tcx bpf_link on kernels >= 6.6, else clsact."""
    if direction not in ("ingress", "egress"):
        raise AttachError(f"unknown tc direction {direction!r}: use ingress or egress")
    attach = AttachType.TCX_INGRESS if direction == "ingress" else AttachType.TCX_EGRESS
    opts = L.bpf_link_create_opts()
    fd = L.lib.bpf_link_create(prog.fd, ifindex, attach, ctypes.byref(opts))
    if fd >= 0:
        return Link("tc", f"ifindex {ifindex} {direction}", fd=fd)
    if abs(fd) not in (22, 95, 524):  # EINVAL/EOPNOTSUPP: no tcx here, fall back to clsact
        raise attach_error(fd, "tc", f"ifindex {ifindex} {direction}", prog.name)
    return _tc_clsact(prog, ifindex, direction)


def _tc_clsact(prog, ifindex: int, direction: str) -> Link:
    point = 1 if direction == "ingress" else 2  # BPF_TC_INGRESS / BPF_TC_EGRESS
    hook = L.bpf_tc_hook(ifindex=ifindex, attach_point=point)
    err = L.lib.bpf_tc_hook_create(ctypes.byref(hook))
    if err and abs(err) != 17:  # EEXIST: clsact already there
        raise attach_error(err, "tc", f"ifindex {ifindex} {direction}", prog.name)
    opts = L.bpf_tc_opts(prog_fd=prog.fd)
    err = L.lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
    if err:
        raise attach_error(err, "tc", f"ifindex {ifindex} {direction}", prog.name)
    handle, priority = opts.handle, opts.priority
    # the filter is found by ifindex in a network namespace: the attaching thread's, which need
    # not be the one that closes the link (a tool or test attaching from inside a netns)
    from ..net.netns import hold_current, run_in_held
    from . import reaper

    netns = hold_current()
    # a filter is not a bpf_link: should this process die, its reaper removes it
    try:
        reaper_key = reaper.register(netns, ifindex, point, handle, priority, prog.info().id)
    except OSError as exc:
        reaper_key = None
        log.warning("no reaper for %s's clsact filter (%s): a killed process would leave it", prog.name, exc)

    def remove_filter():
        d = L.bpf_tc_opts(handle=handle, priority=priority)
        err = L.lib.bpf_tc_detach(ctypes.byref(hook), ctypes.byref(d))
        if err and abs(err) not in (2, 19):  # ENOENT/ENODEV: the filter or the device is gone already
            log.warning("cannot detach %s from ifindex %d (clsact): %s", prog.name, ifindex, os.strerror(-err))

    def detach():
        try:
            run_in_held(netns, remove_filter)
        finally:
            os.close(netns)
            if reaper_key is not None:
                reaper.unregister(reaper_key)

    log.info("tcx links are not available; attached %s through clsact (removed by a reaper "
             "process should this one die)", prog.name)
    return Link("tc", f"ifindex {ifindex} {direction} (clsact)", detach=detach)


def cgroup(prog, cgroup_path: str) -> Link:
    """A cgroup program (sockops, sock_addr, cgroup_skb, ...) on the cgroup v2 directory."""
    try:
        cgfd = os.open(cgroup_path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise AttachError(f"cannot open cgroup {cgroup_path}: {exc.strerror}") from None
    try:
        return _from_ptr(L.lib.bpf_program__attach_cgroup(prog.ptr, cgfd), "cgroup", cgroup_path, prog.name)
    finally:
        os.close(cgfd)


_SOCKMAP_ATTACH = {ProgType.SK_MSG: AttachType.SK_MSG_VERDICT, ProgType.SK_SKB: AttachType.SK_SKB_VERDICT}


def sockmap(prog, map_fd: int, attach_type: int | None = None) -> Link:
    """An sk_msg / sk_skb program on a SOCKMAP or SOCKHASH (a bpf_link on kernels >= 6.10)."""
    if attach_type is None:
        attach_type = prog.expected_attach_type or _SOCKMAP_ATTACH.get(prog.type)
    opts = L.bpf_link_create_opts()
    fd = L.lib.bpf_link_create(prog.fd, map_fd, attach_type, ctypes.byref(opts))
    if fd >= 0:
        return Link("sockmap", f"map fd {map_fd}", fd=fd)
    err = L.lib.bpf_prog_attach(prog.fd, map_fd, attach_type, 0)
    if err:
        raise attach_error(err, "sockmap", f"map fd {map_fd}", prog.name)
    prog_fd = prog.fd
    log.info("sockmap links are not available; attached %s with BPF_PROG_ATTACH", prog.name)
    return Link("sockmap", f"map fd {map_fd} (prog_attach)",
                detach=lambda: L.lib.bpf_prog_detach2(prog_fd, map_fd, attach_type))


def open_pinned(path: str) -> Link:
    """Re-open a pinned link (e.g. to inspect or remove what a persistent tool left)."""
    fd = L.lib.bpf_obj_get(os.fsencode(path))
    if fd < 0:
        raise AttachError(f"no pinned link at {path}: {os.strerror(-fd)}")
    link = Link("pinned", path, fd=fd)
    link.pinned_at = path
    return link
