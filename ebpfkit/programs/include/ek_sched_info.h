/* The scheduler's own run-queue account of a task (CONFIG_SCHED_INFO: sched_info.last_queued,
 * run_delay, pcount, last_arrival), read at sched_switch before the kernel accounts the
 * switch-in. Include after ebpfkit.h (EK_FIELD) and bpf/bpf_core_read.h. */
#ifndef __EK_SCHED_INFO_H
#define __EK_SCHED_INFO_H

/* Without CONFIG_FAIR_GROUP_SCHED a task's cfs_rq is its run queue's own, with no pointer back. */
struct cfs_rq___ek_flat {
	struct rq *rq;
} __attribute__((preserve_access_index));

/* The clock of the run queue ``next`` is being switched in on, which the scheduler has just
 * updated (the clock its last_queued was stamped with): through its CFS queue, which every
 * task has whatever its class. ``typed``: tp_btf, fields read directly. */
static __always_inline __u64 ek_run_queue_clock(struct task_struct *next, bool typed)
{
	struct cfs_rq___ek_flat *cfs = (void *)EK_FIELD(typed, next, se.cfs_rq);

	if (bpf_core_field_exists(cfs->rq))
		return typed ? cfs->rq->clock : BPF_CORE_READ(cfs, rq, clock);
	return BPF_CORE_READ((struct rq *)((void *)cfs - bpf_core_field_offset(struct rq, cfs)), clock);
}

#endif /* __EK_SCHED_INFO_H */
