// SPDX-License-Identifier: GPL-2.0
/* Run-queue latency: time from a task becoming runnable (wakeup, or preempted while
 * still runnable) until it runs, as log2 histograms of microseconds (or ms).
 *
 * The time is the scheduler's own account (CONFIG_SCHED_INFO, what /proc/PID/schedstat
 * reports), read when the task gets a CPU (sched_switch, before the kernel's accounting of the
 * switch-in): the time in its current queue (the run queue's clock - sched_info.last_queued)
 * plus what run_delay grew by in queues it left since it last ran (moved between CPUs while it
 * waited). One hook, where a wakeup-stamping tool needs two, and no write at the wakeup. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "ek_task_local.h"
#include "ek_sched_info.h"
#include "ek_task_times.h"
#include "runqlat.h"

const volatile __u32 targ_key = RUNQLAT_KEY_NONE; /* what a histogram is kept per */
const volatile bool targ_ms = false;
const volatile __u32 targ_tgid = 0;      /* 0: every process */
const volatile __u64 targ_cgroup_id = 0; /* 0: every cgroup; else only tasks in it or below */

/* A task's run_delay once it last got a CPU, and the arrival count that was current then. */
struct last_run {
	__u64 run_delay;
	__u64 pcount;
	/* The rq clock of its last arrival if it had not waited (0 if it had): kernels before
	 * 5.14 count such an arrival (pcount, last_arrival), later ones do not. Its last_arrival
	 * at the next switch-in tells which, and so what pcount is in step with. */
	__u64 unqueued_arrival;
};

EK_TASK_LOCAL(last_runs, struct last_run, 10240);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u64); /* as targ_key says: tgid, tid, pidns, cgroup id; 0 for one histogram */
	__type(value, struct ek_task_times);
} hists SEC(".maps");

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

/* Whether ``t`` got a CPU only when this program saw it since ``last`` was noted: its
 * run_delay then is where its current wait started from. */
static __always_inline bool in_step(struct task_struct *t, struct last_run *last, bool typed)
{
	__u64 expected = last->pcount;

	if (last->unqueued_arrival && EK_TASK_FIELD(typed, t, sched_info.last_arrival) == last->unqueued_arrival)
		expected++; /* this kernel counted the arrival without a wait */
	return EK_TASK_FIELD(typed, t, sched_info.pcount) == expected;
}

static __always_inline int switched(struct task_struct *next, bool typed)
{
	struct last_run *last;
	__u64 queued, in_queue, run_delay, delta, key;

	if (!EK_TASK_FIELD(typed, next, pid) || (targ_tgid && targ_tgid != EK_TASK_FIELD(typed, next, tgid)))
		return 0;
	queued = EK_TASK_FIELD(typed, next, sched_info.last_queued);
	if (!queued) {
		/* it did not wait: nothing to count, but keep a task already seen in step (a task
		 * preempted while it set a sleeping state, then woken still queued) */
		last = last_runs_of(next, false, typed);
		if (last && in_step(next, last, typed)) {
			last->pcount = EK_TASK_FIELD(typed, next, sched_info.pcount);
			last->unqueued_arrival = ek_run_queue_clock(next, typed);
		}
		return 0;
	}
	if (targ_cgroup_id && !ek_task_under_cgroup(next, targ_cgroup_id))
		return 0;
	in_queue = ek_run_queue_clock(next, typed) - queued;
	run_delay = EK_TASK_FIELD(typed, next, sched_info.run_delay) + in_queue;
	delta = in_queue; /* all that is known the first time it is seen */
	last = last_runs_of(next, true, typed);
	if (last) {
		if (in_step(next, last, typed))
			delta = run_delay - last->run_delay;
		last->run_delay = run_delay;
		last->pcount = EK_TASK_FIELD(typed, next, sched_info.pcount) + 1; /* once arrived */
		last->unqueued_arrival = 0;
	}
	if ((__s64)delta < 0)
		return 0;

	key = hist_key(next, typed);
	ek_task_times_add(&hists, &key, next, delta, targ_ms ? 1000000 : 1000,
			  targ_key == RUNQLAT_KEY_TGID || targ_key == RUNQLAT_KEY_TID);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(runqlat_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(next, true);
}

/* the same where the kernel has no BTF of its own: untyped, read through CO-RE (a --btf file
 * suffices) */
SEC("raw_tp/sched_switch")
int BPF_PROG(runqlat_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return switched(next, false);
}

char LICENSE[] SEC("license") = "GPL";
