/* Shared by offcputime.bpf.c and, through BTF, by session.py (the keys it decodes). */
#ifndef __OFFCPUTIME_H
#define __OFFCPUTIME_H

#define TASK_COMM_LEN 16
#define OFFCPU_MAX_STACK_DEPTH 127 /* the kernel's PERF_MAX_STACK_DEPTH */

/* One off-CPU account: a thread and the stacks it left the CPU with. A stack id is a
 * negative errno where none was recorded (-k/-u, a kernel thread's user stack, a full map). */
struct offcpu_key {
	__u32 pid; /* thread group */
	__u32 tid;
	__s32 user_stack_id;
	__s32 kernel_stack_id;
};

struct offcpu_val {
	__u64 total_ns; /* time off the CPU, summed */
	__u64 count;    /* times it left the CPU so */
	char comm[TASK_COMM_LEN]; /* the thread's name when this account was made */
};

#endif
