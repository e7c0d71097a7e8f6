// SPDX-License-Identifier: GPL-2.0
/* The same counter on the generic raw_tp/sys_enter hook with an in-kernel syscall-id
 * filter: cheaper on openat than the per-syscall tracepoint, but it runs on every syscall. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* syscall numbers are not in vmlinux.h (they are macros) */
#if defined(__TARGET_ARCH_x86)
#define NR_openat 257
#elif defined(__TARGET_ARCH_arm64) || defined(__TARGET_ARCH_riscv) || defined(__TARGET_ARCH_loongarch)
#define NR_openat 56
#else
#error "add this architecture's __NR_openat"
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);   /* tgid */
	__type(value, __u64); /* openat calls */
} counts SEC(".maps");

SEC("raw_tp/sys_enter")
int BPF_PROG(opencount_raw, struct pt_regs *regs, long id)
{
	__u32 tgid;
	__u64 one = 1, *n;

	if (id != NR_openat)
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	n = bpf_map_lookup_elem(&counts, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, &tgid, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
