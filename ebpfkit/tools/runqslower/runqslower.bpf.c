// SPDX-License-Identifier: GPL-2.0
/* Run-queue waits longer than a threshold, one event each: the task that waited, how long,
 * on which CPU, the task it replaced there, and the task that woke it.
 *
 * A wait starts at sched_waking, when a task that is not runnable is woken: it runs in the
 * waker's context (sched_wakeup may run later on the woken task's CPU, where the kernel queued
 * the wakeup for that CPU to do itself, and the current task there is not the waker), and the
 * time until then is part of the wait too: the kernel's run_delay, which starts at the enqueue,
 * leaves it out. A wait also starts when a task is preempted still runnable (no waker).
 * sched_waking is not emitted for a task that is runnable already, so it never restarts a wait
 * in progress; a stamp left on a task that was woken while still on its CPU is overwritten
 * before it can be read (leaving the CPU again means being preempted or woken again). */
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
	__u64 since; /* 0: not waiting in a run queue */
	__u32 waker_pid;
	char waker_comm[TASK_COMM_LEN];
};

/* A task's entry: in the task itself where the pointers are typed (task storage: a pointer
 * away, no hashing, gone with the task), else in a hash by tid. Entries are written in place
 * and never deleted (a switch costs lookups, not an insert and a delete); the hash is LRU, so
 * threads that are gone make room for new ones. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct waiting);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32); /* tid */
	__type(value, struct waiting);
} waits_by_tid SEC(".maps");

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct runqslower_event);

static struct waiting nobody;

/* ``typed``: the task pointers are typed (tp_btf), so their fields are read directly. */
static __always_inline bool traced(struct task_struct *t, bool typed)
{
	return ek_task_selected_of(t, targ_tgid, targ_tid, typed);
}

/* t's entry; with ``create``, made (nobody waiting, no waker) if it has none. */
static __always_inline struct waiting *entry(struct task_struct *t, bool create, bool typed)
{
	struct waiting *w;
	__u32 tid;

	if (typed)
		return bpf_task_storage_get(&waits, t, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	tid = BPF_CORE_READ(t, pid);
	w = bpf_map_lookup_elem(&waits_by_tid, &tid);
	if (w || !create)
		return w;
	bpf_map_update_elem(&waits_by_tid, &tid, &nobody, BPF_NOEXIST);
	return bpf_map_lookup_elem(&waits_by_tid, &tid);
}

/* Woken: the wait starts. Called in the waker's context (it is the current task). */
static __always_inline int waking(struct task_struct *p, bool typed)
{
	struct waiting *w;

	if (!traced(p, typed))
		return 0;
	w = entry(p, true, typed);
	if (!w)
		return 0;
	w->since = bpf_ktime_get_ns();
	w->waker_pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(&w->waker_comm, sizeof(w->waker_comm));
	return 0;
}

/* Switched out still runnable: back in the run queue at once, woken by nobody. */
static __always_inline void preempted(struct task_struct *p, bool typed)
{
	struct waiting *w;

	if (!traced(p, typed))
		return;
	w = entry(p, true, typed);
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

	w = entry(next, false, typed);
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
	w->since = 0; /* the next wait's start overwrites the waker too */
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
	SEC(#kind "/sched_wakeup_new")                                                            \
	int BPF_PROG(runqslower_wakeup_new##suffix, struct task_struct *p)                        \
	{                                                                                         \
		return waking(p, typed); /* in the parent, which woke it by forking it */         \
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
