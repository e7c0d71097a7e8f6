/* Shared by runqslower.bpf.c and, through BTF, by session.py (the events it decodes). */
#ifndef __RUNQSLOWER_H
#define __RUNQSLOWER_H

#define TASK_COMM_LEN 16

struct runqslower_event {
	__u64 ts;        /* CLOCK_MONOTONIC ns when it got the CPU */
	__u64 delay_us;  /* how long it waited runnable for it */
	__u32 pid;       /* thread group of the task that waited */
	__u32 tid;
	__u32 cpu;
	__u32 prev_tid;  /* the task it replaced */
	__u32 waker_pid; /* thread group that woke it; 0 when it was preempted, not woken */
	char comm[TASK_COMM_LEN];
	char prev_comm[TASK_COMM_LEN];
	char waker_comm[TASK_COMM_LEN];
};

#endif
