"""offcputime: time tasks spent off the CPU (blocked, sleeping, preempted), summed by thread
and by the kernel and user stacks they left the CPU with.

``session`` is the tool (Config -> open() -> Session.sample()); ``folded`` turns its entries
into the folded stacks flame graph tools read; ``cli`` is `ebpfkit offcputime`;
``offcputime.bpf.c`` and ``offcputime.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "OffCpu", "Session", "open"],
    "folded": ["folded_lines"],
})
