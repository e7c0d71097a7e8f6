// SPDX-License-Identifier: GPL-2.0
/* Run-queue waits longer than a threshold, one event each: the task that waited, how long,
 * on which CPU, the task it replaced there, and the task that woke it.
 *
 * The wait is the kernel's own account (CONFIG_SCHED_INFO: what /proc/PID/schedstat and perf
 * sched report). The scheduler stamps a task's sched_info.last_queued when it joins a run
 * queue (woken, or preempted still runnable), adds the time queued to run_delay when it leaves
 * one, and counts its arrivals on a CPU (pcount). So when a task stops running (it blocks:
 * sched_waking wakes it; or it is preempted: sched_switch) we note run_delay and pcount, and
 * when it gets a CPU again (sched_switch, before the kernel's own accounting of it) its wait is
 * what run_delay grew by since then plus the time in its current queue: every queue of a
 * task moved between CPUs while it waited counts. Most switch-ins cost no map access: the time
 * since the task last got a CPU bounds its wait, and only one that may exceed the threshold is
 * looked up. The waker is noted at sched_waking, which runs in the waker's context (sched_wakeup
 * may run later on the woken task's CPU), or in an interrupt, which it names instead. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "ek_task_local.h"
#include "ek_sched_info.h"
#include "ek_preempt.h"
#include "runqslower.h"

const volatile __u64 targ_min_us = 10000;
const volatile __u32 targ_tgid = 0; /* 0: every process */
const volatile __u32 targ_tid = 0;  /* 0: every thread */

struct waiting {
	__u64 pcount;    /* the kernel's count of the task's arrivals when it stopped running */
	__u64 run_delay; /* its run_delay then */
	__u32 waker_pid; /* who woke it (0: nobody, it was preempted) */
	char waker_comm[TASK_COMM_LEN];
};

/* Entries are written in place and never deleted; one is current while pcount is the task's. */
EK_TASK_LOCAL(waits, struct waiting, 10240);

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct runqslower_event);

/* ``typed``: the task pointers are typed (tp_btf), so their fields are read directly. */
static __always_inline bool traced(struct task_struct *t, bool typed)
{
	return ek_task_selected_of(t, targ_tgid, targ_tid, typed);
}

/* t stops running: where its wait, if any, will start from. */
static __always_inline struct waiting *stopped(struct task_struct *t, bool typed)
{
	struct waiting *w = waits_of(t, true, typed);

	if (w) {
		w->pcount = EK_TASK_FIELD(typed, t, sched_info.pcount);
		w->run_delay = EK_TASK_FIELD(typed, t, sched_info.run_delay);
	}
	return w;
}

/* Called in the waker's context: the current task, or an interrupt of it, which
 * ``preempt_count`` tells (-1: not known here). An interrupt names no waker: the task it
 * interrupted had nothing to do with the wakeup (a timer, a disk, a packet). */
static __always_inline int waking(struct task_struct *p, bool typed, int preempt_count)
{
	struct waiting *w;

	if (!traced(p, typed))
		return 0;
	if (EK_TASK_FIELD(typed, p, on_rq))
		return 0; /* it had not left its run queue yet: this wakes it without a wait */
	w = stopped(p, typed);
	if (!w)
		return 0;
	if (preempt_count > 0 && (preempt_count & (EK_HARDIRQ_NMI_MASK | EK_SOFTIRQ_OFFSET))) {
		w->waker_pid = 0; /* the names are stored as immediates: no string in .rodata */
		if (preempt_count & EK_HARDIRQ_NMI_MASK)
			__builtin_memcpy(w->waker_comm, "[hardirq]", sizeof("[hardirq]"));
		else
			__builtin_memcpy(w->waker_comm, "[softirq]", sizeof("[softirq]"));
		return 0;
	}
	w->waker_pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(&w->waker_comm, sizeof(w->waker_comm));
	return 0;
}

static __always_inline int switched(struct task_struct *prev, struct task_struct *next, bool typed)
{
	struct runqslower_event *ev;
	struct waiting *w;
	__u64 queued, clock, delay_ns;
	__u32 waker_pid = 0;
	bool woken = false;

	if (ek_task_state_of(prev, typed) == EK_TASK_RUNNING && traced(prev, typed)) {
		w = stopped(prev, typed); /* preempted: back in the queue at once, woken by nobody */
		if (w) {
			w->waker_pid = 0;
			w->waker_comm[0] = 0;
		}
	}

	if (!traced(next, typed))
		return 0;
	queued = EK_TASK_FIELD(typed, next, sched_info.last_queued);
	if (!queued)
		return 0; /* it did not wait: the kernel adds nothing either */
	clock = ek_run_queue_clock(next, typed);
	/* it waited at most since it last got a CPU */
	if (clock - EK_TASK_FIELD(typed, next, sched_info.last_arrival) < targ_min_us * 1000)
		return 0;
	delay_ns = clock - queued;
	w = waits_of(next, false, typed);
	if (w && w->pcount == EK_TASK_FIELD(typed, next, sched_info.pcount)) {
		/* and in the queues it left while it waited (moved to another CPU) */
		delay_ns += EK_TASK_FIELD(typed, next, sched_info.run_delay) - w->run_delay;
		waker_pid = w->waker_pid;
		woken = waker_pid || w->waker_comm[0]; /* by a task, or by an interrupt */
	} /* else it stopped running before we started: only its current queue is known */
	if (delay_ns < targ_min_us * 1000)
		return 0;

	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev)
		return 0;
	ev->ts = bpf_ktime_get_ns();
	ev->delay_us = delay_ns / 1000;
	ev->pid = EK_TASK_FIELD(typed, next, tgid);
	ev->tid = EK_TASK_FIELD(typed, next, pid);
	ev->cpu = bpf_get_smp_processor_id();
	ev->prev_tid = EK_TASK_FIELD(typed, prev, pid);
	ev->waker_pid = waker_pid;
	BPF_CORE_READ_STR_INTO(&ev->comm, next, comm);
	BPF_CORE_READ_STR_INTO(&ev->prev_comm, prev, comm);
	if (woken)
		__builtin_memcpy(ev->waker_comm, w->waker_comm, sizeof(ev->waker_comm));
	else
		ev->waker_comm[0] = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

/* Each hook twice: as BTF-typed tracepoints where the kernel has BTF of its own, and as raw
 * tracepoints (the same arguments untyped, read through CO-RE: a --btf file suffices). */
#define RUNQSLOWER_HOOKS(kind, suffix, typed)                                                     \
	SEC(#kind "/sched_waking")                                                                \
	int BPF_PROG(runqslower_waking##suffix, struct task_struct *p)                            \
	{                                                                                         \
		return waking(p, typed, ek_preempt_count_task());                                 \
	}                                                                                         \
	SEC(#kind "/sched_waking") /* x86, where kallsyms and BTF list its per-CPU preempt_count */\
	int BPF_PROG(runqslower_waking_percpu##suffix, struct task_struct *p)                     \
	{                                                                                         \
		return waking(p, typed, ek_preempt_count_percpu());                               \
	}                                                                                         \
	SEC(#kind "/sched_wakeup_new")                                                            \
	int BPF_PROG(runqslower_wakeup_new##suffix, struct task_struct *p)                        \
	{                                                                                         \
		return waking(p, typed, 0); /* in the parent, which woke it by forking it */      \
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
