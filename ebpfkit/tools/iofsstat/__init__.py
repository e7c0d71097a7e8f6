"""iofsstat: file IO per process and file, next to disk IO.

``session`` is the tool (Config -> open() -> Session.sample() per interval); ``views`` its
tables; ``cli`` is `ebpfkit iofsstat`; ``iofsstat.bpf.c`` and ``iofsstat.h`` its kernel side."""

from .session import Config, Interval, Session, open  # noqa: A004 - the session verb

__all__ = ["Config", "Interval", "Session", "open"]
