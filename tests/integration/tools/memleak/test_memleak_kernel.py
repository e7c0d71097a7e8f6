"""memleak's kernel mode (no -p/-c) and --triage against the host's kernel. The ground truth
is pipes the test holds open: each one kmallocs a pipe_inode_info and its buffer array in
alloc_pipe_info (two allocations), and each byte written into an empty one allocates a page
in pipe_write; closing them frees all of it. So the outstanding allocations on the stacks
naming those functions grow by about 2N (slab) or N (pages) for N pipes held, and fall
back once they are closed. The bounds are tolerant (the slab may grow a page under the same
stack) but fail if allocations are missed, counted twice, or their frees not matched.
tests/vm/test_memleak_vm.py runs the same on the VM kernels (6.1's kmem tracepoints)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import pytest

from helpers import (PIPE_INFO, PIPE_PAGE, RunningTool, ek, held_pipes, outstanding_naming, pipe_allocations,
                     signalled_run_leaves_nothing)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

PIPES = 200
# in the tool's order; the _node ones exist only before 6.1 (where tracefs lists them, -v names them)
SLAB_TRACEPOINTS = ("kmalloc", "kmalloc_node", "kmem_cache_alloc", "kmem_cache_alloc_node", "kfree",
                    "kmem_cache_free")


@pytest.mark.parametrize("combined_only", [False, True], ids=["full", "combined-only"])
def test_held_pipes_are_outstanding_slab_until_closed(combined_only):
    from ebpfkit.tools import memleak

    with memleak.open(kinds=("slab",), combined_only=combined_only) as session:
        before, held, after = pipe_allocations(session, PIPES, PIPE_INFO)
    grown = held - before
    assert PIPES <= grown <= 4 * PIPES, (before, held, after)  # 2 a pipe
    assert after - before <= PIPES // 4, (before, held, after)


def test_written_pipes_hold_a_page_each_until_closed():
    from ebpfkit.tools import memleak

    with memleak.open(kinds=("page",)) as session:
        before, held, after = pipe_allocations(session, PIPES, PIPE_PAGE, written=True)
        assert session.hooks == ["mm_page_alloc", "mm_page_free"]
    assert PIPES <= held - before <= 4 * PIPES, (before, held, after)  # 1 a pipe
    assert after - before <= PIPES // 4, (before, held, after)


def test_cli_kernel_frames_sizes_and_hooks():
    """The command line: JSON stacks of kernel frames (from the allocator on: no tracing
    frames), -z/-Z filtered in BPF (only the 1 KiB buffer arrays of the pipes are left, not
    their ~200-byte pipe_inode_info), -a each allocation, and -v naming the tracepoints this
    kernel has (as tracefs lists them)."""
    from ebpfkit.engine.mounts import ensure_tracefs
    from ebpfkit.sysinfo.events import tracepoint_exists

    tool = RunningTool("-v", "--format", "json", "memleak", "--kinds", "slab", "-z", "512", "-Z", "4096",
                       "-a", "-T", "100000", "0.5", "3")
    try:
        with held_pipes(PIPES):  # until its last sample
            stdout = tool.finish()
        assert tool.returncode == 0, tool.stderr
    finally:
        tool.kill()
    sample = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")][-1]
    piped = [s for s in sample["stacks"] if f"{PIPE_INFO[0]} [kernel]" in s["frames"]]
    assert PIPES <= outstanding_naming(piped, PIPE_INFO) <= 2 * PIPES, piped
    assert all(512 <= a["size"] <= 4096 for s in piped for a in s["allocations"]), piped
    for stack in sample["stacks"]:
        assert not stack["frames"][0].startswith(("bpf_", "__bpf_trace", "__traceiter")), stack["frames"]
    root = ensure_tracefs()
    expected = [tp for tp in SLAB_TRACEPOINTS if tracepoint_exists("kmem", tp, root)]
    assert f"kernel tracepoints: {', '.join(expected)}\n" in tool.stderr, tool.stderr


def test_sigkill_leaves_nothing():
    signalled_run_leaves_nothing(["memleak", "--kinds", "slab", "1"], signal.SIGKILL)


def test_triage_names_the_slab_cache_of_files_held_open():
    """--triage 2 while 1000 pipes (2000 struct files, the filp cache) are opened after its
    first look: filp is among the caches that grew, by at least half of what they take."""
    pipes = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * pipes)), hard))
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "--format", "json", "memleak", "--triage", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "Measuring memory for 2 s" in proc.stderr.readline()
        with held_pipes(pipes):
            stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert proc.returncode == 0, stderr
    result = json.loads(stdout)
    assert {a["area"] for a in result["areas"]} >= {"AnonPages", "SUnreclaim", "VmallocUsed", "Percpu"}
    grown = dict(result["slab_caches"])
    assert grown.get("filp", 0) >= pipes * _object_size("filp"), result["slab_caches"]
    # the verdict is the advice of the area that grew most (by the kernel's accounts, shared
    # with the rest of the machine), and the banner says that verdict
    grew = [a for a in result["areas"] if a["delta"] > 0]
    assert grew, result["areas"]  # the 2000 struct files at least
    top = max(grew, key=lambda a: a["delta"])
    assert result["look_first"] == top["advice"], (result["look_first"], top)
    assert f"look first at: {top['advice']}" in " ".join(stderr.split()), stderr


def _object_size(cache: str) -> int:
    with open("/proc/slabinfo") as f:
        return next(int(line.split()[3]) for line in f if line.split()[0] == cache)


@pytest.mark.parametrize("args, message", [
    (["--allocator", "glibc"], "applies to a process (-p PID or -c CMD), not to kernel mode"),
    (["-O", "/lib/x.so"], "applies to a process (-p PID or -c CMD), not to kernel mode"),
    (["-p", "1", "--kinds", "slab"], "applies to kernel mode (no -p/-c), not to a process"),
    (["--kinds", "slab,pages"], "'pages' is not one of slab, page, percpu"),
    (["--triage", "1", "-p", "1"], "runs alone: give it without -p/-c"),
    (["--triage", "0"], "0.0 is not in the range x>=0.1"),
])
def test_bad_kernel_mode_options_exit_2(capsys, args, message):
    rc, _, err = ek(capsys, "memleak", *args, "1", "1")
    assert rc == 2, err
    assert message in " ".join(err.split()), err
