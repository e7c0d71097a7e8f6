"""runqlen: run-queue length by sampling, as linear histograms (or occupancy).

``session`` is the tool (Config -> open() -> Session.sample()); ``cli`` is `ebpfkit runqlen`;
``runqlen.bpf.c`` and ``runqlen.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Session", "open", "occupancy"],
})
