/* SPDX-License-Identifier: GPL-2.0 */
/* The counter every ebpfkit openat benchmark program keeps: calls per process. The programs
 * differ only in the hook, so the cost they are compared on is the hook's. */
#ifndef OPENCOUNT_H
#define OPENCOUNT_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);   /* tgid */
	__type(value, __u64); /* openat calls */
} counts SEC(".maps");

static __always_inline void count_open(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(&counts, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &tgid, &one, BPF_NOEXIST);
}

#endif
