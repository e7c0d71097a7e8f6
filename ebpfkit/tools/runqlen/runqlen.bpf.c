// SPDX-License-Identifier: GPL-2.0
/* Run-queue length by sampling: a cpu-clock perf event fires on every CPU at a fixed
 * frequency and counts, in a linear histogram, how many tasks were waiting in that CPU's run
 * queue (runnable, not running) at that instant. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "runqlen.h"

const volatile bool targ_per_cpu = false; /* one histogram per CPU (key = CPU), else key 0 */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* CPU, or 0 for the single histogram */
	__type(value, struct runqlen_hist);
} hists SEC(".maps");

static struct runqlen_hist zero_hist;

/* The fields this reads under each kernel's names, whichever vmlinux.h compiled it:
 * with group scheduling a cfs_rq points to its CPU's rq (whose nr_running counts every
 * runnable task of every class); without, the task's cfs_rq is the CPU's, whose counter
 * was nr_running before 6.14 and is nr_queued since. */
struct cfs_rq___grouped {
	struct rq *rq;
} __attribute__((preserve_access_index));

struct cfs_rq___queued {
	unsigned int nr_queued;
} __attribute__((preserve_access_index));

struct cfs_rq___running {
	unsigned int nr_running;
} __attribute__((preserve_access_index));

static __always_inline __u32 cpu_nr_running(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	void *cfs = BPF_CORE_READ(task, se.cfs_rq);

	if (bpf_core_field_exists(((struct cfs_rq___grouped *)0)->rq))
		return BPF_CORE_READ((struct cfs_rq___grouped *)cfs, rq, nr_running);
	if (bpf_core_field_exists(((struct cfs_rq___queued *)0)->nr_queued))
		return BPF_CORE_READ((struct cfs_rq___queued *)cfs, nr_queued);
	return BPF_CORE_READ((struct cfs_rq___running *)cfs, nr_running);
}

SEC("perf_event")
int runqlen_sample(struct bpf_perf_event_data *ctx)
{
	struct runqlen_hist *hist;
	__u32 len, key;

	/* as BCC's: the running task is not waiting (0 is an idle CPU or one running task) */
	len = cpu_nr_running();
	if (len > 0)
		len--;

	key = targ_per_cpu ? bpf_get_smp_processor_id() : 0;
	hist = ek_map_lookup_or_init(&hists, &key, &zero_hist);
	if (!hist)
		return 0;
	__sync_fetch_and_add(&hist->slots[ek_clamp_slot(len, RUNQLEN_SLOTS)], 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
