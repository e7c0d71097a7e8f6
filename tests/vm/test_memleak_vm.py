"""memleak's kernel mode on the VM kernels: 6.1 is the one whose kmem tracepoints changed
(kmalloc_node and kmem_cache_alloc_node merged into kmalloc and kmem_cache_alloc, which
broke BCC's memleak: bcc#4384), 6.12 the one before the host's 6.18. The ground truth is the
host test's (tests/integration/tools/memleak/test_memleak_kernel.py): N pipes held open
kmalloc two objects each in alloc_pipe_info, a byte written into each allocates a page, and
closing them frees both. The program is compiled here, against this kernel's BTF.

The same boots as test_prebuilt_vm.py (BPF-LSM on), so a run of both costs one boot a kernel."""

from __future__ import annotations

import pytest

from helpers import PIPE_INFO, PIPE_PAGE, pipe_allocations

pytestmark = [pytest.mark.vm(kernel=["6.1", "6.12"], lsm=True, timeout=1200)]

PIPES = 100
TRACEPOINTS = ["kmalloc", "kmem_cache_alloc", "kfree", "kmem_cache_free", "mm_page_alloc", "mm_page_free",
               "percpu_alloc_percpu", "percpu_free_percpu"]


def test_held_pipes_slab_and_pages_outstanding_until_closed():
    from ebpfkit.tools import memleak

    with memleak.open() as session:  # every kind: slab, page and percpu
        assert session.hooks == TRACEPOINTS  # no kmalloc_node, no kmem_cache_alloc_node here
        slab = pipe_allocations(session, PIPES, PIPE_INFO)
        pages = pipe_allocations(session, PIPES, PIPE_PAGE, written=True)
        counters = session.sample().counters
    for (before, held, after), low in ((slab, PIPES), (pages, PIPES)):
        assert low <= held - before <= 4 * PIPES, (slab, pages)
        assert after - before <= PIPES // 4, (slab, pages)
    assert counters["allocs_full"] == 0, counters
