"""detect: intrusion detection from rules in Falco's format over the kernel's process, network
and fd events.

``session`` is the tool (Config -> open() -> Session.alerts()); ``alerts`` turns matching events
into alerts (fused per process, rate-limited); ``fields`` is what rules can read of an event;
``cli`` is `ebpfkit detect`; ``detect.bpf.c`` and ``detect.h`` are its kernel side, and
``builtin_rules.yaml`` its rules."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "Session", "load_ruleset", "open"],
    "alerts": ["Alert"],
    "fields": ["FIELDS"],
})
