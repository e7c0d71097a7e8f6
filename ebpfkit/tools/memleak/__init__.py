"""memleak: outstanding allocations by stack, to find memory a program allocated and never
freed, without changing or restarting it (user mode: -p PID or -c CMD; kernel mode without).

``session`` is the tool (Config -> open() -> Session.sample()); ``libraries`` chooses the
files and functions to probe (glibc, jemalloc, tcmalloc, -O); ``stacks`` symbolizes a stack;
``kernel`` picks kernel mode's tracepoints and symbolizes its stacks; ``triage`` is --triage;
``cli`` is `ebpfkit memleak`; ``memleak.bpf.c`` (user mode), ``memleak_kernel.bpf.c`` (kernel
mode), ``memleak_record.h`` (what both record) and ``memleak.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Allocation", "Config", "Sample", "Session", "StackAllocs", "open"],
})
