// SPDX-License-Identifier: GPL-2.0
/* Off-CPU time by thread and stack: at sched_switch the task leaving the CPU has its kernel
 * and user stacks recorded (it is the current task, so bpf_get_stackid sees its stacks, and
 * the tracepoint's own frames sit below __schedule); when it is switched in again, the time
 * it was away is added to the account of (pid, tid, comm, user stack, kernel stack).
 * Modelled on libbpf-tools' offcputime. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32); /* tid */
	__type(value, struct leaving);
} start SEC(".maps");

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

static struct leaving empty;

static __always_inline bool traced(struct task_struct *t)
{
	if (targ_state != -1 && (ek_task_state(t) & OFFCPU_STATE_BITS) != targ_state)
		return false;
	return ek_task_selected(t, targ_tgid, targ_tid);
}

/* prev is still the current task: its stacks are the ones it blocks with. */
static __always_inline void switched_out(void *ctx, struct task_struct *prev)
{
	struct leaving *l;
	__u32 tid;

	if (!traced(prev))
		return;
	tid = BPF_CORE_READ(prev, pid);
	if (bpf_map_update_elem(&start, &tid, &empty, BPF_ANY))
		return;
	l = bpf_map_lookup_elem(&start, &tid);
	if (!l)
		return;
	l->key.pid = BPF_CORE_READ(prev, tgid);
	l->key.tid = tid;
	l->key.user_stack_id = targ_user ? bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) : -1;
	l->key.kernel_stack_id = targ_kernel ? bpf_get_stackid(ctx, &stacks, 0) : -1;
	BPF_CORE_READ_STR_INTO(&l->key.comm, prev, comm);
	l->since = bpf_ktime_get_ns();
}

static __always_inline void switched_in(struct task_struct *next)
{
	struct offcpu_val *val, zero = {};
	struct leaving *l;
	__u64 delta;
	__u32 tid = BPF_CORE_READ(next, pid);

	l = bpf_map_lookup_elem(&start, &tid);
	if (!l)
		return;
	delta = bpf_ktime_get_ns() - l->since;
	if (delta < targ_min_ns || delta > targ_max_ns)
		goto done;
	val = bpf_map_lookup_elem(&offcpu, &l->key);
	if (!val) {
		bpf_map_update_elem(&offcpu, &l->key, &zero, BPF_NOEXIST);
		val = bpf_map_lookup_elem(&offcpu, &l->key);
		if (!val)
			goto done;
	}
	__sync_fetch_and_add(&val->total_ns, delta);
	__sync_fetch_and_add(&val->count, 1);
done:
	bpf_map_delete_elem(&start, &tid);
}

/* Twice: as a BTF-typed tracepoint where the kernel has BTF of its own, and as a raw
 * tracepoint (the same arguments untyped, read through CO-RE: a --btf file suffices). */
SEC("tp_btf/sched_switch")
int BPF_PROG(offcputime_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	switched_out(ctx, prev);
	switched_in(next);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(offcputime_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	switched_out(ctx, prev);
	switched_in(next);
	return 0;
}

EK_EXPORT_TYPE(struct offcpu_key);
EK_EXPORT_TYPE(struct offcpu_val);

char LICENSE[] SEC("license") = "GPL";
