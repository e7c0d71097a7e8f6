"""guard: BPF-LSM protection of files and processes, pinned so it outlives its agent.

session: the tool from Python: ``start(policy)``, ``status()``, ``attached().sample()`` (the
         counters of a running guard, read from its pins); see its docstring.
core:    resolve a policy to (dev, ino) keys, fill/swap the pinned maps, stop.
agent:   the process that loads, attaches and pins, then logs violations as JSON lines.
cli:     `ebpfkit guard`; guard.bpf.c and guard.h are its kernel side.

    from ebpfkit.tools import guard
    guard.status()["mode"]; guard.attached().sample()["denied"]

Names are imported on first use, so `ebpfkit guard --help` loads no engine.
"""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Counters", "NotRunningError", "attached", "counters", "require_lsm", "start", "status"],
    "core": ["GuardError", "stop", "reload"],
})
