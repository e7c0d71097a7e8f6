// SPDX-License-Identifier: GPL-2.0
/* The same counter on fentry of the openat syscall's own kernel function: a direct call from
 * a BPF trampoline, no tracepoint, so no task is put on the slow syscall path and other
 * syscalls pay nothing. Needs BPF trampolines (the features probe "fentry"). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

/* the syscall's entry point is named per architecture (syscall wrappers) */
#if defined(__TARGET_ARCH_x86)
#define OPENAT_FUNC "__x64_sys_openat"
#elif defined(__TARGET_ARCH_arm64)
#define OPENAT_FUNC "__arm64_sys_openat"
#elif defined(__TARGET_ARCH_riscv)
#define OPENAT_FUNC "__riscv_sys_openat"
#else
#error "add this architecture's openat syscall function"
#endif

#include "opencount.h"

SEC("fentry/" OPENAT_FUNC)
int BPF_PROG(opencount_fentry)
{
	count_open();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
