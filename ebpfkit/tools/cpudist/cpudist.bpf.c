// SPDX-License-Identifier: GPL-2.0
/* Time on CPU per scheduling: from a task's switch in to its switch out (however it left:
 * preempted, blocked or exited), as log2 histograms of microseconds (or ms). With
 * targ_offcpu, the time off CPU instead: from its switch out to its next switch in (asleep,
 * blocked, or runnable and waiting for the CPU). Both from sched_switch alone; the idle
 * tasks (pid 0) are not counted. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task_times.h"

const volatile bool targ_offcpu = false;
const volatile bool targ_per_process = false; /* one histogram per tgid */
const volatile bool targ_per_thread = false;  /* one histogram per tid */
const volatile bool targ_ms = false;
const volatile __u32 targ_tgid = 0; /* 0: every process */

struct {
	/* off CPU every sleeping task has an entry, and an exited one keeps its last: the oldest go */
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);   /* tid */
	__type(value, __u64); /* when it was switched in (on CPU) or out (off CPU) */
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32); /* tgid, tid, or 0 for the single histogram */
	__type(value, struct ek_task_times);
} hists SEC(".maps");

static __always_inline bool traced(__u32 tgid, __u32 tid)
{
	return tid && (!targ_tgid || targ_tgid == tgid);
}

/* The interval that started for ``t`` ends now: counted, and forgotten. */
static __always_inline void interval_ends(struct task_struct *t, __u64 now)
{
	__u32 tgid = BPF_CORE_READ(t, tgid), tid = BPF_CORE_READ(t, pid), key;
	__u64 *since;

	if (!traced(tgid, tid))
		return;
	since = bpf_map_lookup_elem(&start, &tid);
	if (!since)
		return; /* it started before the program was attached */
	if (now > *since) {
		key = targ_per_process ? tgid : targ_per_thread ? tid : 0;
		ek_task_times_add(&hists, &key, t, now - *since, targ_ms ? 1000000 : 1000,
				  targ_per_process || targ_per_thread);
	}
	bpf_map_delete_elem(&start, &tid);
}

static __always_inline void interval_starts(struct task_struct *t, __u64 now)
{
	__u32 tid = BPF_CORE_READ(t, pid);

	if (traced(BPF_CORE_READ(t, tgid), tid))
		bpf_map_update_elem(&start, &tid, &now, BPF_ANY);
}

static __always_inline int switched(struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();

	if (targ_offcpu) {
		interval_starts(prev, now);
		interval_ends(next, now);
	} else {
		interval_ends(prev, now);
		interval_starts(next, now);
	}
	return 0;
}

/* The hook twice: as a BTF-typed tracepoint where the kernel has BTF of its own, and as a
 * raw tracepoint (the same arguments untyped, read through CO-RE: a --btf file suffices). */
SEC("tp_btf/sched_switch")
int BPF_PROG(cpudist_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(prev, next);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(cpudist_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(prev, next);
}

char LICENSE[] SEC("license") = "GPL";
