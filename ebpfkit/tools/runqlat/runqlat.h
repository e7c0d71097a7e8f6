/* runqlat.bpf.c's settings, which session.py's KEY_* repeat; its histograms are
 * ek_task_times.h's (cpudist's too). */
#ifndef __RUNQLAT_H
#define __RUNQLAT_H

/* What a histogram is kept per (targ_key; session.py's KEY_* say the same) */
#define RUNQLAT_KEY_NONE 0   /* one histogram: key 0 */
#define RUNQLAT_KEY_TGID 1   /* per process */
#define RUNQLAT_KEY_TID 2    /* per thread */
#define RUNQLAT_KEY_PIDNS 3  /* per PID namespace: its inode number */
#define RUNQLAT_KEY_CGROUP 4 /* per cgroup v2: its id (its directory's inode number) */

#endif
