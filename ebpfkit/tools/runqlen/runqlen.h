/* Shared by runqlen.bpf.c and, through BTF, by session.py (the map values it decodes). */
#ifndef __RUNQLEN_H
#define __RUNQLEN_H

#define RUNQLEN_SLOTS 32 /* queue lengths 0..30, and 31 for "31 or more" */

struct runqlen_hist {
	__u32 slots[RUNQLEN_SLOTS];
};

#endif
