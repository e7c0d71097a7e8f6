"""irqoff: sections with hard interrupts off, or softirqs off, longer than a threshold.

``session`` is the tool (Config -> open() -> Session.events()); ``cli`` is `ebpfkit irqoff`;
``irqoff.bpf.c`` and ``irqoff.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Section", "Session", "open", "choose_mode", "MODES"],
})
