"""softirqs: how often each softirq vector's handler ran and for how long.

``session`` is the tool (Config -> open() -> Session.sample()); ``cli`` is `ebpfkit softirqs`;
``softirqs.bpf.c`` and ``softirqs.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Session", "SoftirqStat", "open", "vector_names"],
})
