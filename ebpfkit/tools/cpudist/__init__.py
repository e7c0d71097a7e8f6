"""cpudist: time on CPU (or off CPU) per scheduling, as log2 histograms.

``session`` is the tool (Config -> open() -> Session.sample()); ``cli`` is `ebpfkit cpudist`;
``cpudist.bpf.c`` (on ``programs/include/ek_task_times.h``) is its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Session", "open"],
})
