/* Shared by runqlat.bpf.c and, through BTF, by session.py (the map values it decodes). */
#ifndef __RUNQLAT_H
#define __RUNQLAT_H

#define RUNQLAT_SLOTS 27
#define TASK_COMM_LEN 16

/* What a histogram is kept per (targ_key; session.py's KEY_* say the same) */
#define RUNQLAT_KEY_NONE 0   /* one histogram: key 0 */
#define RUNQLAT_KEY_TGID 1   /* per process */
#define RUNQLAT_KEY_TID 2    /* per thread */
#define RUNQLAT_KEY_PIDNS 3  /* per PID namespace: its inode number */
#define RUNQLAT_KEY_CGROUP 4 /* per cgroup v2: its id (its directory's inode number) */

struct runqlat_hist {
	__u32 slots[RUNQLAT_SLOTS];
	__u64 sum_ns; /* the waits' exact sum (a Prometheus histogram's _sum) */
	char comm[TASK_COMM_LEN];
};

#endif
