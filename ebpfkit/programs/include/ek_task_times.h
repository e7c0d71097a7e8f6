/* Log2 histograms of a time per task (runqlat: run-queue waits; cpudist: on- and off-CPU
 * time), one per key of the program's choosing (0 for all, a tgid, a tid, ...), in a hash map
 * of struct ek_task_times values that Python decodes through BTF (slots, sum_ns, comm).
 * Needs "ebpfkit.h" and bpf/bpf_core_read.h. */
#ifndef __EK_TASK_TIMES_H
#define __EK_TASK_TIMES_H

#define EK_TASK_TIMES_SLOTS 27 /* the last one holds every longer time */
#define EK_COMM_LEN 16

struct ek_task_times {
	__u32 slots[EK_TASK_TIMES_SLOTS];
	__u64 sum_ns; /* the times' exact sum (a Prometheus histogram's _sum) */
	char comm[EK_COMM_LEN]; /* of the first task counted under the key, when named */
};

static const struct ek_task_times ek_zero_task_times;

/* Count ``delta_ns`` under ``key`` (of the map's key type) in ``map``, in slots of ``unit_ns``;
 * with ``named``, the key's histogram carries the comm of ``task`` (its first one). */
static __always_inline void ek_task_times_add(void *map, const void *key, struct task_struct *task,
					      __u64 delta_ns, __u64 unit_ns, bool named)
{
	struct ek_task_times *hist = ek_map_lookup_or_init(map, key, &ek_zero_task_times);

	if (!hist)
		return;
	if (named && !hist->comm[0])
		BPF_CORE_READ_STR_INTO(&hist->comm, task, comm);
	__sync_fetch_and_add(&hist->sum_ns, delta_ns);
	__sync_fetch_and_add(&hist->slots[ek_hist_slot(delta_ns / unit_ns, EK_TASK_TIMES_SLOTS)], 1);
}

#endif /* __EK_TASK_TIMES_H */
