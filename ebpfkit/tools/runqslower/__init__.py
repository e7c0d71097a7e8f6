"""runqslower: each run-queue wait longer than a threshold, with the waker and the previous task.

``session`` is the tool (Config -> open() -> Session.events()); ``cli`` is `ebpfkit runqslower`;
``runqslower.bpf.c`` and ``runqslower.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Session", "Wakeup", "open"],
})
