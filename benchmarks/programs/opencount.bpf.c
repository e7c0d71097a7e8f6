// SPDX-License-Identifier: GPL-2.0
/* Benchmark counter: openat() calls per process, from the syscall's own tracepoint. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "opencount.h"

SEC("tp/syscalls/sys_enter_openat")
int opencount(void *ctx)
{
	count_open();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
