// SPDX-License-Identifier: GPL-2.0
/* Run-queue waits longer than a threshold, one event each: the task that waited, how long,
 * on which CPU, the task it replaced there, and the task that woke it.
 *
 * The waker is recorded at sched_waking, which runs in the waker's context; sched_wakeup may
 * run later on the woken task's CPU (the kernel queues a wakeup for an idle CPU to do itself),
 * where the current task is not the waker. The wait starts at sched_wakeup (enqueued), as the
 * kernel's own run_delay account does, or when the task is preempted still runnable. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "runqslower.h"

const volatile __u64 targ_min_us = 10000;
const volatile __u32 targ_tgid = 0; /* 0: every process */
const volatile __u32 targ_tid = 0;  /* 0: every thread */

struct waiting {
	__u64 since; /* 0: woken (sched_waking seen) but not enqueued yet */
	__u32 waker_pid;
	char waker_comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32); /* tid */
	__type(value, struct waiting);
} start SEC(".maps");

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct runqslower_event);

static struct waiting nobody;

static __always_inline bool traced(struct task_struct *t)
{
	return ek_task_selected(t, targ_tgid, targ_tid);
}

/* Called in the waker's context: it is the current task. */
static __always_inline int waking(struct task_struct *p)
{
	struct waiting w = {}, *queued;
	__u32 tid;

	if (!traced(p))
		return 0;
	tid = BPF_CORE_READ(p, pid);
	queued = bpf_map_lookup_elem(&start, &tid);
	if (queued && queued->since)
		return 0; /* already waiting in a run queue (preempted): this wakes nothing */
	w.waker_pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(&w.waker_comm, sizeof(w.waker_comm));
	bpf_map_update_elem(&start, &tid, &w, BPF_ANY);
	return 0;
}

/* Now in the run queue: the wait starts (keeping the waker sched_waking recorded). */
static __always_inline int enqueued(struct task_struct *p, bool preempted)
{
	struct waiting *w;
	__u32 tid;

	if (!traced(p))
		return 0;
	tid = BPF_CORE_READ(p, pid);
	w = preempted ? NULL : bpf_map_lookup_elem(&start, &tid);
	if (!w) {
		bpf_map_update_elem(&start, &tid, &nobody, BPF_ANY);
		w = bpf_map_lookup_elem(&start, &tid);
		if (!w)
			return 0;
	}
	w->since = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int switched(struct task_struct *prev, struct task_struct *next)
{
	struct runqslower_event *ev;
	struct waiting *w;
	__u64 now, delay_us;
	__u32 tid;

	if (ek_task_state(prev) == EK_TASK_RUNNING)
		enqueued(prev, true);

	tid = BPF_CORE_READ(next, pid);
	w = bpf_map_lookup_elem(&start, &tid);
	if (!w)
		return 0;
	now = bpf_ktime_get_ns();
	delay_us = w->since && now > w->since ? (now - w->since) / 1000 : 0;
	if (!w->since || delay_us < targ_min_us)
		goto done;

	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev)
		goto done;
	ev->ts = now;
	ev->delay_us = delay_us;
	ev->pid = BPF_CORE_READ(next, tgid);
	ev->tid = tid;
	ev->cpu = bpf_get_smp_processor_id();
	ev->prev_tid = BPF_CORE_READ(prev, pid);
	ev->waker_pid = w->waker_pid;
	BPF_CORE_READ_STR_INTO(&ev->comm, next, comm);
	BPF_CORE_READ_STR_INTO(&ev->prev_comm, prev, comm);
	__builtin_memcpy(ev->waker_comm, w->waker_comm, sizeof(ev->waker_comm));
	bpf_ringbuf_submit(ev, 0);
done:
	bpf_map_delete_elem(&start, &tid);
	return 0;
}

/* Each hook twice: as BTF-typed tracepoints where the kernel has BTF of its own, and as raw
 * tracepoints (the same arguments untyped, read through CO-RE: a --btf file suffices). */
#define RUNQSLOWER_HOOKS(kind, suffix)                                                            \
	SEC(#kind "/sched_waking")                                                                \
	int BPF_PROG(runqslower_waking##suffix, struct task_struct *p)                            \
	{                                                                                         \
		return waking(p);                                                                 \
	}                                                                                         \
	SEC(#kind "/sched_wakeup")                                                                \
	int BPF_PROG(runqslower_wakeup##suffix, struct task_struct *p)                            \
	{                                                                                         \
		return enqueued(p, false);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_wakeup_new")                                                            \
	int BPF_PROG(runqslower_wakeup_new##suffix, struct task_struct *p)                        \
	{                                                                                         \
		waking(p); /* in the parent, which woke it by forking it */                       \
		return enqueued(p, false);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_switch")                                                                \
	int BPF_PROG(runqslower_switch##suffix, bool preempt, struct task_struct *prev,           \
		     struct task_struct *next)                                                    \
	{                                                                                         \
		return switched(prev, next);                                                      \
	}

RUNQSLOWER_HOOKS(tp_btf, )
RUNQSLOWER_HOOKS(raw_tp, _raw)

char LICENSE[] SEC("license") = "GPL";
