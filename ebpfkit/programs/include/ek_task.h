/* CO-RE reads of struct task_struct that survive field renames, for programs that include
 * vmlinux.h and bpf/bpf_core_read.h first. */
#ifndef __EK_TASK_H
#define __EK_TASK_H

#define EK_TASK_RUNNING 0

/* task->__state was task->state before 5.14: local flavours of both, so either compiles
 * against any kernel's vmlinux.h */
struct task_struct___ek_old {
	long state;
} __attribute__((preserve_access_index));
struct task_struct___ek_new {
	unsigned int __state;
} __attribute__((preserve_access_index));

/* A field of a task (EK_FIELD, ebpfkit.h). */
#define EK_TASK_FIELD(typed, t, field) EK_FIELD(typed, t, field)

static __always_inline long ek_task_state_of(struct task_struct *t, bool typed)
{
	struct task_struct___ek_old *old = (void *)t;
	struct task_struct___ek_new *new = (void *)t;

	if (bpf_core_field_exists(new->__state))
		return EK_TASK_FIELD(typed, new, __state);
	return EK_TASK_FIELD(typed, old, state);
}

static __always_inline long ek_task_state(struct task_struct *t)
{
	return ek_task_state_of(t, false);
}

/* A tool's -p/-t filter: t is of thread group tgid and is thread tid (0: any), and is not an
 * idle task (pid 0). */
static __always_inline bool ek_task_selected_of(struct task_struct *t, __u32 tgid, __u32 tid, bool typed)
{
	__u32 pid = EK_TASK_FIELD(typed, t, pid);

	if (tgid && EK_TASK_FIELD(typed, t, tgid) != tgid)
		return false;
	return pid && (!tid || pid == tid);
}

static __always_inline bool ek_task_selected(struct task_struct *t, __u32 tgid, __u32 tid)
{
	return ek_task_selected_of(t, tgid, tid, false);
}

/* The id of the task's cgroup v2 (what bpf_get_current_cgroup_id() gives for current):
 * its directory's inode number. For a task that is not current (a woken one). */
static __always_inline __u64 ek_task_cgroup_id(struct task_struct *t)
{
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* Cgroups nested deeper than this under the one looked for are not seen as under it. */
#define EK_CGROUP_MAX_DEPTH 32

/* Whether the task's cgroup v2 is the one with id `id` or lies below it (walking up the
 * parents: unlike an ancestors[level] lookup, this needs no level, which depends on where
 * the caller's cgroup namespace puts the root). */
static __always_inline bool ek_task_under_cgroup(struct task_struct *t, __u64 id)
{
	struct cgroup *cgrp = BPF_CORE_READ(t, cgroups, dfl_cgrp);

	for (int depth = 0; depth < EK_CGROUP_MAX_DEPTH && cgrp; depth++) {
		if (BPF_CORE_READ(cgrp, kn, id) == id)
			return true;
		cgrp = BPF_CORE_READ(cgrp, self.parent, cgroup);
	}
	return false;
}

/* The inode number of the task's PID namespace (what /proc/PID/ns/pid names): the
 * namespace its pid was allocated in last, pid->numbers[pid->level].ns, as the kernel's
 * task_active_pid_ns() finds it. */
static __always_inline __u32 ek_task_pidns(struct task_struct *t)
{
	struct pid *pid = BPF_CORE_READ(t, thread_pid);
	unsigned int level = BPF_CORE_READ(pid, level);
	struct upid upid;

	if (bpf_core_read(&upid, sizeof(upid), &pid->numbers[level]))
		return 0;
	return BPF_CORE_READ(upid.ns, ns.inum);
}

/* The user registers a system call saved, for a program at its exit tracepoint (whose record
 * has the call's number, not its arguments): what bpf_task_pt_regs() gives since 5.15, found
 * before it as the kernel's task_pt_regs() finds them, at the top of the task's kernel stack.
 * THREAD_SIZE is 16 KiB, 32 KiB with KASAN; the saved syscall number tells which. The pointer
 * is untyped either way: read through it with PT_REGS_*_CORE_SYSCALL. NULL if neither. */
/* bpf_func_id's value of bpf_task_pt_regs (5.15), a local flavour: not in an older vmlinux.h */
enum bpf_func_id___ek { BPF_FUNC_task_pt_regs___ek = 175 };

static __always_inline struct pt_regs *ek_current_syscall_regs(long nr)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct pt_regs *regs;
	char *stack;
	long saved;

	if (bpf_core_enum_value_exists(enum bpf_func_id___ek, BPF_FUNC_task_pt_regs___ek))
		return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
#if defined(__TARGET_ARCH_x86) || defined(__TARGET_ARCH_arm64)
	stack = BPF_CORE_READ(task, stack);
	for (int shift = 14; shift <= 15; shift++) {
		regs = (struct pt_regs *)(stack + (1UL << shift)) - 1;
#if defined(__TARGET_ARCH_x86)
		saved = BPF_CORE_READ(regs, orig_ax);
#else
		saved = BPF_CORE_READ(regs, syscallno);
#endif
		if (saved == nr)
			return regs;
	}
#endif
	return NULL;
}

/* The file the current task's fd `fd` is open as, or NULL. Read through probes (the typed
 * loads of bpf_get_current_task_btf() need 5.11). */
static __always_inline struct file *ek_current_fd_file(int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *f = NULL;

	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

#endif /* __EK_TASK_H */
