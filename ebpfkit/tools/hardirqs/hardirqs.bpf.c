// SPDX-License-Identifier: GPL-2.0
/* Hard interrupt handlers: how often each ran and for how long (total, or a log2
 * histogram), per IRQ handler and optionally per CPU. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_handler_stats.h"

#define IRQ_NAME_LEN 32

/* Keyed by the handler (its irqaction) rather than its name: building a key then costs no
 * string copy, and the name is read once, when a handler's entry is made. */
struct hardirq_key {
	__u32 irq;
	__u32 cpu; /* 0 unless per CPU */
	__u64 action; /* the struct irqaction's address: one handler of the IRQ line */
};

struct hardirq_stat {
	struct ek_handler_stat stat;
	char name[IRQ_NAME_LEN]; /* the handler's (irqaction's) name, as /proc/interrupts shows it */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hardirq_key);
	__type(value, struct hardirq_stat);
} stats SEC(".maps");

static __always_inline struct ek_handler_stat *stat_of(int irq, struct irqaction *action)
{
	struct hardirq_key key = {.irq = irq, .cpu = ek_handler_cpu(), .action = (__u64)action};
	struct hardirq_stat *found = bpf_map_lookup_elem(&stats, &key), fresh = {};

	if (!found) {
		bpf_probe_read_kernel_str(&fresh.name, sizeof(fresh.name), BPF_CORE_READ(action, name));
		bpf_map_update_elem(&stats, &key, &fresh, BPF_NOEXIST);
		found = bpf_map_lookup_elem(&stats, &key);
	}
	return found ? &found->stat : NULL;
}

static __always_inline int handler_entry(int irq, struct irqaction *action)
{
	if (targ_count)
		ek_handler_count(stat_of(irq, action));
	else
		ek_handler_started();
	return 0;
}

static __always_inline int handler_exit(int irq, struct irqaction *action)
{
	__u64 delta;

	if (!targ_count && (delta = ek_handler_elapsed()) != EK_NOT_TIMED)
		ek_handler_account(stat_of(irq, action), delta);
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
