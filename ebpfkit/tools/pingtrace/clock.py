"""A pingtrace server's clock seen from the client (its entries are stamped with the server's
CLOCK_MONOTONIC, which has nothing to do with the client's)."""

from __future__ import annotations

from collections import deque


class ClockFilter:
    """The offset of a server's clock from this host's, from the probes' own timestamps, as
    NTP does: T1 the request leaving this host's namespace (its last request checkpoint
    there), T2 its first checkpoint on the server, T3 the reply leaving the server (egress),
    T4 the reply back in this namespace (first reply checkpoint). Then offset = ((T2 - T1) +
    (T3 - T4)) / 2, exact when both directions of the network take the same time, and in
    error by at most half the network's part of the round trip, delay / 2 with delay =
    (T4 - T1) - (T3 - T2). The estimate used is the one of least delay among the last
    ``window`` probes: the tightest bound, and it follows a drifting clock."""

    def __init__(self, window: int = 64):
        self._samples: deque = deque(maxlen=window)

    def add(self, t1: int, t2: int, t3: int, t4: int) -> None:
        delay = (t4 - t1) - (t3 - t2)
        if delay >= 0:
            self._samples.append((delay, ((t2 - t1) + (t3 - t4)) / 2))

    @property
    def estimate(self) -> tuple[float, float] | None:
        """(offset ns, bound ns), or None before a usable probe."""
        if not self._samples:
            return None
        delay, offset = min(self._samples)
        return offset, delay / 2
