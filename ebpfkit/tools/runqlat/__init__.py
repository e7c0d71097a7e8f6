"""runqlat: scheduler run-queue latency as log2 histograms.

``session`` is the tool (Config -> open() -> Session.sample()); ``cli`` is `ebpfkit runqlat`;
``runqlat.bpf.c`` and ``runqlat.h`` are its kernel side."""

from .session import Config, Session, open  # noqa: A004 - the session verb

__all__ = ["Config", "Session", "open"]
