// SPDX-License-Identifier: GPL-2.0
/* guard: deny file operations on protected (dev, ino) objects and signals/ptrace on
 * protected processes to every subject that is not trusted.
 *
 * protected: (dev, ino) -> denied operations; a directory protects everything below it
 *   (the hooks walk d_parent, bounded by GUARD_MAX_DEPTH); `filter` is a bitmap over the
 *   same keys (and (dev, 0) per device) that spares the walk a hash lookup per level, and
 *   files on unprotected filesystems the walk; `verdicts` caches each inode's result.
 * trusted:   (dev, ino) of executables -> 1 (trust) | 2 (trust inherited by children).
 * interpreters: (dev, ino) of programs that run a file by reading it (shells, python, ld.so):
 *   opening an exec-protected file for reading is an exec when one of them does it.
 * Each task's trust lives in task storage (5.11), before that in a hash by task address that
 * task_free empties; exec re-evaluates it, fork copies it when inherited.
 * Self-protection: untrusted subjects get no fd of the guard's maps or programs (self_ids, by
 * kernel id), cannot
 * detach or update its links, unmount the bpffs holding its pins, or signal its agent
 * (its pins, policy file and state directory are ordinary protected objects).
 * Enforcement never depends on the ring buffer: a full buffer only counts a lost event.
 *
 * Kernel pointers are read directly (BTF-typed loads), not with bpf_probe_read: the walk
 * runs on every open and write, and a helper call per field would dominate its cost. The
 * current task is the exception: it is typed only since 5.11 (bpf_get_current_task_btf), and
 * its few reads are off the hot path. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "guard.h"

#define EPERM 1
#define MAY_WRITE 0x2
#define MAY_READ 0x4
#define FMODE_READ 0x1
#define FMODE_WRITE 0x2
#define FMODE_EXEC 0x20
#define __FMODE_EXEC 0x20 /* in f_flags: execve's open (f_mode has FMODE_EXEC only since 6.8) */
#define O_TRUNC 01000
#define MAP_SHARED 0x01
#define PROT_READ 0x1
#define PROT_WRITE 0x2
#define PROT_EXEC 0x4
#define VM_SHARED 0x8
#define ATTR_MODE 1
#define ATTR_UID 2
#define ATTR_GID 4
#define ATTR_SIZE 8

#define PTRACE_MODE_ATTACH 0x02


const volatile bool targ_audit = false;
const volatile __u32 targ_agent_tgid = 0; /* the logging agent: trusted, protected */
const volatile __u64 targ_pin_dev = 0;    /* s_dev of the bpffs that holds the pins */
const volatile bool targ_cache = true;    /* false: no verdict cache (kernels that refuse it) */
const volatile bool targ_task_storage = true; /* false before 5.11: task_trust_by_task instead */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct guard_key);
	__type(value, __u32);
} protected SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GUARD_FILTER_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} filter SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct guard_key);
	__type(value, __u32);
} trusted SEC(".maps");

/* script interpreters (and ld.so), by executable: see guard_file_open */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct guard_key);
	__type(value, __u32);
} interpreters SEC(".maps");

/* Verdict cache: an inode's denied operations, valid while both generations are the ones
 * it was computed under: [GUARD_GEN_POLICY] is bumped by user space after each change of
 * `protected`, [GUARD_GEN_RENAME] here after every rename (the only way an existing dentry
 * gets other ancestors). Hardlinked files (i_nlink > 1) have several ancestries and are
 * never cached. A hit replaces the whole ancestor walk by one inode-storage lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_INODE_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct guard_verdict);
} verdicts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} generation SEC(".maps");

/* executables whose processes cannot be killed/ptraced */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct guard_key);
	__type(value, __u32);
} protected_exe SEC(".maps");

/* the guard's own programs, links and maps (kernel ids), filled by the agent before any
 * program is attached */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 128);
	__type(key, struct guard_self_key);
	__type(value, enum guard_self_access);
} self_ids SEC(".maps");

/* each task's trust (enum guard_trust), where it has any; user space creates one of the two */
struct {
	__uint(type, EK_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} task_trust SEC(".maps");

/* before task storage: by task address, deleted by guard_task_free before the task is freed
 * (and attached before the programs that add entries, so no address outlives its task) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 32768); /* sized to pid_max by user space: one entry a task at most */
	__type(key, __u64);
	__type(value, __u32);
} task_trust_by_task SEC(".maps");

/* [0] denied, [1] allowed in audit mode */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

EK_RINGBUF(events, 256 * 1024);
EK_EXPORT_TYPE(struct guard_event);
/* enums user space reads from BTF, or checks its own copies against (core.py, a test) */
EK_EXPORT_TYPE(enum guard_op);
EK_EXPORT_TYPE(enum guard_gen);
EK_EXPORT_TYPE(enum guard_trust);
EK_EXPORT_TYPE(enum guard_self_access);

static __always_inline struct guard_key inode_key(struct inode *inode)
{
	struct guard_key key = {};

	key.dev = inode->i_sb->s_dev;
	key.ino = inode->i_ino;
	return key;
}

/* false: certainly not in `protected`; true: maybe (look it up) */
static __always_inline bool filter_hit(struct guard_key *key)
{
	__u32 bit = guard_filter_bit(key);
	__u32 idx = bit >> 6;
	__u64 *word = bpf_map_lookup_elem(&filter, &idx);

	return word && ((*word >> (bit & 63)) & 1);
}

static __always_inline struct task_struct *current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

/* the current task's executable (NULL: a kernel thread) */
static __always_inline struct inode *current_exe(void)
{
	return BPF_CORE_READ(current_task(), mm, exe_file, f_inode);
}

/* the value `map` holds for the current task's executable (0: none) */
static __always_inline __u32 current_exe_lookup(void *map)
{
	struct inode *inode = current_exe();
	struct guard_key key = {};
	__u32 *v;

	if (!inode)
		return 0;
	key.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	key.ino = BPF_CORE_READ(inode, i_ino);
	v = bpf_map_lookup_elem(map, &key);
	return v ? *v : 0;
}

/* before task storage: the entry of the task at `addr`, created with `create` (none when the
 * map is full: that task is not trusted) */
static __always_inline __u32 *trust_by_task(__u64 addr, bool create)
{
	static const __u32 none;
	__u32 *t = bpf_map_lookup_elem(&task_trust_by_task, &addr);

	if (t || !create)
		return t;
	bpf_map_update_elem(&task_trust_by_task, &addr, &none, BPF_NOEXIST);
	return bpf_map_lookup_elem(&task_trust_by_task, &addr);
}

/* the trust entry of `task` (typed: a hook's argument), created with `create` */
static __always_inline __u32 *trust_entry(struct task_struct *task, bool create)
{
	if (targ_task_storage)
		return bpf_task_storage_get(&task_trust, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	return trust_by_task((__u64)task, create);
}

static __always_inline __u32 *current_trust_entry(bool create)
{
	if (targ_task_storage)
		return trust_entry(bpf_get_current_task_btf(), create);
	return trust_by_task(bpf_get_current_task(), create);
}

/* trust of the current task: its entry (set at exec/fork), else its executable */
static __always_inline bool current_trusted(void)
{
	__u32 *t;

	if (targ_agent_tgid && (bpf_get_current_pid_tgid() >> 32) == targ_agent_tgid)
		return true;
	t = current_trust_entry(false);
	if (t && *t)
		return true;
	return current_exe_lookup(&trusted) != 0;
}

/* The operations denied on a dentry: the union over it and its ancestors of their
 * recursive bits (low 16), plus its own self-only bits (high 16: an ancestor of a protected
 * object cannot be renamed, but what else it holds stays free). *hit: the first contributor. */
static __always_inline __u32 protected_ops(struct dentry *dentry, struct guard_key *hit)
{
	__u32 ops = 0;

	for (int i = 0; i < GUARD_MAX_DEPTH && dentry; i++) {
		struct inode *inode = dentry->d_inode;
		struct dentry *parent;

		if (inode) {
			struct guard_key key = inode_key(inode);

			if (filter_hit(&key)) {
				__u32 *v = bpf_map_lookup_elem(&protected, &key);

				if (v) {
					__u32 add = (*v & 0xffff) | (i == 0 ? *v >> 16 : 0);

					if (add && !ops)
						*hit = key;
					ops |= add;
				}
			}
		}
		parent = dentry->d_parent;
		if (parent == dentry)
			break;
		dentry = parent;
	}
	return ops;
}

#define S_IFMT 00170000
#define S_IFDIR 0040000

/* protected_ops() through the verdict cache (one call site: the walk is inlined once) */
static __always_inline __u32 dentry_ops(struct dentry *dentry, struct guard_key *hit)
{
	struct inode *inode = dentry->d_inode;
	__u32 k_policy = GUARD_GEN_POLICY, k_rename = GUARD_GEN_RENAME, gp = 0, gr = 0, ops;
	struct guard_verdict *c = 0;
	struct guard_key sb = { .dev = dentry->d_sb->s_dev };
	bool cacheable = false;

	/* (dev, 0) is in the filter for every device holding a protected key: nothing else on
	 * this filesystem can match (the walk never leaves it), so most files stop here */
	if (!filter_hit(&sb))
		return 0;
	if (targ_cache && inode && ((inode->i_mode & S_IFMT) == S_IFDIR || inode->i_nlink <= 1)) {
		__u32 *p = bpf_map_lookup_elem(&generation, &k_policy);
		__u32 *r = bpf_map_lookup_elem(&generation, &k_rename);

		if (p && r) {
			cacheable = true;
			gp = *p; /* read before the walk: a bump during it leaves the result stale */
			gr = *r;
			c = bpf_inode_storage_get(&verdicts, inode, 0, 0);
			if (c && c->gen_policy == gp && c->gen_rename == gr) {
				*hit = c->hit;
				return c->ops;
			}
		}
	}
	ops = protected_ops(dentry, hit);
	if (cacheable) {
		if (!c)
			c = bpf_inode_storage_get(&verdicts, inode, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (c) {
			c->gen_rename = ~0U; /* invalid while half written */
			c->ops = ops;
			c->hit = *hit;
			c->gen_policy = gp;
			c->gen_rename = gr;
		}
	}
	return ops;
}

/* count, log (best effort) and return the verdict for one violation */
static __always_inline int report(enum guard_hook hook, __u32 op, struct guard_key *key, const void *name,
				  __u32 target, __u32 sig, __u32 cmd, __u32 obj_id)
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
	e->bpf_cmd = cmd;
	e->obj_id = obj_id;
	e->dev = key ? key->dev : 0;
	e->ino = key ? key->ino : 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->name[0] = 0;
	if (name)
		bpf_probe_read_kernel_str(e->name, sizeof(e->name), name);
	bpf_ringbuf_submit(e, 0);
	return ret;
}

/* deny (and log) the operations of `op` that the dentry's protection denies */
static __always_inline int check(enum guard_hook hook, __u32 op, struct dentry *dentry)
{
	struct guard_key key = {};
	__u32 ops;

	if (!dentry)
		return 0;
	ops = dentry_ops(dentry, &key) & op;
	if (!ops || current_trusted())
		return 0;
	return report(hook, ops, &key, dentry->d_name.name, 0, 0, 0, 0);
}

/* check() of an open: reading a file whose exec is denied is running it when the reader is
 * an interpreter (`sh FILE`, `python3 FILE`, `ld.so FILE`). execve's own open (FMODE_EXEC)
 * is left to bprm_check_security, which names it better. */
static __always_inline int check_open(struct file *file, __u32 op)
{
	struct dentry *dentry = file->f_path.dentry;
	struct guard_key key = {};
	__u32 prot, ops;

	prot = dentry_ops(dentry, &key);
	ops = prot & op;
	if ((prot & GUARD_OP_EXEC) && (op & GUARD_OP_READ) &&
	    !((file->f_mode & FMODE_EXEC) || (file->f_flags & __FMODE_EXEC)) &&
	    current_exe_lookup(&interpreters))
		ops |= GUARD_OP_EXEC;
	if (!ops || current_trusted())
		return 0;
	return report(GUARD_HOOK_FILE_OPEN, ops, &key, dentry->d_name.name, 0, 0, 0, 0);
}

/* false: no object on this dentry's filesystem has its reads denied (one filter lookup) */
static __always_inline bool reads_guarded(struct dentry *dentry)
{
	struct guard_key mark = { .dev = dentry->d_sb->s_dev, .ino = GUARD_READ_MARK };

	return filter_hit(&mark);
}

/* the running executable: mapped by the kernel at exec, after bprm_check_security allowed it */
static __always_inline bool own_executable(struct file *file)
{
	struct inode *exe = current_exe();

	return exe && exe == file->f_inode;
}

SEC("lsm/file_open")
int BPF_PROG(guard_file_open, struct file *file, int ret)
{
	__u32 op = 0;

	if (ret)
		return ret;
	/* io_uring's IORING_OP_OPENAT comes here too; O_RDWR is both a read and a write.
	 * (O_PATH opens, which neither read nor write, do not reach this hook.) */
	if (file->f_mode & FMODE_READ)
		op |= GUARD_OP_READ;
	if ((file->f_mode & FMODE_WRITE) || (file->f_flags & O_TRUNC))
		op |= GUARD_OP_WRITE;
	return op ? check_open(file, op) : 0;
}

/* reads and writes through an fd opened before the guard started (or passed by a trusted
 * process), and io_uring's. Reads are checked only on filesystems with read rules. */
SEC("lsm/file_permission")
int BPF_PROG(guard_file_permission, struct file *file, int mask, int ret)
{
	struct dentry *dentry = file->f_path.dentry;
	__u32 op;

	if (ret)
		return ret;
	if (mask & MAY_WRITE)
		op = GUARD_OP_WRITE;
	else if ((mask & MAY_READ) && reads_guarded(dentry))
		op = GUARD_OP_READ;
	else
		return 0;
	return check(GUARD_HOOK_FILE_PERMISSION, op, dentry);
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

static __always_inline int setattr_check(struct dentry *dentry, struct iattr *attr)
{
	unsigned int valid = attr->ia_valid;
	__u32 op = 0;

	if (valid & (ATTR_MODE | ATTR_UID | ATTR_GID))
		op |= GUARD_OP_SETATTR;
	if (valid & ATTR_SIZE)
		op |= GUARD_OP_WRITE;
	if (!op)
		return 0;
	return check(GUARD_HOOK_INODE_SETATTR, op, dentry);
}

/* The hook's arguments changed in 6.12 (the mount's idmap first): user space loads the
 * program whose arguments match this kernel's (agent.load()) */
SEC("lsm/inode_setattr")
int BPF_PROG(guard_inode_setattr, struct dentry *dentry, struct iattr *attr, int ret)
{
	return ret ? ret : setattr_check(dentry, attr);
}

SEC("lsm/inode_setattr")
int BPF_PROG(guard_inode_setattr_idmap, void *idmap, struct dentry *dentry, struct iattr *attr, int ret)
{
	return ret ? ret : setattr_check(dentry, attr);
}

SEC("lsm/path_truncate")
int BPF_PROG(guard_path_truncate, const struct path *path, int ret)
{
	if (ret)
		return ret;
	return check(GUARD_HOOK_PATH_TRUNCATE, GUARD_OP_WRITE, path->dentry);
}

/* what mapping `file` with `prot` does to it: reads it (page faults reach no hook, so the
 * mapping is the read; on x86 every access implies read), writes it (shared), runs its code */
static __always_inline __u32 mapping_ops(struct file *file, unsigned long prot, bool shared)
{
	__u32 op = 0;

	if ((prot & (PROT_READ | PROT_WRITE | PROT_EXEC)) && reads_guarded(file->f_path.dentry))
		op |= GUARD_OP_READ;
	if ((prot & PROT_WRITE) && shared)
		op |= GUARD_OP_WRITE;
	/* exec without execve: `ld.so FILE`, dlopen() */
	if ((prot & PROT_EXEC) && !own_executable(file))
		op |= GUARD_OP_EXEC;
	return op;
}

SEC("lsm/mmap_file")
int BPF_PROG(guard_mmap_file, struct file *file, unsigned long reqprot, unsigned long prot,
	     unsigned long flags, int ret)
{
	__u32 op;

	if (ret || !file)
		return ret;
	op = mapping_ops(file, prot, flags & MAP_SHARED);
	return op ? check(GUARD_HOOK_MMAP_FILE, op, file->f_path.dentry) : 0;
}

/* a mapping made readable, executable or shared-writable after mmap_file allowed it */
SEC("lsm/file_mprotect")
int BPF_PROG(guard_file_mprotect, struct vm_area_struct *vma, unsigned long reqprot,
	     unsigned long prot, int ret)
{
	struct file *file = vma->vm_file;
	__u32 op;

	if (ret || !file)
		return ret;
	op = mapping_ops(file, prot, vma->vm_flags & VM_SHARED);
	return op ? check(GUARD_HOOK_FILE_MPROTECT, op, file->f_path.dentry) : 0;
}

/* execve of a protected file (each binfmt round: a script, then its interpreter) */
SEC("lsm/bprm_check_security")
int BPF_PROG(guard_bprm_check_security, struct linux_binprm *bprm, int ret)
{
	if (ret)
		return ret;
	return check(GUARD_HOOK_BPRM_CHECK_SECURITY, GUARD_OP_EXEC, bprm->file->f_path.dentry);
}

/* exec: trust follows the new executable, or the parent's inherited trust. Task storage is
 * created only for tasks that get trust: an untrusted exec costs two lookups. */
SEC("lsm/bprm_committed_creds")
int BPF_PROG(guard_bprm_committed_creds, struct linux_binprm *bprm)
{
	struct guard_key key = inode_key(bprm->file->f_inode);
	__u32 *v = bpf_map_lookup_elem(&trusted, &key);
	__u32 *t = current_trust_entry(false);

	if (v) {
		if (!t)
			t = current_trust_entry(true);
		if (t)
			*t = *v;
	} else if (t && !(*t & GUARD_TRUST_INHERIT)) {
		*t = 0; /* plain trust ends at exec of an untrusted binary */
	}
	return 0;
}

/* after any rename (also one that failed: harmless), cached verdicts are stale */
SEC("fexit/vfs_rename")
int BPF_PROG(guard_renamed)
{
	__u32 k = GUARD_GEN_RENAME;
	__u32 *r = bpf_map_lookup_elem(&generation, &k);

	if (r)
		__sync_fetch_and_add(r, 1);
	return 0;
}

/* fork: a child inherits trust only when it is inheritable */
SEC("lsm/task_alloc")
int BPF_PROG(guard_task_alloc, struct task_struct *task, unsigned long clone_flags, int ret)
{
	__u32 *parent, *child;

	if (ret)
		return ret;
	parent = current_trust_entry(false);
	if (!parent || !*parent)
		return 0;
	child = trust_entry(task, true);
	if (child)
		*child = *parent;
	return 0;
}

/* before 5.11: the task's entry goes before its address can be another task's */
SEC("lsm/task_free")
int BPF_PROG(guard_task_free, struct task_struct *task)
{
	__u64 addr = (__u64)task;

	bpf_map_delete_elem(&task_trust_by_task, &addr);
	return 0;
}

static __always_inline bool task_protected(struct task_struct *task)
{
	struct mm_struct *mm = task->mm;
	struct inode *inode;
	struct guard_key key;

	if (targ_agent_tgid && task->tgid == targ_agent_tgid)
		return true;
	if (!mm)
		return false;
	inode = mm->exe_file->f_inode;
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
	return report(GUARD_HOOK_TASK_KILL, GUARD_OP_KILL, 0, 0, p->tgid, sig, 0, 0);
}

/* attach and /proc/PID/mem access (and pidfd_getfd) all go through ptrace_access_check */
SEC("lsm/ptrace_access_check")
int BPF_PROG(guard_ptrace_access_check, struct task_struct *child, unsigned int mode, int ret)
{
	if (ret || !(mode & PTRACE_MODE_ATTACH)) /* reading /proc/PID/stat etc. stays allowed */
		return ret;
	if (!task_protected(child) || current_trusted())
		return 0;
	return report(GUARD_HOOK_PTRACE_ACCESS_CHECK, GUARD_OP_PTRACE, 0, 0, child->tgid, 0, 0, 0);
}

/* --- self-protection ------------------------------------------------------------------ */

/* The bpf_link behind fd `fd` of the current task, as its id (0: none). A non-link fd
 * yields a meaningless id, but the kernel refuses those commands on a non-link anyway. */
static __always_inline __u32 link_id_of_fd(int fd)
{
	struct file *file = ek_current_fd_file(fd);
	struct bpf_link *link;

	if (!file)
		return 0;
	link = (struct bpf_link *)BPF_CORE_READ(file, private_data);
	return link ? BPF_CORE_READ(link, id) : 0;
}

/* bpf(): detaching or replacing one of the guard's links. (LSM links cannot be detached on
 * 6.1, EOPNOTSUPP, but newer kernels may allow it.) The `ret` argument is not read: the
 * hook has a fourth parameter since 6.12, which moves it. */
SEC("lsm/bpf")
int BPF_PROG(guard_bpf, int cmd, union bpf_attr *attr, unsigned int size)
{
	struct guard_self_key k = { .kind = GUARD_SELF_LINK };

	if (cmd == BPF_LINK_DETACH)
		k.id = link_id_of_fd(attr->link_detach.link_fd);
	else if (cmd == BPF_LINK_UPDATE)
		k.id = link_id_of_fd(attr->link_update.link_fd);
	else
		return 0;
	if (!k.id || !bpf_map_lookup_elem(&self_ids, &k) || current_trusted())
		return 0;
	return report(GUARD_HOOK_BPF, GUARD_OP_BPF, 0, 0, 0, 0, cmd, k.id);
}

/* a new fd of one of the guard's maps (BPF_OBJ_GET of a pin, BPF_MAP_GET_FD_BY_ID): with
 * it, entries could be deleted, or a program written to change them, even through a
 * read-only fd. Only the counters may be opened read-only, for `guard status`. */
SEC("lsm/bpf_map")
int BPF_PROG(guard_bpf_map, struct bpf_map *map, fmode_t fmode, int ret)
{
	struct guard_self_key k = { .kind = GUARD_SELF_MAP, .id = map->id };
	__u32 *v;

	if (ret)
		return ret;
	v = bpf_map_lookup_elem(&self_ids, &k);
	if (!v || (*v == GUARD_SELF_READABLE && !(fmode & FMODE_WRITE)))
		return 0;
	if (current_trusted())
		return 0;
	return report(GUARD_HOOK_BPF_MAP, GUARD_OP_BPF, 0, map->name, 0, 0, 0, map->id);
}

/* a new fd of one of the guard's programs: freplace (BPF_PROG_TYPE_EXT) could replace it */
SEC("lsm/bpf_prog")
int BPF_PROG(guard_bpf_prog, struct bpf_prog *prog, int ret)
{
	struct guard_self_key k = { .kind = GUARD_SELF_PROG };

	if (ret)
		return ret;
	k.id = prog->aux->id;
	if (!bpf_map_lookup_elem(&self_ids, &k) || current_trusted())
		return 0;
	return report(GUARD_HOOK_BPF_PROG, GUARD_OP_BPF, 0, prog->aux->name, 0, 0, 0, k.id);
}

/* unmounting the bpffs that holds the pins would drop them all, hence every link */
SEC("lsm/sb_umount")
int BPF_PROG(guard_sb_umount, struct vfsmount *mnt, int flags, int ret)
{
	struct guard_key key;
	struct dentry *root;

	if (ret || !targ_pin_dev || mnt->mnt_sb->s_dev != targ_pin_dev || current_trusted())
		return ret;
	root = mnt->mnt_root;
	key = inode_key(root->d_inode);
	return report(GUARD_HOOK_SB_UMOUNT, GUARD_OP_BPF, &key, root->d_name.name, 0, 0, 0, 0);
}

char LICENSE[] SEC("license") = "GPL";
