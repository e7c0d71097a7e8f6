// SPDX-License-Identifier: GPL-2.0
/* Sections with hard interrupts off, and with softirqs off, longer than a threshold.
 *
 * Every mode runs a tick on a cpu-clock perf event per CPU: an hrtimer, so a hard interrupt.
 * It cannot fire while the CPU has interrupts off, so a tick that comes later than the
 * threshold after the previous one ends a hard-IRQ-off section (software mode; the stack is
 * the one the tick interrupts, after the section). In NMI mode a cycles event's NMI, which
 * fires with interrupts off, sees the late tick and takes the culprit's stack for it. In
 * exact mode the preemptirq tracepoints time each section and the tick only watches softirqs.
 *
 * Softirqs off (local_bh_disable, spin_lock_bh) leave hard interrupts on: the tick runs, and
 * reads the preempt_count of the code it interrupted. Its softirq-disable bits set (and not
 * serving a softirq, which is the softirqs tool's business) on consecutive ticks make a
 * section: from the last tick that saw them enabled to the first that sees them enabled
 * again, each within a period of the section's ends. Unless that one comes late (the CPU
 * did not run, e.g. a hypervisor's stall, or interrupts were off after the section): then
 * the section ended within a period of the last tick inside it. A late first tick inside
 * needs no care: the ticks due before the section would have run before it began. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_preempt.h"
#include "irqoff.h"

const volatile __u64 targ_threshold_ns = 10000000;
const volatile __u32 targ_mode = IRQOFF_MODE_SOFTWARE;
const volatile __u64 targ_period_ns = 1000000; /* the tick's */

struct cpu_state {
	__u64 last_tick;     /* when the tick last ran here */
	__u64 soft_clear;    /* the last tick that saw softirqs enabled */
	__u64 soft_start;    /* != 0: in a softirq-off section, which began after this */
	__u64 soft_last;     /* the last tick inside it */
	__u64 irq_off_since; /* exact mode: irq_disable seen at */
	__u64 nmi_ts;        /* NMI mode: when the NMI took the culprit below */
	__s32 nmi_stack;
	__u32 nmi_pid, nmi_tid;
	char nmi_comm[TASK_COMM_LEN];
	__s32 soft_stack;
	__u32 soft_pid, soft_tid;
	char soft_comm[TASK_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 4096);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct irqoff_event);

static __always_inline struct cpu_state *this_cpu(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cpus, &zero);
}

static __always_inline void emit(__u32 kind, __u64 now, __u64 lat, __u32 pid, __u32 tid,
				 const char *comm, __s32 stack, __u32 from)
{
	struct irqoff_event *ev = ek_ringbuf_reserve(events, sizeof(*ev));

	if (!ev)
		return;
	ev->ts = now;
	ev->lat_ns = lat;
	ev->kind = kind;
	ev->cpu = bpf_get_smp_processor_id();
	ev->pid = pid;
	ev->tid = tid;
	ev->stack_id = stack;
	ev->stack_from = from;
	bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), comm);
	bpf_ringbuf_submit(ev, 0);
}

static __always_inline void emit_current(void *ctx, __u32 kind, __u64 now, __u64 lat, __u32 from)
{
	__u64 id = bpf_get_current_pid_tgid();
	char comm[TASK_COMM_LEN];

	bpf_get_current_comm(comm, sizeof(comm));
	emit(kind, now, lat, id >> 32, (__u32)id, comm,
	     bpf_get_stackid(ctx, &stacks, BPF_F_REUSE_STACKID), from);
}

/* A hard-IRQ-off section ended just before this (late) tick. */
static __always_inline void late_tick(void *ctx, struct cpu_state *st, __u64 now)
{
	__u64 gap = now - st->last_tick;

	if (targ_mode == IRQOFF_MODE_NMI && st->nmi_ts > st->last_tick) {
		emit(IRQOFF_HARD, now, gap, st->nmi_pid, st->nmi_tid, st->nmi_comm, st->nmi_stack,
		     IRQOFF_STACK_CULPRIT);
		return;
	}
	emit_current(ctx, IRQOFF_HARD, now, gap, IRQOFF_STACK_TICK);
}

static __always_inline void watch_softirqs(void *ctx, struct cpu_state *st, __u64 now, int count)
{
	bool bh_off = (count & EK_SOFTIRQ_DISABLE_MASK) && !(count & EK_SOFTIRQ_OFFSET);
	__u64 id, end;

	if (bh_off) {
		st->soft_last = now;
		if (!st->soft_start) { /* the first tick inside: its task is the culprit (no preemption) */
			st->soft_start = st->soft_clear ? st->soft_clear : now;
			id = bpf_get_current_pid_tgid();
			st->soft_pid = id >> 32;
			st->soft_tid = (__u32)id;
			bpf_get_current_comm(st->soft_comm, sizeof(st->soft_comm));
			st->soft_stack = bpf_get_stackid(ctx, &stacks, BPF_F_REUSE_STACKID);
		}
		return;
	}
	if (st->soft_start) {
		end = now - st->soft_last <= 2 * targ_period_ns ? now : st->soft_last + targ_period_ns;
		if (end - st->soft_start > targ_threshold_ns)
			emit(IRQOFF_SOFT, now, end - st->soft_start, st->soft_pid, st->soft_tid,
			     st->soft_comm, st->soft_stack, IRQOFF_STACK_CULPRIT);
	}
	st->soft_start = 0;
	st->soft_clear = now;
}

static __always_inline int tick(void *ctx, int count)
{
	struct cpu_state *st = this_cpu();
	__u64 now = bpf_ktime_get_ns();

	if (!st)
		return 0;
	if (targ_mode != IRQOFF_MODE_EXACT && st->last_tick && now - st->last_tick > targ_threshold_ns)
		late_tick(ctx, st, now);
	st->last_tick = now;
	if (count >= 0)
		watch_softirqs(ctx, st, now, count);
	return 0;
}

/* The tick, one of the two: preempt_count per CPU (x86), or in the task (other
 * architectures; on x86 this one watches hard interrupts only). */
SEC("perf_event")
int irqoff_tick(struct bpf_perf_event_data *ctx)
{
	return tick(ctx, ek_preempt_count_percpu());
}

SEC("perf_event")
int irqoff_tick_task(struct bpf_perf_event_data *ctx)
{
	return tick(ctx, ek_preempt_count_task());
}

/* NMI mode: a cycles overflow, which interrupts even code with interrupts off. */
SEC("perf_event")
int irqoff_nmi(struct bpf_perf_event_data *ctx)
{
	struct cpu_state *st = this_cpu();
	__u64 now = bpf_ktime_get_ns(), id;

	if (!st || !st->last_tick || now - st->last_tick <= targ_threshold_ns)
		return 0;
	if (st->nmi_ts > st->last_tick)
		return 0; /* this section's culprit is taken already */
	id = bpf_get_current_pid_tgid();
	st->nmi_pid = id >> 32;
	st->nmi_tid = (__u32)id;
	bpf_get_current_comm(st->nmi_comm, sizeof(st->nmi_comm));
	st->nmi_stack = bpf_get_stackid(ctx, &stacks, BPF_F_REUSE_STACKID);
	st->nmi_ts = now;
	return 0;
}

/* Exact mode: the preemptirq tracepoints (CONFIG_PREEMPTIRQ_TRACEPOINTS kernels). */
SEC("tracepoint/preemptirq/irq_disable")
int irqoff_disable(void *ctx)
{
	struct cpu_state *st = this_cpu();

	if (st)
		st->irq_off_since = bpf_ktime_get_ns();
	return 0;
}

SEC("tracepoint/preemptirq/irq_enable")
int irqoff_enable(void *ctx)
{
	struct cpu_state *st = this_cpu();
	__u64 now = bpf_ktime_get_ns();

	if (!st || !st->irq_off_since)
		return 0;
	if (now - st->irq_off_since > targ_threshold_ns)
		emit_current(ctx, IRQOFF_HARD, now, now - st->irq_off_since, IRQOFF_STACK_CULPRIT);
	st->irq_off_since = 0;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
