"""iofsstat: file IO per process and file, next to disk IO.

``session`` is the tool (Config -> open() -> Session.sample() per interval); ``views`` its
tables; ``cli`` is `ebpfkit iofsstat`; ``iofsstat.bpf.c`` and ``iofsstat.h`` its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Interval", "Session", "open"],
})
