"""runqlat: scheduler run-queue latency as log2 histograms.

``session`` is the tool (Config -> open() -> Session.sample()); ``cli`` is `ebpfkit runqlat`;
``runqlat.bpf.c`` and ``runqlat.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Session", "open"],
})
