"""memleak: outstanding allocations by stack, to find memory a program allocated and never
freed, without changing or restarting it (user mode: -p PID or -c CMD).

``session`` is the tool (Config -> open() -> Session.sample()); ``libraries`` chooses the
files and functions to probe (glibc, jemalloc, tcmalloc, -O); ``stacks`` symbolizes a stack;
``cli`` is `ebpfkit memleak`; ``memleak.bpf.c`` and ``memleak.h`` are its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Allocation", "Config", "Sample", "Session", "StackAllocs", "open"],
})
