// SPDX-License-Identifier: GPL-2.0
/* Run-queue waits longer than a threshold, one event each: the task that waited, how long,
 * on which CPU, the task it replaced there, and the task that woke it.
 *
 * The waker is recorded at sched_waking, which runs in the waker's context; sched_wakeup may
 * run later on the woken task's CPU (the kernel queues a wakeup for an idle CPU to do itself),
 * where the current task is not the waker. The wait starts at sched_wakeup (enqueued), as the
 * kernel's own run_delay account does (what a user compares it with: schedstat, perf sched),
 * or when the task is preempted still runnable. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "ek_task_local.h"
#include "runqslower.h"

const volatile __u64 targ_min_us = 10000;
const volatile __u32 targ_tgid = 0; /* 0: every process */
const volatile __u32 targ_tid = 0;  /* 0: every thread */

struct waiting {
	__u64 since; /* 0: not waiting in a run queue (woken, sched_waking seen, not enqueued yet) */
	__u32 waker_pid;
	char waker_comm[TASK_COMM_LEN];
};

/* Entries are written in place and never deleted (a switch costs lookups, not an insert and
 * a delete). */
EK_TASK_LOCAL(waits, struct waiting, 10240);

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct runqslower_event);

/* ``typed``: the task pointers are typed (tp_btf), so their fields are read directly. */
static __always_inline bool traced(struct task_struct *t, bool typed)
{
	return ek_task_selected_of(t, targ_tgid, targ_tid, typed);
}

/* Called in the waker's context: it is the current task. */
static __always_inline int waking(struct task_struct *p, bool typed)
{
	struct waiting *w;

	if (!traced(p, typed))
		return 0;
	w = waits_of(p, true, typed);
	if (!w || w->since)
		return 0; /* already waiting in a run queue (preempted): this wakes nothing */
	w->waker_pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(&w->waker_comm, sizeof(w->waker_comm));
	return 0;
}

/* Now in the run queue: the wait starts (with the waker sched_waking recorded). */
static __always_inline int enqueued(struct task_struct *p, bool typed)
{
	struct waiting *w;

	if (!traced(p, typed))
		return 0;
	w = waits_of(p, true, typed);
	if (w)
		w->since = bpf_ktime_get_ns();
	return 0;
}

/* Switched out still runnable: back in the run queue at once, woken by nobody. */
static __always_inline void preempted(struct task_struct *p, bool typed)
{
	struct waiting *w;

	if (!traced(p, typed))
		return;
	w = waits_of(p, true, typed);
	if (!w)
		return;
	w->since = bpf_ktime_get_ns();
	w->waker_pid = 0;
	w->waker_comm[0] = 0;
}

static __always_inline int switched(struct task_struct *prev, struct task_struct *next, bool typed)
{
	struct runqslower_event *ev;
	struct waiting *w;
	__u64 now, delay_us;

	if (ek_task_state_of(prev, typed) == EK_TASK_RUNNING)
		preempted(prev, typed);

	w = waits_of(next, false, typed);
	if (!w || !w->since)
		return 0;
	now = bpf_ktime_get_ns();
	delay_us = now > w->since ? (now - w->since) / 1000 : 0;
	if (delay_us < targ_min_us)
		goto done;

	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev)
		goto done;
	ev->ts = now;
	ev->delay_us = delay_us;
	ev->pid = EK_TASK_FIELD(typed, next, tgid);
	ev->tid = EK_TASK_FIELD(typed, next, pid);
	ev->cpu = bpf_get_smp_processor_id();
	ev->prev_tid = EK_TASK_FIELD(typed, prev, pid);
	ev->waker_pid = w->waker_pid;
	BPF_CORE_READ_STR_INTO(&ev->comm, next, comm);
	BPF_CORE_READ_STR_INTO(&ev->prev_comm, prev, comm);
	__builtin_memcpy(ev->waker_comm, w->waker_comm, sizeof(ev->waker_comm));
	bpf_ringbuf_submit(ev, 0);
done:
	w->since = 0;
	w->waker_pid = 0;
	w->waker_comm[0] = 0;
	return 0;
}

/* Each hook twice: as BTF-typed tracepoints where the kernel has BTF of its own, and as raw
 * tracepoints (the same arguments untyped, read through CO-RE: a --btf file suffices). */
#define RUNQSLOWER_HOOKS(kind, suffix, typed)                                                     \
	SEC(#kind "/sched_waking")                                                                \
	int BPF_PROG(runqslower_waking##suffix, struct task_struct *p)                            \
	{                                                                                         \
		return waking(p, typed);                                                          \
	}                                                                                         \
	SEC(#kind "/sched_wakeup")                                                                \
	int BPF_PROG(runqslower_wakeup##suffix, struct task_struct *p)                            \
	{                                                                                         \
		return enqueued(p, typed);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_wakeup_new")                                                            \
	int BPF_PROG(runqslower_wakeup_new##suffix, struct task_struct *p)                        \
	{                                                                                         \
		waking(p, typed); /* in the parent, which woke it by forking it */                \
		return enqueued(p, typed);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_switch")                                                                \
	int BPF_PROG(runqslower_switch##suffix, bool preempt, struct task_struct *prev,           \
		     struct task_struct *next)                                                    \
	{                                                                                         \
		return switched(prev, next, typed);                                               \
	}

RUNQSLOWER_HOOKS(tp_btf, , true)
RUNQSLOWER_HOOKS(raw_tp, _raw, false)

char LICENSE[] SEC("license") = "GPL";
