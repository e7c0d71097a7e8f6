"""Pseudo-filesystems the engine needs, mounted on demand: bpffs for pins, tracefs for
tracepoints (what is mounted is read through ``ebpfkit.sysinfo.mounts``).

They are not mounted at boot on every machine; root can mount them on demand.
"""

from __future__ import annotations

import os

from ..errors import NotSupportedError, PermissionDeniedError
from ._log import get_logger

log = get_logger("ebpfkit.engine.mounts")

BPFFS = "/sys/fs/bpf"
TRACEFS = "/sys/kernel/tracing"
DEBUGFS_TRACING = "/sys/kernel/debug/tracing"
SECURITYFS = "/sys/kernel/security"
PIN_ROOT = BPFFS + "/ebpfkit"


def mounted(path: str, fstype: str) -> bool:
    from ..sysinfo.mounts import MountTable  # read only when asked: not at each import of the engine

    return MountTable().has(path, fstype)


def mount(fstype: str, path: str) -> None:
    from . import _libbpf as L

    os.makedirs(path, exist_ok=True)
    if L.libc.mount(fstype.encode(), path.encode(), fstype.encode(), 0, None) != 0:
        err = L.errno()
        if err == 1:
            raise PermissionDeniedError(f"mounting {fstype} at {path} needs root",
                                        hint=f"run as root, or: mount -t {fstype} {fstype} {path}")
        raise NotSupportedError(fstype, f"cannot mount {fstype} at {path}: {os.strerror(err)}",
                                hint=f"mount -t {fstype} {fstype} {path}")
    log.info("mounted %s at %s", fstype, path)


def ensure_bpffs() -> str:
    if not mounted(BPFFS, "bpf"):
        mount("bpf", BPFFS)
    return BPFFS


def ensure_tracefs() -> str:
    """The tracing directory (tracefs), mounted if needed."""
    if mounted(TRACEFS, "tracefs"):
        return TRACEFS
    if os.path.exists(os.path.join(DEBUGFS_TRACING, "events")):
        return DEBUGFS_TRACING
    mount("tracefs", TRACEFS)
    return TRACEFS
