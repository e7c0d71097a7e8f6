// SPDX-License-Identifier: GPL-2.0
/* Hard interrupt handlers: how often each ran and for how long (total, or a log2
 * histogram), per IRQ handler and optionally per CPU. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "hardirqs.h"

const volatile bool targ_count = false; /* counts only: no clock reads */
const volatile bool targ_dist = false;  /* log2 histograms of the time */
const volatile bool targ_ns = false;    /* histogram in ns (default µs) */
const volatile bool targ_per_cpu = false;

/* when this CPU's handler started: hard IRQ handlers do not nest on a CPU */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hardirq_key);
	__type(value, struct hardirq_stat);
} stats SEC(".maps");

static struct hardirq_stat zero_stat;

static __always_inline struct hardirq_stat *stat_of(int irq, struct irqaction *action)
{
	struct hardirq_key key = {};
	struct hardirq_stat *stat;

	key.irq = irq;
	key.cpu = targ_per_cpu ? bpf_get_smp_processor_id() : 0;
	bpf_probe_read_kernel_str(&key.name, sizeof(key.name), BPF_CORE_READ(action, name));
	stat = bpf_map_lookup_elem(&stats, &key);
	if (stat)
		return stat;
	bpf_map_update_elem(&stats, &key, &zero_stat, BPF_NOEXIST);
	return bpf_map_lookup_elem(&stats, &key);
}

static __always_inline int handler_entry(int irq, struct irqaction *action)
{
	struct hardirq_stat *stat;
	__u32 zero = 0;
	__u64 *ts;

	if (targ_count) {
		stat = stat_of(irq, action);
		if (stat)
			__sync_fetch_and_add(&stat->count, 1);
		return 0;
	}
	ts = bpf_map_lookup_elem(&start, &zero);
	if (ts)
		*ts = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int handler_exit(int irq, struct irqaction *action)
{
	struct hardirq_stat *stat;
	__u64 *ts, delta;
	__u32 zero = 0;

	if (targ_count)
		return 0;
	ts = bpf_map_lookup_elem(&start, &zero);
	if (!ts || !*ts)
		return 0; /* the handler began before we attached */
	delta = bpf_ktime_get_ns() - *ts;
	*ts = 0;
	stat = stat_of(irq, action);
	if (!stat)
		return 0;
	__sync_fetch_and_add(&stat->count, 1);
	__sync_fetch_and_add(&stat->total_ns, delta);
	if (targ_dist) {
		delta /= targ_ns ? 1 : 1000;
		__sync_fetch_and_add(&stat->slots[ek_hist_slot(delta, HARDIRQS_SLOTS)], 1);
	}
	return 0;
}

/* Each hook twice: BTF-typed tracepoints where the kernel has BTF of its own, raw
 * tracepoints (the same arguments, untyped; read through CO-RE) elsewhere. */
#define HARDIRQS_HOOKS(kind, suffix)                                                              \
	SEC(#kind "/irq_handler_entry")                                                           \
	int BPF_PROG(hardirq_entry##suffix, int irq, struct irqaction *action)                    \
	{                                                                                         \
		return handler_entry(irq, action);                                                \
	}                                                                                         \
	SEC(#kind "/irq_handler_exit")                                                            \
	int BPF_PROG(hardirq_exit##suffix, int irq, struct irqaction *action, int ret)            \
	{                                                                                         \
		return handler_exit(irq, action);                                                 \
	}

HARDIRQS_HOOKS(tp_btf, )
HARDIRQS_HOOKS(raw_tp, _raw)

char LICENSE[] SEC("license") = "GPL";
