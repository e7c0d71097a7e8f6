/* CO-RE reads of struct task_struct that survive field renames, for programs that include
 * vmlinux.h and bpf/bpf_core_read.h first. */
#ifndef __EK_TASK_H
#define __EK_TASK_H

#define EK_TASK_RUNNING 0

/* task->__state was task->state before 5.14 */
struct task_struct___ek_old {
	long state;
} __attribute__((preserve_access_index));

static __always_inline long ek_task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___ek_old *)t, state);
}

/* A tool's -p/-t filter: t is of thread group tgid and is thread tid (0: any), and is not an
 * idle task (pid 0). */
static __always_inline bool ek_task_selected(struct task_struct *t, __u32 tgid, __u32 tid)
{
	if (tgid && BPF_CORE_READ(t, tgid) != tgid)
		return false;
	if (tid && BPF_CORE_READ(t, pid) != tid)
		return false;
	return BPF_CORE_READ(t, pid) != 0;
}

#endif /* __EK_TASK_H */
