"""Checking what `sockmap` is pointed at before anything is loaded: a cgroup v2 directory,
and the privileges to attach there. Both fail as usage errors (exit 2)."""

from __future__ import annotations

import os

from ...errors import EbpfkitError
from ...sysinfo.cgroups import CGROUP2_HINT, cgroup2_mount, cgroup_id, require_cgroup2
from ...sysinfo.mounts import MountTable

CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF = 12, 21, 39


class SockmapUsageError(EbpfkitError):
    """Bad input to sockmap (cgroup path, privileges): exit 2, nothing attached."""

    exit_code = 2


def resolve_cgroup(path: str | None) -> tuple[str, int]:
    """(real path, cgroup id) of a cgroup v2 directory; ``None`` means the v2 root."""
    if path is None:
        path = require_cgroup2()
    real = os.path.realpath(path)
    if not os.path.exists(real):
        raise SockmapUsageError(f"cgroup {path} does not exist",
                                hint=f"create it (mkdir) under the cgroup v2 mount {_v2_or_none()}")
    if not os.path.isdir(real):
        raise SockmapUsageError(f"{path} is not a cgroup directory")
    mount = MountTable().containing(real)
    point, fstype = (mount.point, mount.fstype) if mount else ("", "")
    if fstype == "cgroup":
        raise SockmapUsageError(
            f"{path} is on a cgroup v1 hierarchy ({point}); sockops programs attach only to cgroup v2",
            hint=f"use a directory under {_v2_or_none()}")
    if fstype != "cgroup2":
        raise SockmapUsageError(f"{path} is not a cgroup v2 directory (it is on {fstype or 'no'} filesystem)",
                                hint=f"use a directory under {_v2_or_none()}")
    return real, cgroup_id(real)


def _v2_or_none() -> str:
    return cgroup2_mount() or f"(none mounted: {CGROUP2_HINT})"


def effective_caps() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def require_privileges() -> None:
    """sockops/sk_msg need CAP_SYS_ADMIN, or CAP_BPF with CAP_NET_ADMIN (root has them)."""
    caps = effective_caps()
    has = lambda cap: bool(caps >> cap & 1)  # noqa: E731
    if has(CAP_SYS_ADMIN) or (has(CAP_BPF) and has(CAP_NET_ADMIN)):
        return
    raise SockmapUsageError("sockmap needs root (CAP_SYS_ADMIN, or CAP_BPF and CAP_NET_ADMIN) "
                            "to load and attach programs", hint="run it as root (sudo ebpfkit sockmap ...)")
