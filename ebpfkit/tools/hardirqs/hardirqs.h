/* Shared by hardirqs.bpf.c and, through BTF, by session.py (the map it decodes). */
#ifndef __HARDIRQS_H
#define __HARDIRQS_H

#define HARDIRQS_SLOTS 27
#define IRQ_NAME_LEN 32

struct hardirq_key {
	__u32 irq;
	__u32 cpu; /* 0 unless per CPU */
	char name[IRQ_NAME_LEN]; /* the handler's (irqaction) name, as /proc/interrupts shows it */
};

struct hardirq_stat {
	__u64 count;
	__u64 total_ns;
	__u32 slots[HARDIRQS_SLOTS]; /* log2 of the handler's time, with targ_dist */
};

#endif
