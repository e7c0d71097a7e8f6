"""Nothing outlives its owner: a process killed with SIGKILL, one stopped with SIGTERM, and an
Object closed in-process all leave no program, link or map in the kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import ebpfkit.engine as engine
from ebpfkit.engine import inventory, perf
from ebpfkit.engine.pinned import FdMap
from ebpfkit.errors import EbpfkitError, MapError

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

PROGRAM = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
const volatile int targ_tgid = 0;
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, u32);
    __type(value, u64);
} counts SEC(".maps");
u64 samples = 0;

static __always_inline void bump(u32 slot)
{
    u64 *c;
    if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
        return;
    c = bpf_map_lookup_elem(&counts, &slot);
    if (c)
        __sync_fetch_and_add(c, 1);
}
SEC("tp/syscalls/sys_enter_getppid")
int on_enter(void *ctx) { bump(0); return 0; }
SEC("tp/syscalls/sys_exit_getppid")
int on_exit(void *ctx) { bump(1); return 0; }
SEC("perf_event")
int on_sample(void *ctx) { __sync_fetch_and_add(&samples, 1); return 0; }
char LICENSE[] SEC("license") = "GPL";
"""

CHILD = textwrap.dedent("""
    import json, os, sys, time
    import ebpfkit.engine as engine

    def link_ids(link):
        return [one.info().id for one in getattr(link, "links", [link])]

    spec = engine.compile(text=sys.argv[1], name="cleanup_child.bpf.c")
    obj = spec.load({"targ_tgid": os.getpid()})
    try:
        with obj:
            links = obj.attach()
            links.append(obj.programs["on_sample"].attach_perf_event(frequency=99))
            ids = {
                "progs": [p.info().id for p in obj.programs.values()],
                "links": [i for link in links for i in link_ids(link)],
                "maps": [m.raw.id for m in obj.maps.values()],
            }
            print(json.dumps(ids), flush=True)
            while True:
                time.sleep(0.5)
    finally:
        print("closed", obj.closed, flush=True)
""")


def _all_gone(ids: dict, timeout: float = 10.0) -> dict:
    """What of ``ids`` is still in the kernel after ``timeout`` (freeing is RCU-deferred)."""
    lookup = {"progs": inventory.program, "links": inventory.link, "maps": inventory.map}
    deadline = time.monotonic() + timeout
    while True:
        left = {k: [i for i in v if lookup[k](i) is not None] for k, v in ids.items()}
        if not any(left.values()) or time.monotonic() > deadline:
            return {k: v for k, v in left.items() if v}
        time.sleep(0.05)


@pytest.fixture
def child(tmp_path):
    """Start the child; yield (process, the kernel ids it printed)."""
    engine.compile(text=PROGRAM, name="cleanup_child.bpf.c")  # warm the cache: the child starts fast
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), PROGRAM], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            pytest.fail(f"the child died before attaching (rc={proc.returncode}):\n{proc.stderr.read()}")
        ids = json.loads(line)
        yield proc, ids
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


def _check_attached(ids: dict):
    assert len(ids["progs"]) == 3
    # two tracepoints + one perf_event link per online CPU
    assert len(ids["links"]) == 2 + len(perf.online_cpus())
    assert ids["maps"]
    assert _all_gone(ids, timeout=0) == ids  # everything really is in the kernel now


def test_sigkill_leaves_no_program_link_or_map(child):
    proc, ids = child
    _check_attached(ids)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    assert _all_gone(ids) == {}


def test_sigterm_runs_the_engine_handler_and_detaches(child):
    proc, ids = child
    _check_attached(ids)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 128 + signal.SIGTERM  # SystemExit(143), not death by signal
    rest = proc.stdout.read()
    assert "closed True" in rest, (rest, proc.stderr.read())
    assert _all_gone(ids) == {}


def _read_u64(counts: FdMap, key: int) -> int:
    return int.from_bytes(counts.lookup(key.to_bytes(4, sys.byteorder)), sys.byteorder)


def _calls(n: int) -> None:
    for _ in range(n):
        os.getppid()


def test_close_detaches_links_and_programs_stop_counting():
    spec = engine.compile(text=PROGRAM, name="cleanup_child.bpf.c")
    spec.programs["on_sample"].autoload = False
    obj = spec.load({"targ_tgid": os.getpid()})
    counts = None
    try:
        enter, exit_ = obj.attach("on_enter", "on_exit")
        prog_ids = [obj.programs[n].info().id for n in ("on_enter", "on_exit")]
        counts = FdMap.of(obj.maps["counts"])  # an fd of our own: it outlives the Object
        _calls(5)
        assert (_read_u64(counts, 0), _read_u64(counts, 1)) == (5, 5)

        enter.close()  # one link: only that program stops
        enter.close()  # twice is harmless
        _calls(3)
        assert (_read_u64(counts, 0), _read_u64(counts, 1)) == (5, 8)

        obj.close()
        assert obj.closed and obj.links == []
        _calls(4)
        assert (_read_u64(counts, 0), _read_u64(counts, 1)) == (5, 8)
        assert _all_gone({"progs": prog_ids}) == {}

        # what belonged to the object says so instead of touching freed memory
        with pytest.raises(MapError, match="closed"):
            obj.maps["counts"][0]
        with pytest.raises(EbpfkitError, match="closed"):
            obj.bss["samples"]
        obj.close()
    finally:
        obj.close()
        if counts is not None:
            counts.close()
