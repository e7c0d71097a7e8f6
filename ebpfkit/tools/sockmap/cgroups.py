"""Checking what `sockmap` is pointed at before anything is loaded: a cgroup v2 directory,
and the privileges to attach there. Both fail as usage errors (exit 2)."""

from __future__ import annotations

from ...errors import EbpfkitError
from ...sysinfo.cgroups import NotCgroup2Error, cgroup2_directory, require_cgroup2

CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF = 12, 21, 39


class SockmapUsageError(EbpfkitError):
    """Bad input to sockmap (cgroup path, privileges): exit 2, nothing attached."""

    exit_code = 2


def resolve_cgroup(path: str | None) -> tuple[str, int]:
    """(real path, cgroup id) of a cgroup v2 directory; ``None`` means the v2 root."""
    try:
        return cgroup2_directory(require_cgroup2() if path is None else path)
    except NotCgroup2Error as exc:
        raise SockmapUsageError(str(exc), hint=exc.hint) from None


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
