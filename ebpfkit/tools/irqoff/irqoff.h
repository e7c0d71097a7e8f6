/* Shared by irqoff.bpf.c and, through BTF, by session.py (the events it decodes). */
#ifndef __IRQOFF_H
#define __IRQOFF_H

#define TASK_COMM_LEN 16

/* how the kernel side finds hard-IRQ-off sections (session.py's MODES, same order) */
#define IRQOFF_MODE_SOFTWARE 0 /* cpu-clock (hrtimer) ticks: a late tick is a section */
#define IRQOFF_MODE_NMI 1      /* the same, plus a cycles NMI that sees the culprit */
#define IRQOFF_MODE_EXACT 2    /* preemptirq irq_disable/irq_enable tracepoints */

#define IRQOFF_HARD 0 /* hard interrupts off */
#define IRQOFF_SOFT 1 /* softirqs (bottom halves) off */

#define IRQOFF_STACK_CULPRIT 0 /* the stack inside the section (NMI, exact, softirq sample) */
#define IRQOFF_STACK_TICK 1    /* the stack when the late tick finally ran */

struct irqoff_event {
	__u64 ts;     /* CLOCK_MONOTONIC ns when the section was seen to end */
	__u64 lat_ns; /* its length (sampling modes: an upper bound, within one tick) */
	__u32 kind;   /* IRQOFF_HARD / IRQOFF_SOFT */
	__u32 cpu;
	__u32 pid;
	__u32 tid;
	__s32 stack_id; /* kernel stack in `stacks`, < 0 when none was taken */
	__u32 stack_from; /* IRQOFF_STACK_* */
	char comm[TASK_COMM_LEN];
};

#endif
