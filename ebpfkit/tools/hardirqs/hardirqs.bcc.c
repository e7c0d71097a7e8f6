/* hardirqs.bpf.c in BCC's dialect, for engine="bcc", read after handler_stats.bcc.h (the
 * session puts that first): the same map of the same stats per IRQ handler (its irqaction) and
 * CPU, from the irq_handler_entry/exit raw tracepoints. */
#include <linux/interrupt.h>

#define IRQ_NAME_LEN 32

struct hardirq_key {
	u32 irq;
	u32 cpu; /* 0 unless per CPU */
	u64 action; /* the struct irqaction's address: one handler of the IRQ line */
};

struct hardirq_stat {
	struct ek_handler_stat stat;
	char name[IRQ_NAME_LEN]; /* the handler's name, as /proc/interrupts shows it */
};

BPF_HASH(stats, struct hardirq_key, struct hardirq_stat, 4096);

static inline struct ek_handler_stat *stat_of(u32 irq, struct irqaction *action)
{
	struct hardirq_key key = {.irq = irq, .cpu = ek_handler_cpu(), .action = (u64)action};
	struct hardirq_stat *found = stats.lookup(&key), fresh = {};
	const char *name = NULL;

	if (!found) {
		bpf_probe_read_kernel(&name, sizeof(name), &action->name);
		bpf_probe_read_kernel_str(&fresh.name, sizeof(fresh.name), name);
		stats.insert(&key, &fresh);
		found = stats.lookup(&key);
	}
	return found ? &found->stat : NULL;
}

RAW_TRACEPOINT_PROBE(irq_handler_entry)
{
	if (EK_COUNT)
		ek_handler_count(stat_of(ctx->args[0], (struct irqaction *)ctx->args[1]));
	else
		ek_handler_started();
	return 0;
}

RAW_TRACEPOINT_PROBE(irq_handler_exit)
{
	u64 delta;

	if (!EK_COUNT && (delta = ek_handler_elapsed()) != EK_NOT_TIMED)
		ek_handler_account(stat_of(ctx->args[0], (struct irqaction *)ctx->args[1]), delta);
	return 0;
}
