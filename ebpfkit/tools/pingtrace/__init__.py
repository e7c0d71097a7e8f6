"""pingtrace: where a network round trip's time goes, checkpoint by checkpoint.

``session`` is the tool (Config -> open() -> Session.probes()); ``wire`` the probe's format;
``cli`` is `ebpfkit pingtrace`; ``pingtrace.bpf.c`` and ``pingtrace.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Checkpoint", "Config", "ProbeResult", "Session", "Stage", "open"],
})
