"""memleak's kernel mode (no -p/-c): which of memleak_kernel.bpf.c's programs this kernel
can run, and kernel stacks as frames a person reads.

Each program is a BTF-typed tracepoint; one whose tracepoint this kernel lacks is not loaded
(kmalloc_node and kmem_cache_alloc_node exist only before 6.1), so one object serves old and
new kernels. The kinds (slab, page, percpu) say which allocators to follow: pages are by far
the busiest (the page cache), so leaving them out keeps the allocations map for the rest."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import NotSupportedError

PROGRAM = os.path.join(os.path.dirname(__file__), "memleak_kernel.bpf.c")
KINDS = ("slab", "page", "percpu")


@dataclass(frozen=True)
class Hook:
    program: str
    tracepoint: str
    kind: str


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
    used (what `-v` shows). Exit 3 without the kernel's own BTF (tp_btf needs it)."""
    from ...engine import features

    have = features.kernel_btf_names({f"btf_trace_{h.tracepoint}" for h in HOOKS})
    if not have:
        raise NotSupportedError("kernel_btf", "kernel mode attaches to BTF-typed tracepoints (tp_btf): "
                                "this kernel exposes no BTF of its own (/sys/kernel/btf/vmlinux)",
                                hint="trace a process instead (-p PID or -c CMD)")
    used = []
    for hook in HOOKS:
        load = hook.kind in kinds and f"btf_trace_{hook.tracepoint}" in have
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
