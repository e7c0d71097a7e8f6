/* ek_handler_stats.h in BCC's dialect: what hardirqs' and softirqs' programs for
 * engine="bcc" share (where the kernel has its headers but no BTF, BCC compiles these).
 * The same stat per key and the same slots; the settings come as -D flags (EK_COUNT,
 * EK_DIST, EK_NS, EK_PER_CPU: 0 or 1) where the CO-RE program has const volatile globals. */
#ifndef __EK_HANDLER_STATS_BCC_H
#define __EK_HANDLER_STATS_BCC_H

#define EK_HANDLER_SLOTS 27
#define EK_NOT_TIMED ((u64)-1)

struct ek_handler_stat {
	u64 count;
	u64 total_ns;
	u32 slots[EK_HANDLER_SLOTS];
};

/* when this CPU's handler started: the handlers timed here do not nest on a CPU */
BPF_PERCPU_ARRAY(ek_handler_start, u64, 1);

static inline u32 ek_handler_cpu(void)
{
	return EK_PER_CPU ? bpf_get_smp_processor_id() : 0;
}

static inline void ek_handler_started(void)
{
	int zero = 0;
	u64 *ts = ek_handler_start.lookup(&zero);

	if (ts)
		*ts = bpf_ktime_get_ns();
}

/* the ns since this CPU's handler started, or EK_NOT_TIMED if it began before we attached */
static inline u64 ek_handler_elapsed(void)
{
	int zero = 0;
	u64 *ts = ek_handler_start.lookup(&zero), delta;

	if (!ts || !*ts)
		return EK_NOT_TIMED;
	delta = bpf_ktime_get_ns() - *ts;
	*ts = 0;
	return delta;
}

static inline void ek_handler_count(struct ek_handler_stat *stat)
{
	if (stat)
		lock_xadd(&stat->count, 1);
}

/* one run of delta ns: its total and its slot (floor(log2), as ek_hist_slot) */
static inline void ek_handler_account(struct ek_handler_stat *stat, u64 delta)
{
	u64 slot;

	if (!stat)
		return;
	lock_xadd(&stat->count, 1);
	lock_xadd(&stat->total_ns, delta);
	if (EK_DIST) {
		delta /= EK_NS ? 1 : 1000;
		slot = delta ? bpf_log2l(delta) - 1 : 0;
		/* Clamped in asm: the register compared is the one used (6.1), and against an
		 * immediate. Clang's default CPU has no "jlt", so in C the clamp becomes
		 * "if r_26 > slot", and 5.10's verifier follows that jump even where slot >= 32
		 * cannot take it, with bounds it then loses: "misaligned access off
		 * (0x0; 0xffffffffffffffff)". It prunes a jump against an immediate. */
		asm volatile("if %[slot] < %[last] goto +1\n\t%[slot] = %[last]"
			     : [slot] "+r"(slot) : [last] "i"(EK_HANDLER_SLOTS - 1));
		lock_xadd(&stat->slots[slot], 1);
	}
}

#endif
