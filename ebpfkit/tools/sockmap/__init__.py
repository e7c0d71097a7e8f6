"""Socket-level acceleration between local TCP sockets (sockops + sk_msg + SOCKHASH).

    from ebpfkit.tools import sockmap
    with sockmap.Accelerator("/sys/fs/cgroup/unified/mygroup") as acc:   # foreground
        ...; acc.status()
    sockmap.enable(cgroup, sockmap.Options(ports=(8080,)))   # pinned, outlives the process
    sockmap.status(); sockmap.disable(cgroup)
"""

from .cgroups import SockmapUsageError, resolve_cgroup
from .core import (Accelerator, AlreadyEnabled, Enablement, Options, disable, enable, enablements,
                   find)
from .regression import RegressionCheck, detect

__all__ = ["Accelerator", "AlreadyEnabled", "Enablement", "Options", "RegressionCheck",
           "SockmapUsageError", "detect", "disable", "enable", "enablements", "find",
           "resolve_cgroup", "status"]


def status(cgroup: str | None = None, all_cgroups: bool = True) -> list[dict]:
    """One record per pinned enablement (or only ``cgroup``'s)."""
    if cgroup is not None:
        found = find(cgroup)
        return [found.status()] if found and found.complete else []
    return [e.status() for e in enablements() if e.complete]
