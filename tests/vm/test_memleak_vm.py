"""memleak's kernel mode on the VM kernels: 6.1 is the one whose kmem tracepoints changed
(kmalloc_node and kmem_cache_alloc_node merged into kmalloc and kmem_cache_alloc, which
broke BCC's memleak: bcc#4384), 6.12 the one before the host's 6.18. The ground truth is the
host test's (tests/integration/tools/memleak/test_memleak_kernel.py): N pipes held open
kmalloc two objects each in alloc_pipe_info, a byte written into each allocates a page, and
closing them frees both. The program is compiled here, against this kernel's BTF.

User mode too: 6.1 has no uprobe_multi links (a perf link per uprobe), 6.12 has them.

The same boots as test_prebuilt_vm.py (BPF-LSM on), so a run of both costs one boot a kernel."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers import PIPE_INFO, PIPE_PAGE, pipe_allocations

pytestmark = [pytest.mark.vm(kernel=["6.1"], lsm=True, timeout=1200)]

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


LEAK_C = Path(__file__).parent.parent / "integration" / "tools" / "memleak" / "leak.c"
LEAKS, SIZE = 5, 3000


@pytest.mark.vm(kernel=["6.1", "6.12"], lsm=True, timeout=1200)  # 6.12: uprobe_multi links, 6.1: perf links
def test_user_mode_leak_exact_with_this_kernels_uprobe_links(tmp_path):
    """leak.c (the host test's ground truth) leaks LEAKS blocks of SIZE bytes from leak_here():
    exact, whether the kernel attaches through uprobe_multi links (6.6+) or a link per uprobe."""
    from ebpfkit.engine import features, inventory
    from ebpfkit.tools import memleak

    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    assert features.probe("uprobe_multi").supported == ((major, minor) >= (6, 10)), os.uname().release
    binary = tmp_path / "leak"
    subprocess.run(["gcc", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", binary, LEAK_C], check=True)
    program = subprocess.Popen([binary, "0", str(LEAKS), str(SIZE)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert program.stdout.readline().startswith("ready")  # past ld.so: libc is mapped
        with memleak.open(pid=program.pid) as session:
            ours = set(session._obj.program_ids().values())
            kinds = {link.type.name for link in inventory.links() if link.prog_id in ours}
            program.stdin.write("go\n")
            program.stdin.flush()
            assert program.stdout.readline().startswith("done")
            stacks = session.sample().stacks
    finally:
        program.kill()
        program.wait()
    assert kinds == ({"UPROBE_MULTI"} if session.multi else {"PERF_EVENT"}), kinds
    leak = [s for s in stacks if str(s.frames[0]).startswith("leak_here")]
    assert [(s.bytes, s.count) for s in leak] == [(LEAKS * SIZE, LEAKS)], stacks
