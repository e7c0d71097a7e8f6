"""hardirqs: how often each hard interrupt handler ran and for how long.

``session`` is the tool (Config -> open() -> Session.sample()); ``cli`` is `ebpfkit hardirqs`;
``hardirqs.bpf.c`` and ``hardirqs.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "IrqStat", "Session", "open"],
})
