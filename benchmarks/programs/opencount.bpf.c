// SPDX-License-Identifier: GPL-2.0
/* Benchmark counter: openat() calls per process, from the syscall's own tracepoint. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);   /* tgid */
	__type(value, __u64); /* openat calls */
} counts SEC(".maps");

SEC("tp/syscalls/sys_enter_openat")
int opencount(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(&counts, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &tgid, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
