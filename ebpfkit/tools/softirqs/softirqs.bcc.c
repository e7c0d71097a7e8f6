/* softirqs.bpf.c in BCC's dialect, for engine="bcc", read after handler_stats.bcc.h (the
 * session puts that first): the same map of the same stats per vector (and CPU), from the
 * irq:softirq_entry/exit tracepoints. */

struct softirq_key {
	u32 vec;
	u32 cpu; /* 0 unless per CPU */
};

BPF_HASH(stats, struct softirq_key, struct ek_handler_stat, 4096);

static inline struct ek_handler_stat *stat_of(u32 vec)
{
	struct softirq_key key = {.vec = vec, .cpu = ek_handler_cpu()};
	struct ek_handler_stat zero = {};

	return stats.lookup_or_try_init(&key, &zero);
}

TRACEPOINT_PROBE(irq, softirq_entry)
{
	if (EK_COUNT)
		ek_handler_count(stat_of(args->vec));
	else
		ek_handler_started();
	return 0;
}

TRACEPOINT_PROBE(irq, softirq_exit)
{
	u64 delta;

	if (!EK_COUNT && (delta = ek_handler_elapsed()) != EK_NOT_TIMED)
		ek_handler_account(stat_of(args->vec), delta);
	return 0;
}
