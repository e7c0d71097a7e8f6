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

#include "opencount.h"

SEC("raw_tp/sys_enter")
int BPF_PROG(opencount_raw, struct pt_regs *regs, long id)
{
	if (id == NR_openat)
		count_open();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
