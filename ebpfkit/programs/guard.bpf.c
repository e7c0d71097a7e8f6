// SPDX-License-Identifier: GPL-2.0
/* guard: deny file operations on protected (dev, ino) objects and signals/ptrace on
 * protected processes to every subject that is not trusted.
 *
 * protected: (dev, ino) -> denied operations; a directory protects everything below it
 *   (the hooks walk d_parent, bounded by GUARD_MAX_DEPTH).
 * trusted:   (dev, ino) of executables -> 1 (trust) | 2 (trust inherited by children).
 * task storage holds each task's trust; exec re-evaluates it, fork copies it when inherited.
 * Enforcement never depends on the ring buffer: a full buffer only counts a lost event. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "guard.h"

#define EPERM 1
#define MAY_WRITE 0x2
#define MAY_READ 0x4
#define MAY_EXEC 0x1
#define FMODE_WRITE 0x2
#define O_TRUNC 01000
#define MAP_SHARED 0x01
#define PROT_WRITE 0x2
#define ATTR_MODE 1
#define ATTR_UID 2
#define ATTR_GID 4
#define ATTR_SIZE 8

#define PTRACE_MODE_ATTACH 0x02

#define TRUST_SELF 1
#define TRUST_INHERIT 2

const volatile bool targ_audit = false;
const volatile __u32 targ_agent_tgid = 0; /* the logging agent: trusted, protected */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct guard_key);
	__type(value, __u32);
} protected SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct guard_key);
	__type(value, __u32);
} trusted SEC(".maps");

/* executables whose processes cannot be killed/ptraced */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct guard_key);
	__type(value, __u32);
} protected_exe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} task_trust SEC(".maps");

/* [0] denied, [1] allowed in audit mode */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct guard_event);

static __always_inline struct guard_key inode_key(struct inode *inode)
{
	struct guard_key key = {};

	key.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	key.ino = BPF_CORE_READ(inode, i_ino);
	return key;
}

static __always_inline __u32 exe_trust(struct task_struct *task)
{
	struct inode *inode = BPF_CORE_READ(task, mm, exe_file, f_inode);
	struct guard_key key;
	__u32 *v;

	if (!inode)
		return 0;
	key = inode_key(inode);
	v = bpf_map_lookup_elem(&trusted, &key);
	return v ? *v : 0;
}

/* trust of the current task: its task storage (set at exec/fork), else its executable */
static __always_inline bool current_trusted(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 *t;

	if (targ_agent_tgid && (bpf_get_current_pid_tgid() >> 32) == targ_agent_tgid)
		return true;
	t = bpf_task_storage_get(&task_trust, task, 0, 0);
	if (t && *t)
		return true;
	return exe_trust(task) != 0;
}

/* The operations denied on a dentry: the union over it and its ancestors of their
 * recursive bits (low 16), plus its own self-only bits (high 16: an ancestor of a protected
 * object cannot be renamed, but what else it holds stays free). *hit: the first contributor. */
static __always_inline __u32 protected_ops(struct dentry *dentry, struct guard_key *hit)
{
	__u32 ops = 0;

	for (int i = 0; i < GUARD_MAX_DEPTH && dentry; i++) {
		struct inode *inode = BPF_CORE_READ(dentry, d_inode);
		struct dentry *parent;

		if (inode) {
			struct guard_key key = inode_key(inode);
			__u32 *v = bpf_map_lookup_elem(&protected, &key);

			if (v) {
				__u32 add = (*v & 0xffff) | (i == 0 ? *v >> 16 : 0);

				if (add && !ops)
					*hit = key;
				ops |= add;
			}
		}
		parent = BPF_CORE_READ(dentry, d_parent);
		if (parent == dentry)
			break;
		dentry = parent;
	}
	return ops;
}

static __always_inline int verdict(__u32 hook, __u32 op, struct guard_key *key,
				   struct dentry *dentry, __u32 target, __u32 sig)
{
	__u32 idx = targ_audit ? 1 : 0;
	int ret = targ_audit ? 0 : -EPERM;
	struct guard_event *e;
	__u64 *count = bpf_map_lookup_elem(&counters, &idx);

	if (count)
		(*count)++;
	e = ek_ringbuf_reserve(events, sizeof(*e));
	if (!e)
		return ret; /* enforcement does not need the event */
	e->ts_ns = bpf_ktime_get_boot_ns();
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->target_pid = target;
	e->hook = hook;
	e->op = op;
	e->verdict = ret;
	e->sig = sig;
	e->dev = key ? key->dev : 0;
	e->ino = key ? key->ino : 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->name[0] = 0;
	if (dentry)
		bpf_probe_read_kernel_str(e->name, sizeof(e->name), BPF_CORE_READ(dentry, d_name.name));
	bpf_ringbuf_submit(e, 0);
	return ret;
}

static __always_inline int check(__u32 hook, __u32 op, struct dentry *dentry)
{
	struct guard_key key = {};
	__u32 ops;

	if (!dentry)
		return 0;
	ops = protected_ops(dentry, &key);
	if (!(ops & op) || current_trusted())
		return 0;
	return verdict(hook, op, &key, dentry, 0, 0);
}

SEC("lsm/file_open")
int BPF_PROG(guard_file_open, struct file *file, int ret)
{
	unsigned int mode = BPF_CORE_READ(file, f_mode);
	unsigned int flags = BPF_CORE_READ(file, f_flags);
	struct dentry *dentry = BPF_CORE_READ(file, f_path.dentry);
	__u32 op = 0;

	if (ret)
		return ret;
	if ((mode & FMODE_WRITE) || (flags & O_TRUNC))
		op |= GUARD_OP_WRITE;
	else
		op |= GUARD_OP_READ;
	return check(GUARD_HOOK_FILE_OPEN, op, dentry);
}

/* writes through an fd opened before the guard started, and io_uring writes */
SEC("lsm/file_permission")
int BPF_PROG(guard_file_permission, struct file *file, int mask, int ret)
{
	if (ret || !(mask & MAY_WRITE))
		return ret;
	return check(GUARD_HOOK_FILE_PERMISSION, GUARD_OP_WRITE, BPF_CORE_READ(file, f_path.dentry));
}

SEC("lsm/inode_unlink")
int BPF_PROG(guard_inode_unlink, struct inode *dir, struct dentry *dentry, int ret)
{
	if (ret)
		return ret;
	return check(GUARD_HOOK_INODE_UNLINK, GUARD_OP_UNLINK, dentry);
}

SEC("lsm/inode_rmdir")
int BPF_PROG(guard_inode_rmdir, struct inode *dir, struct dentry *dentry, int ret)
{
	if (ret)
		return ret;
	return check(GUARD_HOOK_INODE_UNLINK, GUARD_OP_UNLINK, dentry);
}

/* the source (and its ancestors) and an existing target that would be replaced; the LSM
 * hook has no flags argument (RENAME_EXCHANGE calls it twice) */
SEC("lsm/inode_rename")
int BPF_PROG(guard_inode_rename, struct inode *old_dir, struct dentry *old_dentry,
	     struct inode *new_dir, struct dentry *new_dentry, int ret)
{
	if (ret)
		return ret;
	ret = check(GUARD_HOOK_INODE_RENAME, GUARD_OP_RENAME, old_dentry);
	if (ret)
		return ret;
	return check(GUARD_HOOK_INODE_RENAME, GUARD_OP_RENAME, new_dentry);
}

SEC("lsm/inode_link")
int BPF_PROG(guard_inode_link, struct dentry *old_dentry, struct inode *dir,
	     struct dentry *new_dentry, int ret)
{
	if (ret)
		return ret;
	return check(GUARD_HOOK_INODE_LINK, GUARD_OP_LINK, old_dentry);
}

SEC("lsm/inode_setattr")
int BPF_PROG(guard_inode_setattr, struct dentry *dentry, struct iattr *attr, int ret)
{
	unsigned int valid = BPF_CORE_READ(attr, ia_valid);
	__u32 op = 0;

	if (ret)
		return ret;
	if (valid & (ATTR_MODE | ATTR_UID | ATTR_GID))
		op |= GUARD_OP_SETATTR;
	if (valid & ATTR_SIZE)
		op |= GUARD_OP_WRITE;
	if (!op)
		return 0;
	return check(GUARD_HOOK_INODE_SETATTR, op, dentry);
}

SEC("lsm/path_truncate")
int BPF_PROG(guard_path_truncate, const struct path *path, int ret)
{
	if (ret)
		return ret;
	return check(GUARD_HOOK_PATH_TRUNCATE, GUARD_OP_WRITE, BPF_CORE_READ(path, dentry));
}

SEC("lsm/mmap_file")
int BPF_PROG(guard_mmap_file, struct file *file, unsigned long reqprot, unsigned long prot,
	     unsigned long flags, int ret)
{
	if (ret || !file)
		return ret;
	if (!((prot & PROT_WRITE) && (flags & MAP_SHARED)))
		return 0;
	return check(GUARD_HOOK_MMAP_FILE, GUARD_OP_WRITE, BPF_CORE_READ(file, f_path.dentry));
}

/* exec: trust follows the new executable, or the parent's inherited trust */
SEC("lsm/bprm_committed_creds")
int BPF_PROG(guard_bprm_committed_creds, struct linux_binprm *bprm)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct inode *inode = BPF_CORE_READ(bprm, file, f_inode);
	struct guard_key key = inode_key(inode);
	__u32 *v = bpf_map_lookup_elem(&trusted, &key);
	__u32 *t = bpf_task_storage_get(&task_trust, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!t)
		return 0;
	if (v)
		*t = *v;
	else if (!(*t & TRUST_INHERIT))
		*t = 0; /* plain trust ends at exec of an untrusted binary */
	return 0;
}

/* fork: a child inherits trust only when it is inheritable */
SEC("lsm/task_alloc")
int BPF_PROG(guard_task_alloc, struct task_struct *task, unsigned long clone_flags, int ret)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u32 *parent, *child;

	if (ret)
		return ret;
	parent = bpf_task_storage_get(&task_trust, cur, 0, 0);
	if (!parent || !*parent)
		return 0;
	child = bpf_task_storage_get(&task_trust, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (child)
		*child = *parent;
	return 0;
}

static __always_inline bool task_protected(struct task_struct *task)
{
	struct inode *inode = BPF_CORE_READ(task, mm, exe_file, f_inode);
	struct guard_key key;

	if (targ_agent_tgid && BPF_CORE_READ(task, tgid) == targ_agent_tgid)
		return true;
	if (!inode)
		return false;
	key = inode_key(inode);
	return bpf_map_lookup_elem(&protected_exe, &key) != 0;
}

SEC("lsm/task_kill")
int BPF_PROG(guard_task_kill, struct task_struct *p, struct kernel_siginfo *info, int sig,
	     const struct cred *cred, int ret)
{
	if (ret || sig == 0)
		return ret;
	if (!task_protected(p) || current_trusted())
		return 0;
	return verdict(GUARD_HOOK_TASK_KILL, GUARD_OP_KILL, 0, 0, BPF_CORE_READ(p, tgid), sig);
}

/* attach and /proc/PID/mem access both go through ptrace_access_check */
SEC("lsm/ptrace_access_check")
int BPF_PROG(guard_ptrace_access_check, struct task_struct *child, unsigned int mode, int ret)
{
	if (ret || !(mode & PTRACE_MODE_ATTACH)) /* reading /proc/PID/stat etc. stays allowed */
		return ret;
	if (!task_protected(child) || current_trusted())
		return 0;
	return verdict(GUARD_HOOK_PTRACE, GUARD_OP_PTRACE, 0, 0, BPF_CORE_READ(child, tgid), 0);
}

char LICENSE[] SEC("license") = "GPL";
