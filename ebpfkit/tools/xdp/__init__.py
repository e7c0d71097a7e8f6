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

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["open_filter", "open_lb", "attached_filter", "attached_lb", "FilterSession", "LbSession"],
    "filter": ["FilterConfig"],
    "lb": ["LbConfig"],
    "rules": ["parse_rule"],
})
