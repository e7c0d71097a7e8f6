// SPDX-License-Identifier: GPL-2.0
/* Off-CPU time by thread and stack: at sched_switch the task leaving the CPU has its kernel
 * and user stacks recorded (it is the current task, so bpf_get_stackid sees its stacks, and
 * the tracepoint's own frames sit below __schedule); when it is switched in again, the time
 * it was away is added to the account of (pid, tid, user stack, kernel stack), which keeps the
 * thread's name from when it was made.
 * Modelled on libbpf-tools' offcputime. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "ek_task_local.h"
#include "offcputime.h"

const volatile __u32 targ_tgid = 0;     /* 0: every process */
const volatile __u32 targ_tid = 0;      /* 0: every thread */
const volatile long targ_state = -1;    /* -1: whatever state it left the CPU in */
/* The state bits ps reports (the kernel's TASK_REPORT: S 1, D 2, T 4, t 8, ...): without the
 * modifiers a sleep may carry (TASK_FREEZABLE, TASK_WAKEKILL, TASK_NOLOAD), so --state 1
 * matches nanosleep's TASK_INTERRUPTIBLE | TASK_FREEZABLE. */
#define OFFCPU_STATE_BITS 0x7f
const volatile bool targ_user = true;   /* record user stacks */
const volatile bool targ_kernel = true; /* record kernel stacks */
const volatile __u64 targ_min_ns = 1;
const volatile __u64 targ_max_ns = (__u64)-1;

struct leaving {
	__u64 since;
	struct offcpu_key key;
};

/* A task's departure, written in place, never deleted: ``since`` 0 means not away. */
EK_TASK_LOCAL(departures, struct leaving, 10240);

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1024); /* the session sets --stack-storage-size */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, OFFCPU_MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct offcpu_key);
	__type(value, struct offcpu_val);
} offcpu SEC(".maps");

/* ``typed``: the task pointers are typed (tp_btf), so their fields are read directly. */
static __always_inline bool traced(struct task_struct *t, bool typed)
{
	if (targ_state != -1 && (ek_task_state_of(t, typed) & OFFCPU_STATE_BITS) != targ_state)
		return false;
	return ek_task_selected_of(t, targ_tgid, targ_tid, typed);
}

/* prev is still the current task: its stacks are the ones it blocks with. */
static __always_inline void switched_out(void *ctx, struct task_struct *prev, bool typed)
{
	struct leaving *l;

	if (!traced(prev, typed))
		return;
	l = departures_of(prev, true, typed);
	if (!l)
		return;
	l->key.pid = EK_TASK_FIELD(typed, prev, tgid);
	l->key.tid = EK_TASK_FIELD(typed, prev, pid);
	l->key.user_stack_id = targ_user ? bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) : -1;
	l->key.kernel_stack_id = targ_kernel ? bpf_get_stackid(ctx, &stacks, 0) : -1;
	l->since = bpf_ktime_get_ns();
}

static __always_inline void switched_in(struct task_struct *next, bool typed)
{
	struct offcpu_val *val;
	struct leaving *l;
	__u64 delta;

	l = departures_of(next, false, typed);
	if (!l || !l->since)
		return;
	delta = bpf_ktime_get_ns() - l->since;
	l->since = 0;
	if (delta < targ_min_ns || delta > targ_max_ns)
		return;
	val = bpf_map_lookup_elem(&offcpu, &l->key);
	if (!val) {
		struct offcpu_val first = {.total_ns = delta, .count = 1};

		/* the name only once per account, not at each switch */
		BPF_CORE_READ_STR_INTO(&first.comm, next, comm);
		/* another CPU may make the same key at the same time: then add to that one */
		if (!bpf_map_update_elem(&offcpu, &l->key, &first, BPF_NOEXIST))
			return;
		val = bpf_map_lookup_elem(&offcpu, &l->key);
		if (!val)
			return;
	}
	__sync_fetch_and_add(&val->total_ns, delta);
	__sync_fetch_and_add(&val->count, 1);
}

/* Twice: as a BTF-typed tracepoint where the kernel has BTF of its own, and as a raw
 * tracepoint (the same arguments untyped, read through CO-RE: a --btf file suffices). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcputime_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	switched_out(ctx, prev, true);
	switched_in(next, true);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(offcputime_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	switched_out(ctx, prev, false);
	switched_in(next, false);
	return 0;
}

EK_EXPORT_TYPE(struct offcpu_key);
EK_EXPORT_TYPE(struct offcpu_val);

char LICENSE[] SEC("license") = "GPL";
