"""Ring and perf buffer readers against the real kernel.

The programs only emit events for this test process (a ``const volatile`` tgid filter) and
on syscalls nothing else here makes (getppid for the ring buffer, getsid for the perf
buffer), so the test knows exactly how many events it caused.
"""

from __future__ import annotations

import os
import select
import time

import pytest

import ebpfkit
from ebpfkit.engine.btftypes import Struct
from ebpfkit.errors import EbpfkitError, MapError

pytestmark = pytest.mark.integration

PROG = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ebpfkit.h"

const volatile u32 targ_tgid = 0;

struct event {
	u32 pid;
	u32 cpu;
	u64 seq;
	char comm[16];
};
EK_EXPORT_TYPE(struct event); /* keeps it in the object's BTF so the readers can decode it */

EK_RINGBUF(events, 256 * 1024);

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(u32));
	__uint(value_size, sizeof(u32));
} perf_events SEC(".maps");

u64 ring_seq = 0, perf_seq = 0;

static __always_inline bool mine(void)
{
	return (bpf_get_current_pid_tgid() >> 32) == targ_tgid;
}

static __always_inline void fill(struct event *e, u64 *seq)
{
	e->pid = targ_tgid;
	e->cpu = bpf_get_smp_processor_id();
	e->seq = __sync_fetch_and_add(seq, 1);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

SEC("tp/syscalls/sys_enter_getppid")
int ring_on_getppid(void *ctx)
{
	struct event *e;

	if (!mine())
		return 0;
	e = ek_ringbuf_reserve(events, sizeof(*e));
	if (!e)
		return 0;
	fill(e, &ring_seq);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp/syscalls/sys_enter_getsid")
int perf_on_getsid(void *ctx)
{
	struct event e = {};

	if (!mine())
		return 0;
	fill(&e, &perf_seq);
	bpf_perf_event_output(ctx, &perf_events, BPF_F_CURRENT_CPU, &e, sizeof(e));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""

EVENT_SIZE = 32


def load(ring_bytes: int | None = None):
    """The test program, loaded and attached, emitting only for this process."""
    spec = ebpfkit.compile(text=PROG, name="test_events.bpf.c")
    spec.rodata["targ_tgid"] = os.getpid()
    if ring_bytes:
        spec.maps["events"].max_entries = ring_bytes
    obj = spec.load()
    obj.attach()
    return obj


def ring_events(n: int) -> None:
    for _ in range(n):
        os.getppid()


def perf_events(n: int) -> None:
    for _ in range(n):
        os.getsid(0)


def my_comm() -> str:
    with open("/proc/thread-self/comm") as f:
        return f.read().strip()


def drain(reader, want: int | None = None, timeout: float = 5.0) -> list:
    """Read until ``want`` records came (or, without ``want``, until a read is empty)."""
    got, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = reader.read_batch(50 if want else 0)
        got += batch
        if (want is not None and len(got) >= want) or (want is None and not batch):
            break
    return got


def check_events(events, n: int) -> None:
    assert len(events) == n
    assert all(isinstance(e, Struct) for e in events)
    assert {e.pid for e in events} == {os.getpid()}
    assert {e.comm for e in events} == {my_comm()}


class Boom(Exception):
    pass


# --- ring buffer ---

def test_ring_buffer_delivers_every_event_in_order():
    n = 50
    with load() as obj:
        got = []
        rb = obj.ring_buffer("events", got.append)
        assert rb.event_type == "struct event"
        ring_events(n)
        readable, _, _ = select.select([rb], [], [], 2.0)  # fileno() works with select
        assert readable == [rb]
        delivered, deadline = 0, time.monotonic() + 5
        while delivered < n and time.monotonic() < deadline:
            delivered += rb.poll(100)
        assert delivered == n
        check_events(got, n)
        assert [e.seq for e in got] == list(range(n))  # one ring for all CPUs: in order
        assert rb.lost == 0
        assert rb.poll(0) == 0


def test_ring_buffer_overflow_counts_every_lost_event():
    n = 1000
    with load(ring_bytes=4096) as obj:
        rb = obj.ring_buffer("events")
        ring_events(n)  # no reader: the 4 KiB ring fills after ~100 records
        got = drain(rb)
        lost = rb.lost
        assert 0 < len(got) < n
        assert lost > 0
        assert len(got) + lost == n
        # the ring keeps the first records; later ones are dropped
        assert [e.seq for e in got] == list(range(len(got)))


def test_ring_buffer_events_iterator_and_close():
    with load() as obj:
        rb = obj.ring_buffer("events")
        ring_events(5)
        seen = []
        for ev in rb.events(timeout=2):
            seen.append(ev.seq)
            if len(seen) == 2:
                break  # the records not yet yielded stay with the reader
        assert seen == [0, 1]
        assert [e.seq for e in rb.events(timeout=0)] == [2, 3, 4]
        rb.close()
        assert rb.closed
        with pytest.raises(EbpfkitError, match="closed"):
            rb.read_batch()
    assert obj.closed


# --- perf buffer ---

def test_perf_buffer_delivers_every_event():
    n = 50
    with load() as obj:
        got = []
        pb = obj.perf_buffer("perf_events", got.append)
        assert pb.event_type == "struct event"  # found by the 'struct event' convention
        perf_events(n)
        delivered, deadline = 0, time.monotonic() + 5
        while delivered < n and time.monotonic() < deadline:
            delivered += pb.poll(100)
        assert delivered == n
        check_events(got, n)
        assert sorted(e.seq for e in got) == list(range(n))
        for cpu in {e.cpu for e in got}:  # one buffer per CPU: ordered within each
            seqs = [e.seq for e in got if e.cpu == cpu]
            assert seqs == sorted(seqs)
        assert pb.lost == 0


def test_perf_buffer_reads_what_a_select_on_its_fileno_said_was_there():
    """Polling a perf event clears its readiness: after select() on fileno() said readable,
    the reader must still find the records without waiting for another one."""
    n = 5
    with load() as obj:
        pb = obj.perf_buffer("perf_events")
        perf_events(n)
        readable, _, _ = select.select([pb], [], [], 2.0)
        assert readable == [pb]
        got, deadline = [], time.monotonic() + 2
        while len(got) < n and time.monotonic() < deadline:
            got.extend(pb.read_batch(0))
        assert len(got) == n


def test_perf_buffer_overflow_counts_every_lost_event():
    n = 1000
    old_affinity = os.sched_getaffinity(0)
    cpu = min(old_affinity)
    reports = []
    with load() as obj:
        # one page per CPU (libbpf needs a power of 2): ~85 records fit
        pb = obj.perf_buffer("perf_events", page_count=1,
                             lost_callback=lambda c, count: reports.append((c, count)))
        os.sched_setaffinity(0, {cpu})  # every record goes to one CPU's buffer
        try:
            perf_events(n)
            got = drain(pb)
            # the kernel reports a loss in front of the next record that fits: send one more
            perf_events(1)
            got += drain(pb, want=1)
            got += drain(pb)
        finally:
            os.sched_setaffinity(0, old_affinity)
        assert 0 < len(got) < n
        assert pb.lost > 0
        assert len(got) + pb.lost == n + 1
        assert sum(count for _, count in reports) == pb.lost
        assert {c for c, _ in reports} == {cpu}
        assert {e.cpu for e in got} == {cpu}


# --- common behaviour of both readers ---

@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_callback_exception_propagates_from_poll(kind):
    n = 5
    seen = []

    def callback(ev):
        seen.append(ev.seq)
        if len(seen) == 3:
            raise Boom("third event")

    with load() as obj:
        if kind == "ring":
            reader, trigger = obj.ring_buffer("events", callback), ring_events
        else:
            old_affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {min(old_affinity)})  # one CPU buffer: one ordered stream
            reader, trigger = obj.perf_buffer("perf_events", callback), perf_events
        try:
            trigger(n)
            time.sleep(0.05)
            with pytest.raises(Boom, match="third event"):
                for _ in range(50):
                    reader.poll(100)
        finally:
            if kind == "perf":
                os.sched_setaffinity(0, old_affinity)
        assert seen == [0, 1, 2]
        # the poll stopped at the failing record; the rest comes with the next polls
        deadline = time.monotonic() + 5
        while len(seen) < n and time.monotonic() < deadline:
            reader.poll(100)
        assert seen == list(range(n))


@pytest.mark.parametrize("kind", ["ring", "perf"])
def test_decode_false_gives_raw_bytes(kind):
    with load() as obj:
        if kind == "ring":
            reader, trigger = obj.ring_buffer("events", decode=False), ring_events
        else:
            reader, trigger = obj.perf_buffer("perf_events", decode=False), perf_events
        trigger(3)
        got = drain(reader, want=3)
        assert len(got) == 3
        for raw in got:
            assert isinstance(raw, bytes)
            if kind == "ring":
                assert len(raw) == EVENT_SIZE
            else:  # perf pads a sample to 8 bytes with its 4-byte size header
                assert EVENT_SIZE <= len(raw) < EVENT_SIZE + 8
            assert int.from_bytes(raw[:4], "little") == os.getpid()
        assert reader.event_type is None


def test_clear_errors_for_wrong_map_or_unknown_type():
    with load() as obj:
        with pytest.raises(MapError, match="perf_buffer"):
            obj.ring_buffer("perf_events")
        with pytest.raises(MapError, match="no map 'nope'.*events"):
            obj.ring_buffer("nope")
        with pytest.raises(MapError, match="'struct missing' is not in the BTF"):
            obj.ring_buffer("events", event_type="struct missing")
        with pytest.raises(EbpfkitError, match="power of 2"):
            obj.perf_buffer("perf_events", page_count=3)
        rb = obj.ring_buffer("events", event_type="event")
        with pytest.raises(EbpfkitError, match="no callback"):
            rb.poll(0)


def test_ring_buffer_without_lost_map_reports_none():
    prog = PROG.replace("EK_RINGBUF(events, 256 * 1024);", """
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");""").replace("ek_ringbuf_reserve(events, sizeof(*e))",
                                   "bpf_ringbuf_reserve(&events, sizeof(*e), 0)")
    spec = ebpfkit.compile(text=prog, name="test_events_nolost.bpf.c")
    spec.rodata["targ_tgid"] = os.getpid()
    with spec.load() as obj:
        obj.attach()
        rb = obj.ring_buffer("events")
        ring_events(3)
        assert len(drain(rb, want=3)) == 3
        assert rb.lost is None  # a plain ring buffer cannot count its drops
