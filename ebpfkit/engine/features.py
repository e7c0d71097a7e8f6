"""What can eBPF do on this machine? Answered by trying, not by guessing.

Every probe loads a tiny program written as raw BPF instructions (so no clang is needed)
and, where attaching is the question, really attaches it, then removes everything it
created (programs, links, perf events, a throwaway network namespace with a veth pair, a
child cgroup, a temporary securityfs mount), also when it fails.

Result rule: every probe returns a ``Probe`` whose ``status`` is

* ``supported``   -- it worked here, now, as this user;
* ``unsupported`` -- the kernel (or machine) refused or lacks it; ``reason`` says why;
* ``unknown``     -- we could not tell (e.g. not root, or an unexpected error); ``reason`` says why.

``reason`` is one short human sentence, ``detail`` carries errno and the kernel's own words,
``value`` the datum found (a version, a path, a lockdown mode). Results are cached for the
life of the process; ``clear_cache()`` forgets them.

    >>> probe_all()["kprobe"].reason
    'CONFIG_KPROBES is off (no kprobe PMU)'
    >>> best_hook(["fentry", "kprobe", "tracepoint"])
    'tracepoint'
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as _errno
import functools
import os
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import EbpfkitError, NotSupportedError, PermissionDeniedError
from . import _libbpf as L
from . import mounts, perf
from .btf import BTF_ENV, BTF_SOURCES_HINT, KERNEL_BTF, check_btf_file, kernel_btf_exposed, user_btf_path
from .constants import BPF_F_TEST_XDP_LIVE_FRAMES, PERF_TYPE_TRACEPOINT, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE
from .constants import AttachType, MapType, ProgType

SUPPORTED, UNSUPPORTED, UNKNOWN = "supported", "unsupported", "unknown"

PROG_NAME = b"ebpfkit_probe"  # every probe program carries this name (tests look for leftovers)
CGROUP_PREFIX = "ebpfkit-probe-"
_NEEDS_ROOT = "needs root"


@dataclass(frozen=True)
class Probe:
    name: str
    label: str
    status: str
    reason: str
    detail: str = ""
    value: Any = None
    errno: int = 0

    @property
    def supported(self) -> bool:
        return self.status == SUPPORTED

    def __str__(self) -> str:
        return f"{self.label}: {self.status} ({self.reason})"


class _Failed(Exception):
    """A probe step the kernel refused: ``step`` (load, attach, ...) and errno ``err``."""

    def __init__(self, step: str, err: int, reason: str = "", detail: str = "", log: str = ""):
        super().__init__(reason or step)
        self.step, self.err, self.reason, self.detail, self.log = step, abs(err), reason, detail, log


def _errname(err: int) -> str:
    return {524: "ENOTSUPP"}.get(err) or _errno.errorcode.get(err, f"errno {err}")


def _is_root() -> bool:
    return os.geteuid() == 0


# --- raw BPF programs ------------------------------------------------------------------

def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _return(value: int) -> bytes:
    """``r0 = value; exit``: the whole program."""
    return _insn(0xB7, dst=0, imm=value) + _insn(0x95)


def _kernel_version_code() -> int:
    # only pre-5.0 kernels check kern_version for kprobe programs, but it costs nothing
    parts = [int(p) for p in os.uname().release.split("-")[0].split(".")[:3] if p.isdigit()]
    major, minor, patch = (parts + [0, 0, 0])[:3]
    return (major << 16) + (minor << 8) + min(patch, 255)


def _load(prog_type: int, ret: int = 0, expected_attach_type: int = 0,
          attach_btf_id: int = 0, insns: bytes | None = None) -> int:
    """Load ``insns`` (default: return ``ret``); returns the fd or raises _Failed('load', errno)
    carrying the verifier's log."""
    insns = insns or _return(ret)
    buf = ctypes.create_string_buffer(insns, len(insns))

    def attempt(log_buf=None):
        opts = L.bpf_prog_load_opts(expected_attach_type=expected_attach_type,
                                    attach_btf_id=attach_btf_id,
                                    kern_version=_kernel_version_code())
        if log_buf is not None:
            opts.log_level, opts.log_size = 1, len(log_buf)
            opts.log_buf = ctypes.cast(log_buf, ctypes.c_void_p)
        return L.lib.bpf_prog_load(prog_type, PROG_NAME, b"GPL", buf, len(insns) // 8,
                                   ctypes.byref(opts))

    fd = attempt()
    if fd >= 0:
        return fd
    err = -fd
    log_buf = ctypes.create_string_buffer(16384)  # again, to get the kernel's own words
    fd = attempt(log_buf)
    if fd >= 0:  # should not happen; do not leak it
        os.close(fd)
    log = log_buf.value.decode(errors="replace").strip()
    last = [line for line in log.splitlines() if not line.startswith("processed ")][-1:]
    raise _Failed("load", err, detail="; ".join(last), log=log)


def _close_on_exit(stack: contextlib.ExitStack, fd: int, step: str) -> int:
    """Register ``fd`` to be closed, or raise _Failed(step) for a negative return value."""
    if fd < 0:
        raise _Failed(step, -fd)
    stack.callback(os.close, fd)
    return fd


def _loaded(stack, prog_type, ret=0, expected_attach_type=0, attach_btf_id=0) -> int:
    return _close_on_exit(stack, _load(prog_type, ret, expected_attach_type, attach_btf_id), "load")


def _link_create(stack, prog_fd: int, target_fd: int, attach_type: int, flags: int = 0) -> int:
    opts = L.bpf_link_create_opts(flags=flags)
    return _close_on_exit(stack, L.lib.bpf_link_create(prog_fd, target_fd, attach_type,
                                                       ctypes.byref(opts)), "attach")


def _link_or_prog_attach(stack, prog_fd: int, target_fd: int, attach_type: int) -> str:
    """A bpf_link, or on kernels without that link kind BPF_PROG_ATTACH (+ detach on exit)."""
    opts = L.bpf_link_create_opts()
    fd = L.lib.bpf_link_create(prog_fd, target_fd, attach_type, ctypes.byref(opts))
    if fd >= 0:
        stack.callback(os.close, fd)
        return "bpf_link"
    if -fd not in (_errno.EINVAL, _errno.EOPNOTSUPP, 524):
        raise _Failed("attach", -fd)
    err = L.lib.bpf_prog_attach(prog_fd, target_fd, attach_type, 0)
    if err:
        raise _Failed("attach", -err)
    stack.callback(L.lib.bpf_prog_detach2, prog_fd, target_fd, attach_type)
    return "BPF_PROG_ATTACH"


def _attach_perf_event(stack, prog_fd: int, attr: perf.perf_event_attr, pid: int = -1,
                       cpu: int = 0) -> None:
    """perf_event_open + bpf_link_create(BPF_PERF_EVENT); the ioctl on kernels < 5.15."""
    try:
        pfd = perf.open_event(attr, pid=pid, cpu=cpu)
    except EbpfkitError as exc:
        raise _Failed("open the perf event for", L.errno(), detail=str(exc)) from None
    stack.callback(os.close, pfd)
    opts = L.bpf_link_create_opts()
    fd = L.lib.bpf_link_create(prog_fd, pfd, AttachType.PERF_EVENT, ctypes.byref(opts))
    if fd >= 0:
        stack.callback(os.close, fd)
        return
    if -fd != _errno.EINVAL:
        raise _Failed("attach", -fd)
    PERF_EVENT_IOC_SET_BPF = 0x40042408
    if L.libc.ioctl(pfd, PERF_EVENT_IOC_SET_BPF, prog_fd) != 0:
        raise _Failed("attach", L.errno())


# --- the probe registry ----------------------------------------------------------------

_REGISTRY: dict[str, tuple[str, Callable[[str, str], Probe]]] = {}
_cache: dict[str, Probe] = {}
_lock = threading.RLock()


def _register(name: str, label: str):
    def wrap(fn):
        _REGISTRY[name] = (label, fn)
        return fn
    return wrap


def register(name: str, label: str, hint: str, after: str | None = None):
    """A decorator adding a probe ``fn(name, label) -> Probe`` from outside the engine (a
    feature the engine does not use, such as BCC): it takes part in probe_all(), in order
    after the probe ``after`` (default: last), and require(name) gives ``hint``."""
    def wrap(fn):
        with _lock:
            entries = [(key, entry) for key, entry in _REGISTRY.items() if key != name]
            at = len(entries) if after is None else [key for key, _ in entries].index(after) + 1
            entries.insert(at, (name, (label, fn)))
            _REGISTRY.clear()
            _REGISTRY.update(entries)
            HINTS[name] = hint
            _cache.pop(name, None)
        return fn
    return wrap


def names() -> list[str]:
    """Every probe name, in display order."""
    return list(_REGISTRY)


def label(name: str) -> str:
    return _REGISTRY[name][0]


def probe(name: str) -> Probe:
    """The (cached) result of one probe; KeyError for an unknown name."""
    if name not in _REGISTRY:
        raise KeyError(f"no feature probe named {name!r}; known: {', '.join(_REGISTRY)}")
    with _lock:
        if name not in _cache:
            lbl, fn = _REGISTRY[name]
            try:
                _cache[name] = fn(name, lbl)
            except Exception as exc:  # a probe must answer, never crash the caller
                _cache[name] = Probe(name, lbl, UNKNOWN, f"probe failed: {exc}",
                                     detail=type(exc).__name__)
        return _cache[name]


def clear_cache() -> None:
    with _lock:
        _cache.clear()
        for fn in (_vmlinux_btf_ids, _securityfs, _net_group, _cgroup_group, have_program_type,
                   have_map_type, have_helper):
            fn.cache_clear()


def probe_all() -> dict[str, Probe]:
    """Every probe, in a stable display order (the networking and cgroup groups run once each)."""
    return {name: probe(name) for name in _REGISTRY}


def best_hook(candidates: list[str]) -> str | None:
    """The first of ``candidates`` that is supported here, or None."""
    for name in candidates:
        if probe(name).supported:
            return name
    return None


def require(name: str) -> Probe:
    """The probe result when supported; else NotSupportedError (PermissionDeniedError when
    only root could tell) with a hint saying what to do."""
    result = probe(name)
    if result.supported:
        return result
    message = f"{result.label}: {result.reason}"
    if result.reason == _NEEDS_ROOT:
        raise PermissionDeniedError(f"{message} to find out whether {name} works here",
                                    hint="run as root (or with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN)")
    no_kernel_btf = name in _BTF_TYPED_PROBES and not kernel_btf_exposed()
    raise NotSupportedError(name, message, hint=HINTS["kernel_btf" if no_kernel_btf else name])


_BTF_TYPED_PROBES = frozenset({"tp_btf", "fentry", "fexit", "lsm"})  # the kernel checks them against its BTF


def _result(status: str, reason: str, **kw):
    """A partial result; the registry fills in name and label."""
    return status, reason, kw


def _attach_probe(fn: Callable[[], tuple]) -> Callable[[str, str], Probe]:
    """Wrap a probe body: root check, and _Failed -> unsupported with a clear reason."""

    @functools.wraps(fn)
    def run(name: str, lbl: str) -> Probe:
        if not _is_root():
            return Probe(name, lbl, UNKNOWN, _NEEDS_ROOT)
        try:
            status, reason, kw = fn()
        except _Failed as exc:
            return _refused(name, lbl, exc)
        return Probe(name, lbl, status, reason, **kw)

    return run


def _refused(name: str, lbl: str, exc: _Failed) -> Probe:
    kind = _KIND.get(name, f"a {name}")
    reason = exc.reason or f"kernel refused to {exc.step} {kind} program ({_errname(exc.err)})"
    if not exc.reason:
        cause = _CAUSES.get((name, exc.err)) or _CAUSES.get((None, exc.err))
        if cause:
            reason += f": {cause}"
    parts = [f"{exc.step}: {_errname(exc.err)} ({os.strerror(exc.err)})"] if exc.err else []
    detail = "; ".join(parts + ([exc.detail] if exc.detail else []))
    return Probe(name, lbl, UNSUPPORTED, reason, detail=detail, errno=exc.err)


# how a refusal names the program: "kernel refused to load <kind> program (EPERM)"
_KIND = {"raw_tp": "a raw tracepoint", "xdp_native": "a native XDP", "xdp_generic": "a generic XDP",
         "cgroup_sock_addr": "a cgroup sock_addr (connect4)", "prog_test_run": "an XDP",
         "lsm": "an LSM", "uprobe": "a uprobe (KPROBE type)", "kprobe": "a kprobe",
         "tracepoint": "a tracepoint", "perf_event": "a perf_event", "tc": "a tc (sched_cls)",
         "sk_msg": "an sk_msg", "sk_skb_verdict": "an sk_skb verdict"}
_TRAMPOLINE_LOCKED = "trampolines are locked (no fentry/fexit/LSM attach on this kernel)"
_CAUSES = {
    ("fentry", 1): _TRAMPOLINE_LOCKED,
    ("fexit", 1): _TRAMPOLINE_LOCKED,
    ("lsm", 1): _TRAMPOLINE_LOCKED,
    ("fentry", 524): "this kernel has no BPF trampolines for this architecture",
    ("fexit", 524): "this kernel has no BPF trampolines for this architecture",
    ("xdp_native", 95): "the driver has no native XDP",
    (None, 22): "the kernel does not know this program or attach type (too old?)",
    (None, 1): "operation not permitted (lockdown or missing capabilities)",
}


# --- facts -----------------------------------------------------------------------------

def kernel_release() -> str:
    return os.uname().release


def libbpf_version() -> str:
    """The loaded libbpf's full version (from its file name), else major.minor."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                base = os.path.basename(path)
                if base.startswith("libbpf.so."):
                    return os.path.basename(os.path.realpath(path))[len("libbpf.so."):]
    except OSError:
        pass
    return "%d.%d" % L.version()


def mounted_bpffs() -> str | None:
    """Where bpffs is mounted (preferring /sys/fs/bpf), or None. Not cached: mounts change."""
    from ..sysinfo.mounts import MountTable  # the mount table: only for the probes that need it

    points = MountTable().points("bpf")
    return mounts.BPFFS if mounts.BPFFS in points else (points[0] if points else None)


def mounted_tracefs() -> str | None:
    """The tracing directory if tracefs (or debugfs/tracing) is mounted, else None."""
    from ..sysinfo.mounts import MountTable

    points = MountTable().points("tracefs")
    if mounts.TRACEFS in points:
        return mounts.TRACEFS
    if points:
        return points[0]
    if os.path.isdir(os.path.join(mounts.DEBUGFS_TRACING, "events")):
        return mounts.DEBUGFS_TRACING
    return None


def have_tracepoint(category: str, name: str) -> bool:
    """Whether tracepoint ``category:name`` exists here (``syscalls:sys_enter_open`` does on
    x86_64, not on arm64, which never had open(2)); False when tracefs is not mounted."""
    tracing = mounted_tracefs()
    return bool(tracing) and os.path.isdir(os.path.join(tracing, "events", category, name))


def _filesystem_known(fstype: str) -> bool:
    try:
        with open("/proc/filesystems") as f:
            return any(line.split()[-1] == fstype for line in f if line.strip())
    except OSError:
        return False


@functools.cache
def _securityfs() -> dict:
    """The 'lockdown' and 'lsm' files of securityfs, mounting it on a private temporary
    directory for the read if it is not mounted (and unmounting it again)."""
    import tempfile

    from ..sysinfo.mounts import MountTable

    points = MountTable().points("securityfs")
    if points:
        return _read_security_files(points[0])
    if not _is_root():
        return {"error": "securityfs is not mounted and mounting it needs root"}
    if not _filesystem_known("securityfs"):
        return {"error": "this kernel has no securityfs"}
    tmp = tempfile.mkdtemp(prefix="ebpfkit-securityfs-")
    try:
        if L.libc.mount(b"securityfs", tmp.encode(), b"securityfs", 0, None) != 0:
            err = L.errno()
            return {"error": f"cannot mount securityfs: {os.strerror(err)}"}
        try:
            return _read_security_files(tmp)
        finally:
            if L.libc.umount2(tmp.encode(), 0) != 0:
                L.libc.umount2(tmp.encode(), 2)  # MNT_DETACH: still gone from the tree
    finally:
        os.rmdir(tmp)


def _read_security_files(root: str) -> dict:
    out = {}
    for name in ("lockdown", "lsm"):
        try:
            with open(os.path.join(root, name)) as f:
                out[name] = f.read().strip()
        except OSError as exc:
            out[name + "_error"] = f"cannot read {name} from securityfs: {exc.strerror}"
    return out


def active_lsms() -> list[str] | None:
    """The active LSMs in order (securityfs 'lsm'), or None when they cannot be read."""
    text = _securityfs().get("lsm")
    return None if text is None else [m for m in text.split(",") if m]


def _lsm_read_error() -> str:
    sec = _securityfs()
    return sec.get("error") or sec.get("lsm_error") or "active LSMs unknown"


def btf_available() -> Probe:
    return probe("btf")


def lockdown_mode() -> Probe:
    """value: none / integrity / confidentiality. Supported = BPF may read kernel memory."""
    return probe("lockdown")


def lsm_active() -> Probe:
    return probe("lsm_active")


def clang_version() -> Probe:
    return probe("clang")


@_register("btf", "BTF for CO-RE")
def _probe_btf(name, lbl):
    user_file = user_btf_path()
    if user_file:
        check_btf_file(user_file)  # a bad file is a usage error (exit 2), not a probe result
        size = os.stat(user_file).st_size
        return Probe(name, lbl, SUPPORTED, f"{user_file} ({size / 1e6:.1f} MB, given by --btf/{BTF_ENV})",
                     value=user_file)
    kernel = probe("kernel_btf")
    if not kernel.supported:
        return Probe(name, lbl, kernel.status, f"{kernel.reason}; no --btf FILE given", errno=kernel.errno)
    return Probe(name, lbl, SUPPORTED, kernel.reason, value=kernel.value)


@_register("kernel_btf", "kernel's own BTF (tp_btf, fentry/fexit, LSM)")
def _probe_kernel_btf(name, lbl):
    path = KERNEL_BTF
    try:
        size = os.stat(path).st_size
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        return Probe(name, lbl, UNSUPPORTED, f"{path} is missing (kernel built without CONFIG_DEBUG_INFO_BTF, "
                     "or hidden): BTF-typed hooks cannot load, and no --btf file can stand in for them")
    except OSError as exc:
        return Probe(name, lbl, UNKNOWN, f"cannot read {path}: {exc.strerror}", errno=exc.errno)
    if not size:
        return Probe(name, lbl, UNSUPPORTED, f"{path} is empty (hidden): BTF-typed hooks cannot load, "
                     "and no --btf file can stand in for them")
    return Probe(name, lbl, SUPPORTED, f"{path} ({size / 1e6:.1f} MB)", value=path)


@_register("libbpf", "libbpf")
def _probe_libbpf(name, lbl):
    version = libbpf_version()
    return Probe(name, lbl, SUPPORTED, f"libbpf {version}", value=version)


@_register("clang", "clang (for C programs)")
def _probe_clang(name, lbl):
    from .compiler import MIN_CLANG, find_clang

    try:
        clang = find_clang()
    except NotSupportedError as exc:
        return Probe(name, lbl, UNSUPPORTED, str(exc))
    if clang is None:
        return Probe(name, lbl, UNSUPPORTED, f"no clang >= {MIN_CLANG} ({_prebuilt_state()})")
    version = ".".join(map(str, clang.version()))
    return Probe(name, lbl, SUPPORTED, f"clang {version} at {clang.path}", value=version,
                 detail=clang.version_text())


def _prebuilt_state() -> str:
    """What runs without clang: ebpfkit's own programs, from their prebuilt CO-RE objects."""
    from .compiler import PREBUILT_DIR
    from .prebuilt import missing, program_sources

    total = len(program_sources())
    return f"ebpfkit's programs: {total - len(missing())} of {total} prebuilt, in {PREBUILT_DIR}"


@_register("type_walk", "C type-name walk (fast cold compiles)")
def _probe_type_walk(name, lbl):
    from .slimheader import native_walk

    if native_walk() is None:
        return Probe(name, lbl, UNSUPPORTED, "not built at install (no C compiler): a kernel's first "
                     "compile walks its types in Python, 30-90 ms more")
    return Probe(name, lbl, SUPPORTED, "built at install")


def _mountable(name, lbl, where, fstype: str, what: str, mountpoint: str) -> Probe:
    """A filesystem ebpfkit needs: mounted (``where``), or mountable by us when needed."""
    if where:
        return Probe(name, lbl, SUPPORTED, f"mounted at {where}", value=where)
    if not _filesystem_known(fstype):
        return Probe(name, lbl, UNSUPPORTED, f"this kernel has no {what}")
    if not _is_root():
        return Probe(name, lbl, UNKNOWN, f"not mounted; mounting it at {mountpoint} needs root")
    return Probe(name, lbl, SUPPORTED, f"not mounted; ebpfkit mounts it at {mountpoint} when needed")


@_register("bpffs", "bpffs (pins)")
def _probe_bpffs(name, lbl):
    return _mountable(name, lbl, mounted_bpffs(), "bpf", "bpf filesystem", mounts.BPFFS)


@_register("tracefs", "tracefs")
def _probe_tracefs(name, lbl):
    return _mountable(name, lbl, mounted_tracefs(), "tracefs", "tracefs", mounts.TRACEFS)


@_register("lockdown", "kernel lockdown")
def _probe_lockdown(name, lbl):
    sec = _securityfs()
    text = sec.get("lockdown")
    if text is None:
        return Probe(name, lbl, UNKNOWN, sec.get("error") or sec.get("lockdown_error", "unreadable"))
    mode = next((w.strip("[]") for w in text.split() if w.startswith("[")), text)
    if mode == "confidentiality":
        return Probe(name, lbl, UNSUPPORTED, "lockdown=confidentiality: BPF may not read kernel "
                     "memory", value=mode, detail=text)
    note = {"none": "no restrictions",
            "integrity": "kernel reads allowed; bpf_probe_write_user refused"}.get(mode, "")
    return Probe(name, lbl, SUPPORTED, f"lockdown={mode}" + (f" ({note})" if note else ""),
                 value=mode, detail=text)


@_register("lsm_active", "BPF LSM active")
def _probe_lsm_active(name, lbl):
    lsms = active_lsms()
    if lsms is None:
        return Probe(name, lbl, UNKNOWN, _lsm_read_error())
    listed = ",".join(lsms)
    if "bpf" in lsms:
        return Probe(name, lbl, SUPPORTED, f"bpf is an active LSM: {listed}", value=lsms)
    return Probe(name, lbl, UNSUPPORTED, f"bpf not in active LSMs: {listed}", value=lsms)


# --- program, map and helper types ----------------------------------------------------

def _libbpf_probe(name: str, lbl: str, rc: int, refused: str) -> Probe:
    if rc == 1:
        return Probe(name, lbl, SUPPORTED, "the kernel accepts it (libbpf probe)")
    if rc == 0:
        return Probe(name, lbl, UNSUPPORTED, refused)
    if -rc in (_errno.EOPNOTSUPP, 524):
        return Probe(name, lbl, UNKNOWN, f"libbpf {libbpf_version()} cannot probe it (newer "
                     "than this libbpf)", errno=-rc)
    return Probe(name, lbl, UNKNOWN, f"libbpf could not tell ({_errname(-rc)})", errno=-rc)


@functools.cache
def have_program_type(prog_type: ProgType) -> Probe:
    prog_type = ProgType(prog_type)
    name, lbl = f"prog_type:{prog_type.name.lower()}", f"program type {prog_type.name}"
    if not _is_root():
        return Probe(name, lbl, UNKNOWN, _NEEDS_ROOT)
    if prog_type in _HELPER_TARGETS:  # libbpf 1.1 probes these without a target: wrong answers
        return _own_prog_type_probe(name, lbl, prog_type)
    return _libbpf_probe(name, lbl, L.lib.libbpf_probe_bpf_prog_type(prog_type, None),
                         "the kernel refused libbpf's test program of this type")


def _own_prog_type_probe(name: str, lbl: str, prog_type: ProgType) -> Probe:
    attach_type, target = _HELPER_TARGETS[prog_type]
    try:
        btf_id = _btf_id(target) if target else 0
        os.close(_load(prog_type, expected_attach_type=attach_type, attach_btf_id=btf_id))
    except _Failed as exc:
        why = exc.reason or f"the kernel refused to load one ({_errname(exc.err)})"
        return Probe(name, lbl, UNSUPPORTED, why, detail=exc.detail, errno=exc.err)
    return Probe(name, lbl, SUPPORTED, "a program of this type loaded")


@functools.cache
def have_map_type(map_type: MapType) -> Probe:
    map_type = MapType(map_type)
    name, lbl = f"map_type:{map_type.name.lower()}", f"map type {map_type.name}"
    if not _is_root():
        return Probe(name, lbl, UNKNOWN, _NEEDS_ROOT)
    return _libbpf_probe(name, lbl, L.lib.libbpf_probe_bpf_map_type(map_type, None),
                         "the kernel refused to create a map of this type")


@_register("task_storage", "task storage (per-task map values)")
def _probe_task_storage(name, lbl):
    found = have_map_type(MapType.TASK_STORAGE)
    return Probe(name, lbl, found.status, found.reason, detail=found.detail, errno=found.errno)


@_register("sched_info", "the scheduler's run-queue account (sched_info)")
def _probe_sched_info(name, lbl):
    # CONFIG_SCHED_INFO (selected by SCHEDSTATS or TASK_DELAY_ACCT) is what gives tasks
    # /proc/PID/schedstat; the fields it adds to task_struct are read by programs through CO-RE.
    if os.path.exists("/proc/self/schedstat"):
        return Probe(name, lbl, SUPPORTED, "tasks carry sched_info (/proc/self/schedstat)")
    return Probe(name, lbl, UNSUPPORTED, "/proc/self/schedstat is missing: the kernel keeps no "
                 "run-queue account per task (CONFIG_SCHED_INFO)")


# The verifier's words for "no such helper here" (older and newer kernels). libbpf 1.1's
# libbpf_probe_bpf_helper() knows only the first two and says "supported" on kernel 6.18.
_NO_HELPER = ("invalid func ", "unknown func ", "cannot use helper", "helper call is not allowed")
# program types that load only with an attach target (kernel BTF id or attach type)
_HELPER_TARGETS = {ProgType.TRACING: (AttachType.TRACE_RAW_TP, "btf_trace_sched_switch"),
                   ProgType.LSM: (AttachType.LSM_MAC, "bpf_lsm_file_open"),
                   ProgType.CGROUP_SOCK_ADDR: (AttachType.CGROUP_INET4_CONNECT, None),
                   ProgType.CGROUP_SOCKOPT: (AttachType.CGROUP_GETSOCKOPT, None)}


@functools.cache
def have_helper(prog_type: ProgType, helper_id: int) -> Probe:
    """Can a ``prog_type`` program call helper number ``helper_id`` (enum bpf_func_id)?

    Loads ``call helper_id; r0 = 0; exit`` (r1 = ctx, r2-r5 = 0). The kernel either loads
    it, names the helper as unknown / not allowed here (unsupported), or objects to the
    dummy arguments, which means it knows the helper for this type (supported)."""
    prog_type = ProgType(prog_type)
    name = f"helper:{helper_id}@{prog_type.name.lower()}"
    lbl = f"helper {helper_id} in {prog_type.name} programs"
    if not _is_root():
        return Probe(name, lbl, UNKNOWN, _NEEDS_ROOT)
    attach_type, target = _HELPER_TARGETS.get(prog_type, (0, None))
    zero_args = b"".join(_insn(0xB7, dst=r) for r in range(2, 6))
    insns = zero_args + _insn(0x85, imm=helper_id) + _return(0)
    try:
        btf_id = _btf_id(target) if target else 0
        os.close(_load(prog_type, expected_attach_type=attach_type, attach_btf_id=btf_id,
                       insns=insns))
    except _Failed as exc:
        if any(words in exc.log for words in _NO_HELPER):
            return Probe(name, lbl, UNSUPPORTED, exc.detail or "the verifier refused the helper")
        if not exc.log:  # refused before the verifier looked at the call
            why = exc.reason or f"{_errname(exc.err)} before verification"
            return Probe(name, lbl, UNKNOWN, f"cannot load a {prog_type.name} program here: {why}",
                         errno=exc.err)
        return Probe(name, lbl, SUPPORTED, "the verifier knows it (it objected only to the "
                     "test arguments)", detail=exc.detail)
    return Probe(name, lbl, SUPPORTED, "a program calling it loaded")


# --- tracing attach probes -------------------------------------------------------------

_BTF_KIND_TYPEDEF, _BTF_KIND_FUNC = 8, 12
BTF_KIND_VAR = 14
_BTF_TARGETS = {"btf_trace_sched_switch": _BTF_KIND_TYPEDEF, "vfs_read": _BTF_KIND_FUNC,
                "bpf_lsm_file_open": _BTF_KIND_FUNC}


@functools.cache
def _vmlinux_btf_ids() -> dict[str, int]:
    """BTF ids of the few kernel types the probes attach to (one parse of vmlinux BTF)."""
    btf = L.lib.btf__load_vmlinux_btf()
    if not btf:
        return {}
    try:
        ids = {}
        for name, kind in _BTF_TARGETS.items():
            type_id = L.lib.btf__find_by_name_kind(btf, name.encode(), kind)
            if type_id > 0:
                ids[name] = type_id
        return ids
    finally:
        L.lib.btf__free(btf)


@functools.cache
def has_kernel_function(name: str) -> bool:
    """Whether the running kernel has a function ``name`` (kernel BTF, else /proc/kallsyms):
    how tools tell kernel behaviours apart that no program type or helper reveals."""
    btf = L.lib.btf__load_vmlinux_btf()
    if btf:
        try:
            if L.lib.btf__find_by_name_kind(btf, name.encode(), _BTF_KIND_FUNC) > 0:
                return True
        finally:
            L.lib.btf__free(btf)
    return _kernel_function((name,)) is not None


@functools.cache
def kernel_function_arity(name: str) -> int | None:
    """How many parameters the kernel function ``name`` takes, from the kernel's BTF (None:
    no such function, or no kernel BTF): how a program picks between the signatures a hook
    has had (an LSM hook that gained an argument attaches only where its program matches)."""
    btf = L.lib.btf__load_vmlinux_btf()
    if not btf:
        return None
    try:
        func_id = L.lib.btf__find_by_name_kind(btf, name.encode(), _BTF_KIND_FUNC)
        if func_id <= 0:
            return None
        proto_id = _btf_type(btf, func_id)[2]  # a FUNC's type is its FUNC_PROTO
        return _btf_type(btf, proto_id)[1] & 0xFFFF  # vlen: the parameters
    finally:
        L.lib.btf__free(btf)


def _btf_type(btf, type_id: int):
    """struct btf_type as (name_off, info, size_or_type)."""
    return ctypes.cast(L.lib.btf__type_by_id(btf, type_id), ctypes.POINTER(ctypes.c_uint32 * 3)).contents


def kernel_btf_names(names, kind: int | None = None) -> frozenset:
    """Which of ``names`` the running kernel's BTF defines, of any kind (functions, structs,
    tracepoint typedefs) or of ``kind`` (BTF_KIND_VAR: a per-CPU variable a program may name):
    how a tool picks only the fexit/tp_btf targets this kernel has, since one missing target
    fails the whole load. Empty without kernel BTF."""
    btf = L.lib.btf__load_vmlinux_btf()
    if not btf:
        return frozenset()
    try:
        if kind is None:
            return frozenset(n for n in names if L.lib.btf__find_by_name(btf, n.encode()) > 0)
        return frozenset(n for n in names if L.lib.btf__find_by_name_kind(btf, n.encode(), kind) > 0)
    finally:
        L.lib.btf__free(btf)


def _btf_id(name: str) -> int:
    if not kernel_btf_exposed():
        raise _Failed("find", 0, reason=f"needs the kernel's own BTF ({KERNEL_BTF} is missing or empty; "
                                        "a --btf file cannot stand in)")
    type_id = _vmlinux_btf_ids().get(name)
    if not type_id:
        raise _Failed("find", 0, reason=f"kernel BTF has no {name}")
    return type_id


_TRACEPOINTS = ["syscalls/sys_enter_getpid", "sched/sched_switch"]


@_register("tracepoint", "tracepoint (perf event)")
@_attach_probe
def _probe_tracepoint():
    try:
        tracing = mounts.ensure_tracefs()  # left mounted, as the engine itself does
    except EbpfkitError as exc:
        raise _Failed("mount", 0, reason=f"tracefs unavailable: {exc}") from None
    for tp in _TRACEPOINTS:
        try:
            with open(os.path.join(tracing, "events", tp, "id")) as f:
                tp_id = int(f.read())
            break
        except (OSError, ValueError):
            continue
    else:
        raise _Failed("find", 0, reason=f"no tracepoint ids under {tracing}/events")
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.TRACEPOINT)
        attr = perf.perf_event_attr(type=PERF_TYPE_TRACEPOINT, config=tp_id)
        _attach_perf_event(stack, prog, attr)
    return _result(SUPPORTED, f"attached to {tp}", value=tp)


@_register("raw_tp", "raw tracepoint")
@_attach_probe
def _probe_raw_tp():
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.RAW_TRACEPOINT)
        _close_on_exit(stack, L.lib.bpf_raw_tracepoint_open(b"sched_switch", prog), "attach")
    return _result(SUPPORTED, "attached to sched_switch")


def _trace_prog(attach_type: AttachType, target: str) -> None:
    """Load a BTF-typed tracing program on ``target`` and attach it (raw_tracepoint_open)."""
    prog_type = ProgType.LSM if attach_type == AttachType.LSM_MAC else ProgType.TRACING
    btf_id = _btf_id(target)
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, prog_type, expected_attach_type=attach_type, attach_btf_id=btf_id)
        _close_on_exit(stack, L.lib.bpf_raw_tracepoint_open(None, prog), "attach")


@_register("tp_btf", "BTF tracepoint (tp_btf)")
@_attach_probe
def _probe_tp_btf():
    _trace_prog(AttachType.TRACE_RAW_TP, "btf_trace_sched_switch")
    return _result(SUPPORTED, "attached to sched_switch")


def _kernel_function(candidates=("vfs_read", "ksys_read")) -> str | None:
    """The first of ``candidates`` that /proc/kallsyms lists as a function."""
    wanted = set(candidates)
    found = set()
    try:
        with open("/proc/kallsyms") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in wanted and parts[1] in "tT":
                    found.add(parts[2])
                    if candidates[0] in found:
                        break
    except OSError:
        return None
    return next((c for c in candidates if c in found), None)


def _probe_pmu_attr(pmu: int, path_or_func: bytes, offset: int, keep: list) -> perf.perf_event_attr:
    """A kprobe/uprobe PMU attr: config1 points at the name, config2 is the offset."""
    name = ctypes.create_string_buffer(path_or_func)
    keep.append(name)  # the kernel reads it during perf_event_open
    return perf.perf_event_attr(type=pmu, config1=ctypes.addressof(name), config2=offset)


@_register("kprobe", "kprobe")
@_attach_probe
def _probe_kprobe():
    pmu = perf.pmu_type("kprobe")
    if pmu is None:
        tracing = mounted_tracefs()
        if tracing and os.path.exists(os.path.join(tracing, "kprobe_events")):
            return _result(UNKNOWN, "no kprobe PMU, only legacy kprobe_events (not probed)")
        raise _Failed("find", 0, reason="CONFIG_KPROBES is off (no kprobe PMU)",
                      detail="no /sys/bus/event_source/devices/kprobe, no kprobe_events")
    function = _kernel_function()
    if function is None:
        raise _Failed("find", 0, reason="neither vfs_read nor ksys_read in /proc/kallsyms")
    keep: list = []
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.KPROBE)
        _attach_perf_event(stack, prog, _probe_pmu_attr(pmu, function.encode(), 0, keep))
    return _result(SUPPORTED, f"attached to {function}", value=function)


@_register("fentry", "fentry")
@_attach_probe
def _probe_fentry():
    _trace_prog(AttachType.TRACE_FENTRY, "vfs_read")
    return _result(SUPPORTED, "attached to vfs_read")


@_register("fexit", "fexit")
@_attach_probe
def _probe_fexit():
    _trace_prog(AttachType.TRACE_FEXIT, "vfs_read")
    return _result(SUPPORTED, "attached to vfs_read")


@_register("lsm", "BPF LSM program")
@_attach_probe
def _probe_lsm():
    lsms = active_lsms()
    listed = ",".join(lsms) if lsms is not None else "unknown"
    try:
        _trace_prog(AttachType.LSM_MAC, "bpf_lsm_file_open")
    except _Failed as exc:
        if exc.err == 0 and "bpf_lsm_file_open" in exc.reason:
            exc.reason = "kernel BTF has no bpf_lsm_file_open (CONFIG_BPF_LSM is off)"
        exc.detail = (exc.detail + "; " if exc.detail else "") + f"active LSMs: {listed}"
        raise
    if lsms is None:
        return _result(SUPPORTED, f"attached to file_open ({_lsm_read_error()})")
    if "bpf" not in lsms:
        # loads and attaches, yet would never run
        return _result(UNSUPPORTED, f"bpf not in active LSMs: {listed}", value=lsms)
    return _result(SUPPORTED, "attached to file_open; bpf is an active LSM", value=lsms)


def _elf_entry_offset(path: str) -> int:
    """The file offset of an ELF64 executable's entry point (e_entry inside its PT_LOAD)."""
    with open(path, "rb") as f:
        ident = f.read(16)
        if ident[:4] != b"\x7fELF" or ident[4] != 2:
            raise ValueError(f"{path} is not a 64-bit ELF file")
        order = "<" if ident[5] == 1 else ">"
        header = f.read(48)
        entry, phoff = struct.unpack_from(order + "QQ", header, 8)
        phentsize, phnum = struct.unpack_from(order + "HH", header, 38)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack(
                order + "IIQQQQ", f.read(40))
            if p_type == 1 and p_vaddr <= entry < p_vaddr + p_filesz:  # PT_LOAD
                return entry - p_vaddr + p_offset
    raise ValueError(f"{path}: entry point {entry:#x} is in no loadable segment")


@_register("uprobe", "uprobe")
@_attach_probe
def _probe_uprobe():
    pmu = perf.pmu_type("uprobe")
    if pmu is None:
        raise _Failed("find", 0, reason="CONFIG_UPROBE_EVENTS is off (no uprobe PMU)")
    binary = os.path.realpath(sys.executable)
    try:
        offset = _elf_entry_offset(binary)
    except (OSError, ValueError, struct.error) as exc:
        return _result(UNKNOWN, f"cannot find an entry point in {binary}: {exc}")
    keep: list = []
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.KPROBE)
        _attach_perf_event(stack, prog, _probe_pmu_attr(pmu, os.fsencode(binary), offset, keep))
    return _result(SUPPORTED, f"attached to {os.path.basename(binary)}+{offset:#x}")


@_register("uprobe_multi", "uprobe_multi links (many uprobes, one link)")
@_attach_probe
def _probe_uprobe_multi():
    """A link on "/" is refused for not being a file (EBADF) only by a kernel that knows the
    link; one that also refuses an invalid pid (EINVAL) filters by process, not thread (the
    first kernels with it filtered by thread: libbpf does not use them either)."""
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.KPROBE, expected_attach_type=AttachType.TRACE_UPROBE_MULTI)
        path, offset = ctypes.create_string_buffer(b"/"), (ctypes.c_uint64 * 1)(0)
        for pid, expected in ((0, _errno.EBADF), (0xFFFFFFFF, _errno.EINVAL)):
            attr = L.bpf_attr_uprobe_multi(
                prog_fd=prog, attach_type=AttachType.TRACE_UPROBE_MULTI, path=ctypes.addressof(path),
                offsets=ctypes.addressof(offset), cnt=1, pid=pid)
            fd = L.bpf_syscall(L.BPF_LINK_CREATE, attr)
            if fd >= 0:
                os.close(fd)
            if -fd != expected:
                reason = ("" if pid == 0 else
                          "this kernel's uprobe_multi filters by thread, not process (fixed in 6.10)")
                raise _Failed("attach", abs(fd) if fd < 0 else 0, reason=reason)
    return _result(SUPPORTED, "a uprobe_multi link was refused for what it named, not for its kind")


@_register("perf_event", "perf_event (cpu-clock sampling)")
@_attach_probe
def _probe_perf_event():
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.PERF_EVENT)
        _attach_perf_event(stack, prog, perf.sampling_attr(period=10**9), cpu=0)  # 1 s: ~never fires
    return _result(SUPPORTED, "attached to cpu-clock on cpu 0")


@_register("pmu", "hardware PMU (cycles NMI)")
def _probe_pmu(name, lbl):
    from ..sysinfo.events import EVENT_SOURCES, hardware_pmu

    if hardware_pmu():
        return Probe(name, lbl, SUPPORTED, f"{EVENT_SOURCES} has the CPU's PMU")
    return Probe(name, lbl, UNSUPPORTED, f"{EVENT_SOURCES} has no cpu PMU (a VM without a virtual "
                 "PMU, or none exposed): only software clocks sample")


@_register("preemptirq", "preemptirq tracepoints (irq_disable/irq_enable)")
def _probe_preemptirq(name, lbl):
    from ..sysinfo.events import tracepoint_exists

    tracing = mounted_tracefs()
    if tracing is None:
        return Probe(name, lbl, UNKNOWN, "tracefs is not mounted: cannot list tracepoints")
    if tracepoint_exists("preemptirq", "irq_disable", tracing):
        return Probe(name, lbl, SUPPORTED, f"{tracing}/events/preemptirq/irq_disable exists")
    return Probe(name, lbl, UNSUPPORTED, "no preemptirq/irq_disable tracepoint (CONFIG_TRACE_IRQFLAGS "
                 "with CONFIG_PREEMPTIRQ_TRACEPOINTS: distribution kernels have it off)")


# --- networking: XDP and tc on a veth pair inside a throwaway network namespace ----------

_XDP_PASS, _TCX_NEXT = 2, -1


def _in_fresh_netns(work: Callable[[int], dict]) -> dict:
    """Run ``work(ifindex of a veth)`` inside a throwaway network namespace (a thread of its
    own enters it), which is deleted with the veth pair afterwards."""
    from ..net import NetNS, create_veth
    from ..net.netns import reap_orphans

    reap_orphans("probe")  # a probe killed mid-way left its namespace: the next one removes it
    with NetNS("probe") as ns:
        pair = create_veth(ns, names=("ebpfkit0", "ebpfkit1"), addresses=(None, None))
        return ns.run(work, pair.a.ifindex)


def _catch(fn: Callable[[], tuple]) -> tuple | _Failed:
    try:
        return fn()
    except _Failed as exc:
        return exc


def _xdp_attach(ifindex: int, flags: int) -> tuple:
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.XDP, ret=_XDP_PASS, expected_attach_type=AttachType.XDP)
        _link_create(stack, prog, ifindex, AttachType.XDP, flags)
    return _result(SUPPORTED, "attached to a veth in a throwaway netns")


def _tc_attach(ifindex: int) -> tuple:
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.SCHED_CLS, ret=_TCX_NEXT)
        opts = L.bpf_link_create_opts()
        fd = L.lib.bpf_link_create(prog, ifindex, AttachType.TCX_INGRESS, ctypes.byref(opts))
        if fd >= 0:
            stack.callback(os.close, fd)
            return _result(SUPPORTED, "tcx link on a veth in a throwaway netns", value="tcx")
        if -fd not in (_errno.EINVAL, _errno.EOPNOTSUPP, 524):
            raise _Failed("attach", -fd)
        _tc_clsact(prog, ifindex)  # kernels < 6.6: no tcx links
    return _result(SUPPORTED, "clsact on a veth in a throwaway netns (no tcx links here)", value="clsact")


def _tc_clsact(prog: int, ifindex: int) -> None:
    hook = L.bpf_tc_hook(ifindex=ifindex, attach_point=1)  # BPF_TC_INGRESS
    err = L.lib.bpf_tc_hook_create(ctypes.byref(hook))
    if err and -err != _errno.EEXIST:
        raise _Failed("attach", -err)
    try:
        opts = L.bpf_tc_opts(prog_fd=prog)
        err = L.lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
        if err:
            raise _Failed("attach", -err)
    finally:
        L.lib.bpf_tc_hook_destroy(ctypes.byref(hook))  # removes the filter with the qdisc


def _fq_qdisc(ifindex: int) -> tuple:
    """fq as a veth's root qdisc (EDT pacing holds packets there); the kernel loads sch_fq."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    with IPRoute() as ipr:  # in the throwaway namespace this thread is in
        try:
            ipr.tc("replace", "fq", ifindex, 0x10000)
        except NetlinkError as exc:
            raise _Failed("qdisc", exc.code, reason=f"no fq qdisc here ({_errname(exc.code)}: "
                          "CONFIG_NET_SCH_FQ is off, or sch_fq cannot be loaded)") from None
    return _result(SUPPORTED, "fq set up on a veth in a throwaway netns")


@functools.cache
def _net_group() -> dict:
    """xdp_native, xdp_generic, tc and fq, all in one throwaway netns (results or _Failed)."""
    def work(ifindex: int) -> dict:
        return {"xdp_native": _catch(lambda: _xdp_attach(ifindex, XDP_FLAGS_DRV_MODE)),
                "xdp_generic": _catch(lambda: _xdp_attach(ifindex, XDP_FLAGS_SKB_MODE)),
                "tc": _catch(lambda: _tc_attach(ifindex)),
                "fq": _catch(lambda: _fq_qdisc(ifindex))}
    try:
        return _in_fresh_netns(work)
    except _Failed as exc:
        return {"__error__": exc}
    except ImportError as exc:
        return {"__error__": _Failed("setup", 0, reason=f"pyroute2 is missing: {exc}")}
    except Exception as exc:  # netlink errors: we could not tell
        return {"__unknown__": f"cannot set up a veth pair in a network namespace: {exc}"}


def _group_member(group: Callable[[], dict], key: str) -> Callable[[], tuple]:
    def run() -> tuple:
        results = group()
        if "__unknown__" in results:
            return _result(UNKNOWN, results["__unknown__"])
        found = results.get("__error__") or results[key]
        if isinstance(found, _Failed):
            raise found
        return found
    return run


for _name, _label in [("xdp_native", "XDP (native, veth driver)"), ("xdp_generic", "XDP (generic)"),
                      ("tc", "tc (tcx link, or clsact)"), ("fq", "fq qdisc (EDT pacing)")]:
    _register(_name, _label)(_attach_probe(_group_member(_net_group, _name)))


# --- cgroup hooks on a child cgroup we create, and sk_msg on a SOCKHASH -----------------

def _cgroup_attach(cgfd: int, prog_type: ProgType, attach_type: AttachType, ret: int) -> tuple:
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, prog_type, ret=ret, expected_attach_type=attach_type)
        how = _link_or_prog_attach(stack, prog, cgfd, attach_type)
    return _result(SUPPORTED, f"attached to a child cgroup ({how})")


@functools.cache
def _cgroup_group() -> dict:
    from ..sysinfo.cgroups import cgroup2_mount

    root = cgroup2_mount()
    if root is None:
        return {"__error__": _Failed("find", 0, reason="no cgroup v2 mounted")}
    path = os.path.join(root, f"{CGROUP_PREFIX}{os.getpid()}")
    try:
        os.mkdir(path)
    except FileExistsError:
        pass  # left by a crashed run of this pid: reuse, then remove
    except OSError as exc:
        return {"__error__": _Failed("mkdir", exc.errno, reason=f"cannot create {path}: {exc.strerror}")}
    try:
        cgfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return {
                "sockops": _catch(lambda: _cgroup_attach(cgfd, ProgType.SOCK_OPS,
                                                         AttachType.CGROUP_SOCK_OPS, 1)),
                "cgroup_skb": _catch(lambda: _cgroup_attach(cgfd, ProgType.CGROUP_SKB,
                                                            AttachType.CGROUP_INET_INGRESS, 1)),
                "cgroup_sock_addr": _catch(lambda: _cgroup_attach(
                    cgfd, ProgType.CGROUP_SOCK_ADDR, AttachType.CGROUP_INET4_CONNECT, 1)),
            }
        finally:
            os.close(cgfd)
    finally:
        os.rmdir(path)


for _name, _label in [("sockops", "sockops (cgroup)"), ("cgroup_skb", "cgroup_skb (ingress)"),
                      ("cgroup_sock_addr", "cgroup sock_addr (connect4)")]:
    _register(_name, _label)(_attach_probe(_group_member(_cgroup_group, _name)))


def _sockhash_attach(prog_type: ProgType, attach_type: AttachType) -> tuple:
    """A program of ``prog_type`` attached to a one-entry SOCKHASH as ``attach_type``."""
    with contextlib.ExitStack() as stack:
        map_fd = L.lib.bpf_map_create(MapType.SOCKHASH, b"ebpfkit_probe", 4, 4, 1, None)
        if map_fd < 0:
            raise _Failed("create", -map_fd, reason=f"cannot create a SOCKHASH map ({_errname(-map_fd)})")
        stack.callback(os.close, map_fd)
        prog = _loaded(stack, prog_type, ret=1, expected_attach_type=attach_type)
        how = _link_or_prog_attach(stack, prog, map_fd, attach_type)
    return _result(SUPPORTED, f"attached to a SOCKHASH ({how})")


@_register("sk_msg", "sk_msg (SOCKHASH)")
@_attach_probe
def _probe_sk_msg():
    return _sockhash_attach(ProgType.SK_MSG, AttachType.SK_MSG_VERDICT)


@_register("sk_skb_verdict", "sk_skb verdict (BPF_SK_SKB_VERDICT, 5.13)")
@_attach_probe
def _probe_sk_skb_verdict():
    """A verdict on received skbs without a stream parser (5.13): older kernels load the
    program and refuse the attach type (EINVAL)."""
    return _sockhash_attach(ProgType.SK_SKB, AttachType.SK_SKB_VERDICT)


# helpers a tool needs: (program type, enum bpf_func_id's number from libbpf's
# bpf_helper_defs.h, label): tc's fast paths; iofsstat's path walk (bpf_loop, 5.17)
_HELPERS = {"redirect_neigh": (ProgType.SCHED_CLS, 152, "tc helper bpf_redirect_neigh"),
            "redirect_peer": (ProgType.SCHED_CLS, 155, "tc helper bpf_redirect_peer"),
            "bpf_loop": (ProgType.TRACEPOINT, 181, "helper bpf_loop (5.17)")}


def _helper_probe(prog_type: ProgType, helper_id: int):
    def run(name: str, lbl: str) -> Probe:
        found = have_helper(prog_type, helper_id)
        return Probe(name, lbl, found.status, found.reason)
    return run


for _name, (_type, _number, _label) in _HELPERS.items():
    _register(_name, _label)(_helper_probe(_type, _number))


def _xdp_test_run(flags: int = 0):
    """An XDP_PASS program run once on a 64-byte packet; its opts (retval, duration)."""
    with contextlib.ExitStack() as stack:
        prog = _loaded(stack, ProgType.XDP, ret=_XDP_PASS, expected_attach_type=AttachType.XDP)
        packet = ctypes.create_string_buffer(64)
        out = ctypes.create_string_buffer(256)
        live = flags & BPF_F_TEST_XDP_LIVE_FRAMES  # live frames have no output packet
        opts = L.bpf_test_run_opts(data_in=ctypes.cast(packet, ctypes.c_void_p), data_size_in=64,
                                   data_out=None if live else ctypes.cast(out, ctypes.c_void_p),
                                   data_size_out=0 if live else 256, repeat=1, flags=flags)
        err = L.lib.bpf_prog_test_run_opts(prog, ctypes.byref(opts))
        if err:
            raise _Failed("test-run", -err, f"the kernel refused to send an XDP test run's frame live "
                                            f"({_errname(-err)})" if live else "")
    return opts


@_register("prog_test_run", "BPF_PROG_TEST_RUN")
@_attach_probe
def _probe_test_run():
    opts = _xdp_test_run()
    if opts.retval != _XDP_PASS:
        return _result(UNKNOWN, f"test run returned {opts.retval}, expected XDP_PASS")
    return _result(SUPPORTED, f"an XDP program ran on a 64-byte packet ({opts.duration} ns)")


@_register("xdp_live_frames", "BPF_PROG_RUN with live XDP frames")
@_attach_probe
def _probe_xdp_live_frames():
    """Frames a test run's XDP verdict sends for real (XDP_PASS: into this host's stack), the
    packet generator the tests use; some kernels refuse it (EPERM) even to root."""
    _xdp_test_run(BPF_F_TEST_XDP_LIVE_FRAMES)
    return _result(SUPPORTED, "an XDP program's frame went live")


# --- what to do about a missing feature ------------------------------------------------

_LSM_HINT = "boot a kernel built with CONFIG_BPF_LSM=y with lsm=...,bpf on its command line"
_TRAMPOLINE_HINT = ("use a kernel whose BPF trampolines are built and not locked "
                    "(CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y)")
_CGROUP_HINT = "needs cgroup v2 (mount -t cgroup2 none /sys/fs/cgroup) and CONFIG_CGROUP_BPF=y"
HINTS = {
    "btf": BTF_SOURCES_HINT,
    "kernel_btf": "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y: BTF-typed hooks (tp_btf, fentry/fexit, "
                  "LSM, struct_ops) are checked against the kernel's own BTF",
    "libbpf": "install libbpf >= 1.0",
    "clang": "install clang >= 11 (apt-get install clang) or set EBPFKIT_CLANG",
    "type_walk": "apt-get install gcc python3-dev, then reinstall ebpfkit (scripts/setup.sh does both)",
    "bpffs": "as root: mount -t bpf bpf /sys/fs/bpf",
    "tracefs": "as root: mount -t tracefs tracefs /sys/kernel/tracing",
    "lockdown": "boot with lockdown=integrity (or none): confidentiality forbids BPF kernel reads",
    "lsm_active": _LSM_HINT,
    "lsm": _LSM_HINT,
    "tracepoint": "needs CONFIG_TRACEPOINTS and CONFIG_PERF_EVENTS, and tracefs "
                  "(mount -t tracefs tracefs /sys/kernel/tracing)",
    "raw_tp": "needs a kernel >= 4.17",
    "task_storage": "needs a kernel >= 5.11 (BPF_MAP_TYPE_TASK_STORAGE)",
    "sched_info": "needs a kernel built with CONFIG_SCHEDSTATS or CONFIG_TASK_DELAY_ACCT (both are "
                  "on in every major distribution's kernel)",
    "tp_btf": "needs a kernel >= 5.5 with BTF (CONFIG_DEBUG_INFO_BTF=y); use tracepoints instead",
    "kprobe": "use a kernel with CONFIG_KPROBES=y, or a tracepoint (best_hook() picks one)",
    "fentry": _TRAMPOLINE_HINT + "; kprobes or tracepoints are the fallback",
    "fexit": _TRAMPOLINE_HINT + "; kretprobes or tracepoints are the fallback",
    "uprobe": "use a kernel with CONFIG_UPROBE_EVENTS=y",
    "perf_event": "needs CONFIG_PERF_EVENTS; check /proc/sys/kernel/perf_event_paranoid",
    "pmu": "needs a hardware PMU the kernel exposes (bare metal, or a VM with a virtual PMU)",
    "preemptirq": "needs a kernel built with CONFIG_PREEMPTIRQ_TRACEPOINTS (and tracefs mounted)",
    "xdp_native": "the device's driver has no native XDP: use generic mode",
    "xdp_generic": "needs a kernel >= 4.12 with XDP (CONFIG_BPF_SYSCALL, CONFIG_NET)",
    "tc": "needs CONFIG_NET_CLS_BPF and CONFIG_NET_SCH_INGRESS (tcx links need >= 6.6)",
    "sockops": _CGROUP_HINT,
    "cgroup_skb": _CGROUP_HINT,
    "cgroup_sock_addr": _CGROUP_HINT,
    "sk_msg": "needs CONFIG_BPF_STREAM_PARSER=y",
    "sk_skb_verdict": "needs a kernel >= 5.13 (the BPF_SK_SKB_VERDICT attach type)",
    "prog_test_run": "needs a kernel >= 4.12 (BPF_PROG_TEST_RUN)",
    "xdp_live_frames": "needs a kernel >= 5.18 that lets BPF_PROG_RUN send XDP frames (some refuse it: EPERM)",
    "redirect_neigh": "needs a kernel >= 5.10",
    "bpf_loop": "needs a kernel >= 5.17 (bpf_loop)",
    "fq": "needs a kernel built with CONFIG_NET_SCH_FQ (modprobe sch_fq)",
    "redirect_peer": "needs a kernel >= 5.10",
}
