"""memleak's kernel mode (no -p/-c): which of memleak_kernel.bpf.c's programs this kernel
can run, and kernel stacks as frames a person reads.

Each program is a raw tracepoint; one whose tracepoint this kernel lacks (as tracefs lists
them) is not loaded: kmalloc_node and kmem_cache_alloc_node exist only before 6.1, so one
object serves old and new kernels. The kinds (slab, page, percpu) say which allocators to follow: pages are by far
the busiest (the page cache), so leaving them out keeps the allocations map for the rest."""

from __future__ import annotations

import os
from dataclasses import dataclass

PROGRAM = os.path.join(os.path.dirname(__file__), "memleak_kernel.bpf.c")
KINDS = ("slab", "page", "percpu")


@dataclass(frozen=True)
class Hook:
    program: str
    tracepoint: str
    kind: str

    @property
    def group(self) -> str:
        """The tracepoint's group in tracefs."""
        return "percpu" if self.kind == "percpu" else "kmem"


HOOKS = (
    Hook("memleak_kmalloc", "kmalloc", "slab"),
    Hook("memleak_kmalloc_node", "kmalloc_node", "slab"),
    Hook("memleak_kmem_cache_alloc", "kmem_cache_alloc", "slab"),
    Hook("memleak_kmem_cache_alloc_node", "kmem_cache_alloc_node", "slab"),
    Hook("memleak_kfree", "kfree", "slab"),
    Hook("memleak_kmem_cache_free", "kmem_cache_free", "slab"),
    Hook("memleak_page_alloc", "mm_page_alloc", "page"),
    Hook("memleak_page_free", "mm_page_free", "page"),
    Hook("memleak_percpu_alloc", "percpu_alloc_percpu", "percpu"),
    Hook("memleak_percpu_free", "percpu_free_percpu", "percpu"),
)
# the frames of the tracepoint and of memleak's own program, above the allocator's
_TRACING_FRAMES = ("bpf_trace_run", "__bpf_trace_", "__traceiter_", "trace_")


def select_programs(spec, kinds) -> list[str]:
    """Load only the programs of ``kinds`` whose tracepoint this kernel has; the tracepoints
    used (what `-v` shows)."""
    from ...engine.mounts import ensure_tracefs
    from ...sysinfo.events import tracepoint_exists

    root = ensure_tracefs()
    used = []
    for hook in HOOKS:
        load = hook.kind in kinds and tracepoint_exists(hook.group, hook.tracepoint, root)
        spec.programs[hook.program].autoload = load
        if load:
            used.append(hook.tracepoint)
    return used


def kernel_frames(symbolizer, addresses: list[int]) -> list:
    """The frames of one kernel stack (innermost first, by /proc/kallsyms), from the
    allocator on: the tracepoint's and this program's own frames left out."""
    from ...engine.srclines import kernel_source_frames

    frames = [f[0] for f in kernel_source_frames(addresses, kernel=symbolizer.kernel)]
    start = 0
    while start < len(frames) and (frames[start].module == "bpf"
                                   or frames[start].function.startswith(_TRACING_FRAMES)):
        start += 1
    return frames[start:]
