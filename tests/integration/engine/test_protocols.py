"""The libbpf engine's maps and readers have the engine-neutral shape tools rely on."""

import pytest

import ebpfkit
from ebpfkit.engine.protocols import EventStream, Table

pytestmark = pytest.mark.integration

C = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ebpfkit.h"

struct event { u32 pid; };
EK_EXPORT_TYPE(struct event);
EK_RINGBUF(events, 4096);
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(u32));
	__uint(value_size, sizeof(u32));
} perf_events SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, u32);
	__type(value, u64);
} counts SEC(".maps");

SEC("tp/syscalls/sys_enter_getppid")
int on_getppid(void *ctx)
{
	struct event *e = ek_ringbuf_reserve(events, sizeof(*e));

	if (e) {
		e->pid = bpf_get_current_pid_tgid() >> 32;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_maps_and_readers_satisfy_the_neutral_interfaces():
    with ebpfkit.compile(text=C, name="shapes.bpf.c").load() as obj:
        assert isinstance(obj.maps["counts"], Table)
        ring = obj.ring_buffer("events")
        perf = obj.perf_buffer("perf_events", event_type="event")
        assert isinstance(ring, EventStream)
        assert isinstance(perf, EventStream)
