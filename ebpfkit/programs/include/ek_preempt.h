/* The preempt_count of the code running now, which says whether it is a task or an interrupt
 * (hard, NMI, or a softirq being served) and how deep bottom halves are disabled. Include
 * after bpf/bpf_helpers.h and bpf/bpf_core_read.h. */
#ifndef __EK_PREEMPT_H
#define __EK_PREEMPT_H

#define EK_SOFTIRQ_OFFSET 0x100          /* serving a softirq */
#define EK_SOFTIRQ_DISABLE_MASK 0xfe00   /* local_bh_disable() depth, in steps of 0x200 */
#define EK_HARDIRQ_NMI_MASK 0x00ff0000   /* in a hard interrupt (0xf0000) or an NMI (above) */
#define EK_PREEMPT_COUNT_MASK 0x7fffffff /* x86 keeps PREEMPT_NEED_RESCHED (inverted) in bit 31 */

/* x86's preempt_count is a per-CPU variable: __preempt_count before 6.2 and since 6.15,
 * pcpu_hot.preempt_count in between; elsewhere it is in the task's thread_info. */
extern const int __preempt_count __ksym __weak;
struct pcpu_hot___ek {
	int preempt_count;
} __attribute__((preserve_access_index));
extern const struct pcpu_hot___ek pcpu_hot __ksym __weak;
struct thread_info___ek {
	int preempt_count;
} __attribute__((preserve_access_index));
struct task_struct___ek_preempt {
	struct thread_info___ek thread_info;
} __attribute__((preserve_access_index));

#ifndef bpf_ksym_exists /* libbpf < 1.2's bpf_helpers.h */
#define bpf_ksym_exists(sym) (!!(sym))
#endif

/* x86: -1 where neither variable exists. The per-CPU variable's address comes from kallsyms,
 * so a kernel without CONFIG_KALLSYMS_ALL refuses a program naming it: a tool loads this
 * only where /proc/kallsyms lists one (sysinfo.events.kallsyms_lists), else the next. */
static __always_inline int ek_preempt_count_percpu(void)
{
	if (bpf_ksym_exists(&__preempt_count))
		return *(int *)bpf_this_cpu_ptr(&__preempt_count) & EK_PREEMPT_COUNT_MASK;
	if (bpf_ksym_exists(&pcpu_hot))
		return ((struct pcpu_hot___ek *)bpf_this_cpu_ptr(&pcpu_hot))->preempt_count &
		       EK_PREEMPT_COUNT_MASK;
	return -1;
}

/* Other architectures: -1 where the task has none (x86 keeps it per CPU). */
static __always_inline int ek_preempt_count_task(void)
{
	if (bpf_core_field_exists(((struct thread_info___ek *)0)->preempt_count))
		return BPF_CORE_READ((struct task_struct___ek_preempt *)bpf_get_current_task(),
				     thread_info.preempt_count) & EK_PREEMPT_COUNT_MASK;
	return -1;
}

#endif
