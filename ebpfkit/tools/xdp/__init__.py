"""XDP networking: the packet filter (rules in LPM tries, changed atomically while traffic
flows) and the Maglev load balancer, with the pins that let them outlive the command.

``session`` is the tool from Python (``open_filter`` / ``open_lb`` -> a session whose
``sample()`` is the counters; ``attached_filter`` / ``attached_lb`` for a program `attach`
left); ``cli`` is `ebpfkit xdp`. Modules: ``rules`` (rule model, YAML, validation),
``filter``, ``maglev`` (pure Python table), ``lb``, ``pins`` (pin directories, interfaces in
namespaces), ``tables`` (a program's maps as a set, live or pinned), ``counters`` (the
programs' per-CPU counters), ``stats`` (counters as documents), ``modes`` (attach modes).

The names below are imported on first use: `ebpfkit xdp --help` loads none of the engine.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "open_filter": "session", "open_lb": "session", "attached_filter": "session", "attached_lb": "session",
    "FilterSession": "session", "LbSession": "session",
    "FilterConfig": "filter", "LbConfig": "lb", "parse_rule": "rules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
