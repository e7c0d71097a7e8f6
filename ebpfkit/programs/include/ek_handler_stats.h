/* How often a handler ran and for how long, per key of the program's own: what hardirqs and
 * softirqs share. The program defines its map of struct ek_handler_stat values, finds the
 * stat for its key (ek_handler_stat_of) and, at the handler's entry:
 *	if (targ_count) ek_handler_count(stat_of(...)); else ek_handler_started();
 * and at its exit:
 *	if (!targ_count && (delta = ek_handler_elapsed()) != EK_NOT_TIMED)
 *		ek_handler_account(stat_of(...), delta); Needs "ebpfkit.h". The settings are the program's const volatile globals below. */
#ifndef __EK_HANDLER_STATS_H
#define __EK_HANDLER_STATS_H

#define EK_HANDLER_SLOTS 27

struct ek_handler_stat {
	__u64 count;
	__u64 total_ns;
	__u32 slots[EK_HANDLER_SLOTS]; /* log2 of the handler's time, with targ_dist */
};

const volatile bool targ_count = false; /* counts only: no clock reads */
const volatile bool targ_dist = false;  /* log2 histograms of the time */
const volatile bool targ_ns = false;    /* histogram in ns (default µs) */
const volatile bool targ_per_cpu = false;

/* when this CPU's handler started: the handlers timed here do not nest on a CPU */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ek_handler_start SEC(".maps");

static const struct ek_handler_stat ek_zero_handler_stat;

/* The stat of ``key`` in ``map``, created (zero) if it is new; NULL if the map is full. */
static __always_inline struct ek_handler_stat *ek_handler_stat_of(void *map, const void *key)
{
	struct ek_handler_stat *stat = bpf_map_lookup_elem(map, key);

	if (stat)
		return stat;
	bpf_map_update_elem(map, key, &ek_zero_handler_stat, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

static __always_inline __u32 ek_handler_cpu(void)
{
	return targ_per_cpu ? bpf_get_smp_processor_id() : 0;
}

#define EK_NOT_TIMED ((__u64)-1)

static __always_inline void ek_handler_count(struct ek_handler_stat *stat)
{
	if (stat)
		__sync_fetch_and_add(&stat->count, 1);
}

/* At the handler's entry: note the time. */
static __always_inline void ek_handler_started(void)
{
	__u32 zero = 0;
	__u64 *ts = bpf_map_lookup_elem(&ek_handler_start, &zero);

	if (ts)
		*ts = bpf_ktime_get_ns();
}

/* At its exit: the ns since it started, or EK_NOT_TIMED if it began before we attached. */
static __always_inline __u64 ek_handler_elapsed(void)
{
	__u32 zero = 0;
	__u64 *ts = bpf_map_lookup_elem(&ek_handler_start, &zero), delta;

	if (!ts || !*ts)
		return EK_NOT_TIMED;
	delta = bpf_ktime_get_ns() - *ts;
	*ts = 0;
	return delta;
}

/* Count one run of ``delta`` ns: its total and its histogram slot. */
static __always_inline void ek_handler_account(struct ek_handler_stat *stat, __u64 delta)
{
	if (!stat)
		return;
	__sync_fetch_and_add(&stat->count, 1);
	__sync_fetch_and_add(&stat->total_ns, delta);
	if (targ_dist) {
		delta /= targ_ns ? 1 : 1000;
		__sync_fetch_and_add(&stat->slots[ek_hist_slot(delta, EK_HANDLER_SLOTS)], 1);
	}
}

#endif
