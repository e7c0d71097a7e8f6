"""What the filter's and the load balancer's counters say, as data.

``FilterStats(tables, iface).sample()`` and ``LbStats(...).sample()`` return one document per
call: per-rule (per-backend) packets and bytes, the totals and, from the second call on,
pps/bps since the previous one. The sessions (session.py) hand them out; ``tables`` is a
running program's maps (an ``attach()``'s ``.tables``, or ``filter.open_pinned(iface)`` /
``lb.open_pinned(iface)``); ``iface`` and ``netns`` name where it was attached.
"""

from __future__ import annotations

import time


def _rate(now: int, before: int | None, seconds: float | None):
    if before is None or not seconds:
        return None
    return round((now - before) / seconds, 1)


def _counter_row(row: dict, counter: tuple, before, seconds) -> dict:
    """``row`` with packets and bytes, and pps and bps since ``before`` (the previous sample)."""
    pk, by = counter
    return {**row, "packets": pk, "bytes": by, "pps": _rate(pk, before and before[0], seconds),
            "bps": _rate(8 * by, before and 8 * before[1], seconds)}


class _CounterView:
    """Counters of a pinned XDP program as rows, with rates since the previous sample."""

    def __init__(self, tables, iface: str | None = None, netns: str | None = None):
        self.tables, self.iface, self.netns = tables, iface, netns
        self.prev: dict = {}
        self.prev_totals: dict = {}
        self.when: float | None = None

    def _document(self, name: str, items, counters: dict, config: dict, totals: dict) -> dict:
        """``items``: (key, row) per counted thing; ``counters``: key -> (packets, bytes)."""
        from ...output.values import iso_time, now

        t = time.monotonic()
        seconds = t - self.when if self.when is not None else None
        rows = [_counter_row(row, counters.get(key, (0, 0)), self.prev.get(key), seconds) for key, row in items]
        total_rows = [_counter_row({"counter": n}, c, self.prev_totals.get(n), seconds) for n, c in totals.items()]
        self.prev, self.prev_totals, self.when = counters, totals, t
        return {"time": iso_time(now()), "interval": round(seconds, 6) if seconds else None,
                "iface": self.iface, "netns": self.netns, **config,
                name: rows, "totals": total_rows}


class FilterStats(_CounterView):
    """A filter's per-rule and per-action counters."""

    def sample(self) -> dict:
        texts = self.tables.rule_texts()
        counters = self.tables.rule_counters(texts)
        return self._document("rules", [(rid, {"id": rid, "rule": text}) for rid, text in texts.items()],
                              counters, self.tables.config().to_dict(), self.tables.totals(counters))


class LbStats(_CounterView):
    """A load balancer's per-backend counters and totals."""

    def sample(self) -> dict:
        backends = self.tables.backends()
        counters = self.tables.backend_counters()
        items = [(b.slot, {"slot": b.slot, "backend": b.name, "weight": b.weight}) for b in backends]
        return self._document("backends", items, counters, self.tables.config(), self.tables.totals())
