// SPDX-License-Identifier: GPL-2.0
/* Run-queue latency: time from a task becoming runnable (wakeup, or preempted while
 * still runnable) until it runs, as log2 histograms of microseconds (or ms). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "ek_task_times.h"
#include "runqlat.h"

const volatile __u32 targ_key = RUNQLAT_KEY_NONE; /* what a histogram is kept per */
const volatile bool targ_ms = false;
const volatile __u32 targ_tgid = 0;      /* 0: every process */
const volatile __u64 targ_cgroup_id = 0; /* 0: every cgroup; else only tasks in it or below */

/* When each task became runnable (0: it is not waiting). Entries are written in place and
 * never deleted: a context switch then costs two lookups instead of an insert, a lookup and a
 * delete; LRU, so threads that are gone make room for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);   /* tid */
	__type(value, __u64); /* when it became runnable */
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u64); /* as targ_key says: tgid, tid, pidns, cgroup id; 0 for one histogram */
	__type(value, struct ek_task_times);
} hists SEC(".maps");

/* The task became runnable: note when, if it is one to trace. Called for the woken task
 * in the waker's context, so the filters read the task's own fields, never current's.
 * ``typed``: the task pointer is typed (tp_btf), so its fields are read directly. */
static __always_inline int enqueued(struct task_struct *p, bool typed)
{
	__u32 tid = EK_TASK_FIELD(typed, p, pid);
	__u64 now, *since;

	if (!tid || (targ_tgid && targ_tgid != EK_TASK_FIELD(typed, p, tgid)))
		return 0;
	if (targ_cgroup_id && !ek_task_under_cgroup(p, targ_cgroup_id))
		return 0;
	now = bpf_ktime_get_ns();
	since = bpf_map_lookup_elem(&start, &tid);
	if (since)
		*since = now;
	else
		bpf_map_update_elem(&start, &tid, &now, BPF_ANY);
	return 0;
}

static __always_inline __u64 hist_key(struct task_struct *t, bool typed)
{
	switch (targ_key) {
	case RUNQLAT_KEY_TGID:
		return EK_TASK_FIELD(typed, t, tgid);
	case RUNQLAT_KEY_TID:
		return EK_TASK_FIELD(typed, t, pid);
	case RUNQLAT_KEY_PIDNS:
		return ek_task_pidns(t);
	case RUNQLAT_KEY_CGROUP:
		return ek_task_cgroup_id(t);
	}
	return 0;
}

static __always_inline int switched(struct task_struct *prev, struct task_struct *next, bool typed)
{
	__u32 tid;
	__u64 *since, delta, key;

	if (ek_task_state_of(prev, typed) == EK_TASK_RUNNING)
		enqueued(prev, typed);

	tid = EK_TASK_FIELD(typed, next, pid);
	since = bpf_map_lookup_elem(&start, &tid);
	if (!since || !*since)
		return 0;
	delta = bpf_ktime_get_ns() - *since;
	*since = 0;
	if ((__s64)delta < 0)
		return 0;

	key = hist_key(next, typed);
	ek_task_times_add(&hists, &key, next, delta, targ_ms ? 1000000 : 1000,
			  targ_key == RUNQLAT_KEY_TGID || targ_key == RUNQLAT_KEY_TID);
	return 0;
}

/* Each hook twice: as BTF-typed tracepoints where the kernel has BTF of its own, and as raw
 * tracepoints (the same arguments untyped, read through CO-RE: a --btf file suffices). */
#define RUNQLAT_HOOKS(kind, suffix, typed)                                                        \
	SEC(#kind "/sched_wakeup")                                                                \
	int BPF_PROG(runqlat_wakeup##suffix, struct task_struct *p)                               \
	{                                                                                         \
		return enqueued(p, typed);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_wakeup_new")                                                            \
	int BPF_PROG(runqlat_wakeup_new##suffix, struct task_struct *p)                           \
	{                                                                                         \
		return enqueued(p, typed);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_switch")                                                                \
	int BPF_PROG(runqlat_switch##suffix, bool preempt, struct task_struct *prev,              \
		     struct task_struct *next)                                                    \
	{                                                                                         \
		return switched(prev, next, typed);                                               \
	}

RUNQLAT_HOOKS(tp_btf, , true)
RUNQLAT_HOOKS(raw_tp, _raw, false)

char LICENSE[] SEC("license") = "GPL";
