/* Shared by runqlat.bpf.c and, through BTF, by ebpfkit/tools/runqlat.py. */
#ifndef __RUNQLAT_H
#define __RUNQLAT_H

#define RUNQLAT_SLOTS 27
#define TASK_COMM_LEN 16

struct runqlat_hist {
	__u32 slots[RUNQLAT_SLOTS];
	char comm[TASK_COMM_LEN];
};

#endif
