"""When pingtrace's next probe goes."""

from __future__ import annotations

MODES = ("auto", "pingpong", "compact")


class Pacer:
    """When the next probe goes (sysak's ``--mode``, which its documentation names without defining):

    - ``compact``: every interval, however many are unanswered: a steady rate, so a spike
      shorter than the RTT is still sampled;
    - ``pingpong``: one probe at a time, the next an interval after the last one's reply (or
      loss): probes never queue behind each other, and each reply's wakeup is its own;
    - ``auto``: every interval, but never while one is unanswered: the rate of ``compact``
      while replies keep up, no overlap when they do not.
    """

    def __init__(self, mode: str, interval: float, start: float):
        self.mode, self.interval, self.next = mode, interval, start

    def waits_for_reply(self, in_flight: int) -> bool:
        return in_flight > 0 and self.mode != "compact"

    def due(self, now: float, in_flight: int) -> bool:
        return not self.waits_for_reply(in_flight) and now >= self.next

    def sent(self, now: float) -> None:
        self.next = max(self.next + self.interval, now - self.interval)  # no burst after a stall

    def finished(self, now: float) -> None:
        """A probe was answered or given up as lost at ``now``."""
        if self.mode == "pingpong":
            self.next = now + self.interval
