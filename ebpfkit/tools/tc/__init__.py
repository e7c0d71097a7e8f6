"""tc: a node's fast path between its endpoints' namespaces and out of it (redirect).

``session`` is the tool from Python: ``open_redirect`` (foreground), ``attach_redirect``
(pinned), ``attached_redirect`` (what an attach left), ``detach_redirect``; ``ratelimit``:
``open_ratelimit`` (EDT pacing with fq), ``attach_ratelimit``, ``attached_ratelimit``,
``detach_ratelimit``; ``cli`` is
`ebpfkit tc`. Modules: ``endpoints`` (an endpoint's veth, MACs and addresses, through
pyroute2), ``pins`` (where an attach leaves it), ``lab`` (a node made of namespaces, to try
it on, test and measure it); ``tc_redirect.bpf.c`` and ``tc.h`` its kernel side.

The names below are imported on first use: `ebpfkit tc --help` loads none of the engine.
"""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["RedirectConfig", "RedirectSession", "AttachedRedirect", "open_redirect", "attach_redirect",
                "attached_redirect", "detach_redirect"],
    "endpoints": ["Endpoint"],
    "ratelimit": ["RateLimitConfig", "RateLimitSession", "AttachedRateLimit", "open_ratelimit", "attach_ratelimit",
                  "attached_ratelimit", "detach_ratelimit"],
})
