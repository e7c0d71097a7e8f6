/* Shared by runqlat.bpf.c and, through BTF, by session.py (the map values it decodes). */
#ifndef __RUNQLAT_H
#define __RUNQLAT_H

#define RUNQLAT_SLOTS 27
#define TASK_COMM_LEN 16

struct runqlat_hist {
	__u32 slots[RUNQLAT_SLOTS];
	__u64 sum_ns; /* the waits' exact sum (a Prometheus histogram's _sum) */
	char comm[TASK_COMM_LEN];
};

#endif
