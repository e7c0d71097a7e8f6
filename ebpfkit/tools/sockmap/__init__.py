"""sockmap: socket-level acceleration between local TCP sockets (sockops + sk_msg + SOCKHASH).

``session`` is the tool from Python (``open(cgroup=...)`` in the foreground, ``attached()``
for an `enable`d cgroup; see its docstring); ``core`` loads, pins and removes; ``cli`` is
`ebpfkit sockmap`; ``sockmap.bpf.c`` and ``sockmap.h`` are its kernel side.

    from ebpfkit.tools import sockmap
    with sockmap.open(cgroup="/sys/fs/cgroup/web") as session:   # foreground, nothing pinned
        ...; session.sample()
    sockmap.enable(cgroup, sockmap.Options(ports=(8080,)))       # pinned, outlives the process
    sockmap.attached(cgroup).sample(); sockmap.status(); sockmap.disable(cgroup)

Names are imported on first use, so `ebpfkit sockmap --help` loads no engine.
"""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Session", "Attached", "NotEnabledError", "open", "attached", "attached_all", "status"],
    "core": ["Accelerator", "AlreadyEnabled", "Enablement", "Options", "disable", "enable", "enablements", "find"],
    "cgroups": ["SockmapUsageError", "resolve_cgroup"],
    "regression": ["RegressionCheck", "detect"],
})
