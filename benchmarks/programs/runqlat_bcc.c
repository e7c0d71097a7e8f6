// BCC dialect run-queue latency: wakeup (or preemption while runnable) -> running,
// log2 histogram of microseconds. Only tracepoint fields are read (their layout comes
// from tracefs), so kernel headers of another version than the running kernel are fine.
#ifdef BENCH_NO_KERNEL_HEADERS
#define TASK_RUNNING 0
#else
#include <linux/sched.h> /* TASK_RUNNING, the way BCC tools get kernel constants */
#endif

BPF_HASH(start, u32, u64, 10240);
BPF_HISTOGRAM(dist, int, 32);

static __always_inline int enqueue(u32 tid)
{
	u64 now;

	if (!tid)
		return 0;
	now = bpf_ktime_get_ns();
	start.update(&tid, &now);
	return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup)
{
	return enqueue(args->pid);
}

TRACEPOINT_PROBE(sched, sched_wakeup_new)
{
	return enqueue(args->pid);
}

TRACEPOINT_PROBE(sched, sched_switch)
{
	u32 tid = args->next_pid;
	u64 *since, delta;

	if (args->prev_state == TASK_RUNNING)
		enqueue(args->prev_pid);
	since = start.lookup(&tid);
	if (!since)
		return 0;
	delta = bpf_ktime_get_ns() - *since;
	start.delete(&tid);
	if ((s64)delta < 0)
		return 0;
	dist.increment(bpf_log2l(delta / 1000));
	return 0;
}
