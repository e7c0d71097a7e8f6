"""What must outlive a process is pinned under /sys/fs/bpf/ebpfkit/<tool>/ and removed by
removing that directory."""

import os
import sys

import pytest

import ebpfkit
from ebpfkit.engine import mounts
from ebpfkit.engine.pinned import FdMap

pytestmark = pytest.mark.integration

COUNTER = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

const volatile u32 targ_tgid = 0;
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

SEC("tp/syscalls/sys_enter_getppid")
int count_getppid(void *ctx)
{
	u32 zero = 0;
	u64 *n;

	if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
		return 0;
	n = bpf_map_lookup_elem(&calls, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def _read_pinned_counter(path: str) -> int:
    with FdMap.open_pinned(path) as counter:
        return int.from_bytes(counter.lookup(bytes(4)), sys.byteorder)


def test_pinned_link_outlives_the_object_until_its_directory_is_removed():
    tool = f"pytest-pins-{os.getpid()}"
    pin_dir = mounts.pin_dir(tool)
    try:
        spec = ebpfkit.compile(text=COUNTER, name="pincount.bpf.c")
        spec.rodata["targ_tgid"] = os.getpid()
        with spec.load() as obj:
            link = obj.programs["count_getppid"].attach()
            link.pin(os.path.join(pin_dir, "link"))
            obj.pin_maps(pin_dir)
        # the object is closed: only the pins keep program, link and map alive
        for _ in range(5):
            os.getppid()
        assert _read_pinned_counter(os.path.join(pin_dir, "calls")) == 5
    finally:
        mounts.remove_pin_dir(tool)
    assert not os.path.exists(pin_dir)
    for _ in range(3):
        os.getppid()  # nothing counts any more; the leak check confirms the program is gone
