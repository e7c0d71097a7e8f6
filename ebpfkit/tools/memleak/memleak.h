/* Shared by memleak.bpf.c and, through BTF, by session.py (the records it decodes). */
#ifndef __MEMLEAK_H
#define __MEMLEAK_H

#define MEMLEAK_MAX_STACK_DEPTH 127 /* the kernel's PERF_MAX_STACK_DEPTH */
#define MEMLEAK_SPILL_BASE (1 << 30) /* ids of spilled_stacks start here (see memleak_record.h) */
#define MEMLEAK_EEXIST 17            /* bpf_get_stackid: the stack's bucket holds another stack */

/* One outstanding allocation, by address: what its free must undo. A stack id is a
 * negative errno where bpf_get_stackid recorded none (neither stack map had room). */
struct alloc_info {
	__u64 size;
	__u64 timestamp_ns; /* bpf_ktime_get_ns() when it returned: CLOCK_MONOTONIC */
	__s32 stack_id;
	__u32 pad;
};

/* --combined-only: what is outstanding per stack, kept exact by atomic adds. */
struct combined_alloc {
	__u64 bytes;
	__u64 count;
};

/* Counters user space shows: nothing is dropped silently. */
enum memleak_counter {
	MEMLEAK_ALLOCS,          /* allocations recorded */
	MEMLEAK_FREES,           /* frees of a recorded allocation */
	MEMLEAK_STACK_MISSED,    /* no stack recorded: its bucket taken in both stack maps */
	MEMLEAK_ALLOCS_FULL,     /* an allocation the allocations map had no room for */
	MEMLEAK_UNKNOWN_FREES,   /* frees of an address not recorded (allocated before, or filtered) */
	MEMLEAK_THREADS_FULL,    /* an allocator call with no room to stash its size */
	MEMLEAK_NR_COUNTERS,
};

#endif
