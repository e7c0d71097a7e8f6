// SPDX-License-Identifier: GPL-2.0
/* iofsstat: file IO per (process, file) and block IO per (process, device), counted in
 * maps that user space empties once per interval.
 *
 * Two ways to see file IO, chosen by user space through autoload:
 *  - syscall exit tracepoints of read/write/pread64/pwrite64/readv/writev: the return value
 *    is the byte count, and the fd (the first argument) is read back from the task's saved
 *    user registers, so no enter program and no per-thread stash is needed;
 *  - fexit (where trampolines work): the file and the result come as arguments, and no
 *    syscall tracepoint puts every syscall on the slow path. vfs_read/vfs_write see
 *    read/write/pread64/pwrite64; vfs_readv/vfs_writev the vector calls. IO that never
 *    passes through those needs hooks of its own: do_splice_direct (sendfile,
 *    copy_file_range's fallback), splice_file_to_pipe (sendfile to a pipe, splice from a
 *    file) and io_uring's completions. User space loads only those this kernel has.
 * None of these paths calls another hooked one, so no IO is counted twice.
 * Paths are built in BPF from the file's dentries and mounts, once per file per interval. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ek_block.h"
#include "iofsstat.h"

#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_IFBLK 0060000

enum { IOFS_OP_READ, IOFS_OP_WRITE };

const volatile __u32 targ_tgid = 0;           /* 0: every process */
const volatile __u32 targ_self = 0;           /* the tool itself, never counted */
const volatile bool targ_cgroup_filter = false; /* only cgroups listed in cgroup_allow */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct iofs_key);
	__type(value, struct iofs_stat);
} stats SEC(".maps");

/* (dev, ino) -> path; user space takes them every interval, so a file's path is rebuilt
 * at most once per interval (and follows renames). Not preallocated: entries are large. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct iofs_file);
	__type(value, struct iofs_path);
} paths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct iofs_bio_key);
	__type(value, struct iofs_bio_stat);
} bio_stats SEC(".maps");

/* cgroup ids to count when targ_cgroup_filter is set (a container's cgroup and its children) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} cgroup_allow SEC(".maps");

/* where a path is put together: too big for the BPF stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iofs_path);
} path_scratch SEC(".maps");

static __always_inline bool wanted(__u32 tgid)
{
	__u64 cgid;

	if (tgid == targ_self || (targ_tgid && targ_tgid != tgid))
		return false;
	if (targ_cgroup_filter) {
		cgid = bpf_get_current_cgroup_id();
		if (!bpf_map_lookup_elem(&cgroup_allow, &cgid))
			return false;
	}
	return true;
}

/* The file behind descriptor fd of task (NULL if none). The task's fields are plain loads
 * through its BTF pointer; only the slot of the fd array needs a probe read. */
static __always_inline struct file *fd_file(struct task_struct *task, long fd)
{
	struct fdtable *fdt = task->files->fdt;
	struct file *file = NULL;

	if (!fdt || fd < 0 || fd >= fdt->max_fds)
		return NULL;
	bpf_probe_read_kernel(&file, sizeof(file), &fdt->fd[fd]);
	return file;
}

/* Fill id for a regular file or block device; false for pipes, sockets, ttys and the like.
 * (Files of /proc and /sys are regular files to the VFS, so they count.) With trusted, file
 * is a BTF pointer (an fexit argument) and its fields are plain loads; otherwise (a pointer
 * read from the fd table) each field takes a probe read, a helper call: on a 4 KiB read
 * that difference is visible. */
static __always_inline bool file_id(struct file *file, struct iofs_file *id, bool trusted)
{
	struct inode *inode = trusted ? file->f_inode : BPF_CORE_READ(file, f_inode);
	__u16 type;

	if (!inode)
		return false;
	type = (trusted ? inode->i_mode : BPF_CORE_READ(inode, i_mode)) & S_IFMT;
	if (type != S_IFREG && type != S_IFBLK)
		return false;
	id->dev = trusted ? inode->i_sb->s_dev : BPF_CORE_READ(inode, i_sb, s_dev);
	id->pad = 0;
	id->ino = trusted ? inode->i_ino : BPF_CORE_READ(inode, i_ino);
	return true;
}

/* The walk's position between steps: bpf_loop() verifies one step, not every path through
 * IOFS_MAX_DEPTH steps (a plain loop here makes the verifier give up). */
struct walk {
	struct dentry *dentry;
	struct mount *mnt;
	__u32 off;
	__u32 state;
};

static __always_inline struct vfsmount *mount_vfs(struct mount *mnt)
{
	return (void *)mnt + bpf_core_field_offset(struct mount, mnt);
}

/* One step up from w->dentry: to its parent (storing the dentry's name), or across a mount
 * point to the parent mount. Returns 1 to stop. */
static long walk_step(__u32 index, struct walk *w)
{
	struct dentry *dentry = w->dentry, *parent;
	struct mount *mnt = w->mnt, *mnt_parent;
	__u32 zero = 0, off = w->off;
	struct iofs_path *p;
	long n;

	if (dentry == BPF_CORE_READ(mount_vfs(mnt), mnt_root)) {
		mnt_parent = BPF_CORE_READ(mnt, mnt_parent);
		if (mnt_parent == mnt) { /* the namespace's root mount: done */
			w->state = IOFS_PATH_COMPLETE;
			return 1;
		}
		w->dentry = BPF_CORE_READ(mnt, mnt_mountpoint);
		w->mnt = mnt_parent;
		return 0;
	}
	parent = BPF_CORE_READ(dentry, d_parent);
	if (dentry == parent) { /* a filesystem root that is no mount's root */
		w->state = IOFS_PATH_DETACHED;
		return 1;
	}
	p = bpf_map_lookup_elem(&path_scratch, &zero);
	if (!p || off >= IOFS_PATH_BUF)
		return 1; /* state stays TRUNCATED */
	/* the mask only tells the verifier what the check above ensures */
	n = bpf_probe_read_kernel_str(&p->names[off & (IOFS_PATH_BUF - 1)], IOFS_NAME_MAX,
				      BPF_CORE_READ(dentry, d_name.name));
	if (n <= 0)
		return 1;
	w->off = off + n;
	w->dentry = parent;
	return 0;
}

/* Walk dentry -> d_parent up to the mount's root, then on from the mountpoint in the parent
 * mount, up to the root mount of the namespace: names are stored leaf first in p. */
static __always_inline void build_path(struct file *file, struct iofs_path *p)
{
	struct vfsmount *vfsmnt = BPF_CORE_READ(file, f_path.mnt);
	struct walk w = {
		.dentry = BPF_CORE_READ(file, f_path.dentry),
		/* container_of(vfsmnt, struct mount, mnt), the offset relocated for this kernel */
		.mnt = (void *)vfsmnt - bpf_core_field_offset(struct mount, mnt),
		.state = IOFS_PATH_TRUNCATED,
	};

	bpf_loop(IOFS_MAX_DEPTH, walk_step, &w, 0);
	p->len = w.off;
	p->state = w.state;
}

/* Make sure user space will find the file's path (built once per file per interval). */
static __always_inline void remember_path(struct file *file, struct iofs_file *id)
{
	__u32 zero = 0;
	struct iofs_path *p;

	if (bpf_map_lookup_elem(&paths, id))
		return;
	p = bpf_map_lookup_elem(&path_scratch, &zero);
	if (!p)
		return;
	build_path(file, p);
	bpf_map_update_elem(&paths, id, p, BPF_NOEXIST);
}

static __always_inline void process_info(__u64 *cgroup_id, char *comm)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	*cgroup_id = bpf_get_current_cgroup_id();
	/* the process's name (its main thread), not the name of whichever thread did IO first */
	BPF_CORE_READ_STR_INTO((char (*)[IOFS_COMM_LEN])comm, task, group_leader, comm);
}

static __always_inline void count_file(__u32 tgid, struct file *file, struct iofs_file *id,
				       int op, long bytes)
{
	struct iofs_key key = {.tgid = tgid, .file = *id};
	struct iofs_stat *st = bpf_map_lookup_elem(&stats, &key);

	if (!st) {
		struct iofs_stat zero = {};

		/* a new row: user space empties stats before paths, so checking the path only
		 * here is enough for every row it will print */
		remember_path(file, id);
		process_info(&zero.cgroup_id, zero.comm);
		bpf_map_update_elem(&stats, &key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&stats, &key);
		if (!st)
			return;
	}
	if (op == IOFS_OP_READ) {
		__sync_fetch_and_add(&st->reads, 1);
		__sync_fetch_and_add(&st->read_bytes, bytes);
	} else {
		__sync_fetch_and_add(&st->writes, 1);
		__sync_fetch_and_add(&st->write_bytes, bytes);
	}
}

/* One finished read or write of `bytes` (negative: an error, not counted) on file; trusted:
 * file is a BTF pointer (see file_id). */
static __always_inline void file_io(struct file *file, int op, long bytes, bool trusted)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct iofs_file id;

	if (bytes < 0 || !file || !wanted(tgid) || !file_id(file, &id, trusted))
		return;
	count_file(tgid, file, &id, op, bytes);
}

/* At a syscall's exit: the fd is the first argument, still in the saved user registers. */
static __always_inline int syscall_exit(struct trace_event_raw_sys_exit *ctx, int op)
{
	struct task_struct *task;
	struct pt_regs *regs;
	long ret = ctx->ret;

	if (ret < 0)
		return 0;
	task = bpf_get_current_task_btf();
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	file_io(fd_file(task, PT_REGS_PARM1_SYSCALL(regs)), op, ret, false);
	return 0;
}

SEC("tp/syscalls/sys_exit_read")
int iofs_exit_read(struct trace_event_raw_sys_exit *ctx) { return syscall_exit(ctx, IOFS_OP_READ); }

SEC("tp/syscalls/sys_exit_pread64")
int iofs_exit_pread64(struct trace_event_raw_sys_exit *ctx) { return syscall_exit(ctx, IOFS_OP_READ); }

SEC("tp/syscalls/sys_exit_readv")
int iofs_exit_readv(struct trace_event_raw_sys_exit *ctx) { return syscall_exit(ctx, IOFS_OP_READ); }

SEC("tp/syscalls/sys_exit_write")
int iofs_exit_write(struct trace_event_raw_sys_exit *ctx) { return syscall_exit(ctx, IOFS_OP_WRITE); }

SEC("tp/syscalls/sys_exit_pwrite64")
int iofs_exit_pwrite64(struct trace_event_raw_sys_exit *ctx) { return syscall_exit(ctx, IOFS_OP_WRITE); }

SEC("tp/syscalls/sys_exit_writev")
int iofs_exit_writev(struct trace_event_raw_sys_exit *ctx) { return syscall_exit(ctx, IOFS_OP_WRITE); }

SEC("fexit/vfs_read")
int BPF_PROG(iofs_vfs_read, struct file *file, char *buf, size_t count, loff_t *pos, ssize_t ret)
{
	file_io(file, IOFS_OP_READ, ret, true);
	return 0;
}

SEC("fexit/vfs_write")
int BPF_PROG(iofs_vfs_write, struct file *file, const char *buf, size_t count, loff_t *pos,
	     ssize_t ret)
{
	file_io(file, IOFS_OP_WRITE, ret, true);
	return 0;
}

/* The vector calls and the splice paths: their argument lists differ between kernels, so
 * the result is taken with bpf_get_func_ret() rather than by its position. */
static __always_inline long func_ret(void *ctx)
{
	__u64 ret = 0;

	bpf_get_func_ret(ctx, &ret);
	return (long)ret;
}

SEC("fexit/vfs_readv")
int BPF_PROG(iofs_vfs_readv, struct file *file)
{
	file_io(file, IOFS_OP_READ, func_ret(ctx), true);
	return 0;
}

SEC("fexit/vfs_writev")
int BPF_PROG(iofs_vfs_writev, struct file *file)
{
	file_io(file, IOFS_OP_WRITE, func_ret(ctx), true);
	return 0;
}

/* sendfile() (to anything but a pipe) and copy_file_range()'s fallback: file to file through
 * an internal pipe; neither side goes through vfs_read/vfs_write. */
SEC("fexit/do_splice_direct")
int BPF_PROG(iofs_splice_direct, struct file *in, loff_t *ppos, struct file *out)
{
	long ret = func_ret(ctx);

	file_io(in, IOFS_OP_READ, ret, true);
	file_io(out, IOFS_OP_WRITE, ret, true);
	return 0;
}

/* sendfile() to a pipe and splice() from a file into a pipe */
SEC("fexit/splice_file_to_pipe")
int BPF_PROG(iofs_splice_to_pipe, struct file *in)
{
	file_io(in, IOFS_OP_READ, func_ret(ctx), true);
	return 0;
}

/* io_uring calls the file's read_iter/write_iter itself; a request's result is final when
 * its completion is posted (inline, from task work or from an io-wq worker: all threads of
 * the submitting process). uapi opcodes, stable across kernels. */
#define IOFS_URING_READV 1
#define IOFS_URING_WRITEV 2
#define IOFS_URING_READ_FIXED 4
#define IOFS_URING_WRITE_FIXED 5
#define IOFS_URING_READ 22
#define IOFS_URING_WRITE 23

/* Only the fields read here, matched by name against the kernel's struct io_kiocb (the
 * ___iofs suffix is ignored by CO-RE). vmlinux.h's own io_kiocb is not used: it drags in
 * io_uring types that the compiler's slim vmlinux.h emits incomplete (a typedef of a
 * forward-declared struct passed by value), and the kernel then rejects the object's BTF. */
struct io_cqe___iofs {
	__s32 res;
} __attribute__((preserve_access_index));

struct io_kiocb___iofs {
	struct file *file; /* in an anonymous union: CO-RE finds it there */
	__u8 opcode;
	struct io_cqe___iofs cqe;
} __attribute__((preserve_access_index));

/* The tracepoint's arguments changed (6.1: ctx, req, user_data, res, ...; later: ctx, req,
 * cqe); the request, second in both, carries the file, the opcode and the result. */
SEC("tp_btf/io_uring_complete")
int BPF_PROG(iofs_uring_complete, void *ring, struct io_kiocb___iofs *req)
{
	__u8 opcode = BPF_CORE_READ(req, opcode);
	int op;

	switch (opcode) {
	case IOFS_URING_READV:
	case IOFS_URING_READ_FIXED:
	case IOFS_URING_READ:
		op = IOFS_OP_READ;
		break;
	case IOFS_URING_WRITEV:
	case IOFS_URING_WRITE_FIXED:
	case IOFS_URING_WRITE:
		op = IOFS_OP_WRITE;
		break;
	default:
		return 0;
	}
	file_io(BPF_CORE_READ(req, file), op, BPF_CORE_READ(req, cqe.res), false);
	return 0;
}

/* Block IO as it is queued, in the context of the task that submits it (a process
 * reading, or one writing back with fsync; the flusher thread for background writeback). */
static __always_inline int iofs_bio(dev_t dev, unsigned int nr_sector, char op0, char op1)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct iofs_bio_key key = {.tgid = tgid, .dev = dev};
	struct iofs_bio_stat *st;
	__u64 bytes = (__u64)nr_sector << 9;
	bool read;

	/* rwbs: an optional 'F' (preflush) and then the op: R, W, D (discard), F (flush), N */
	if (op0 == 'R' || op1 == 'R')
		read = true;
	else if (op0 == 'W' || op1 == 'W')
		read = false;
	else
		return 0;
	if (!wanted(tgid))
		return 0;
	st = bpf_map_lookup_elem(&bio_stats, &key);
	if (!st) {
		struct iofs_bio_stat zero = {};

		process_info(&zero.cgroup_id, zero.comm);
		bpf_map_update_elem(&bio_stats, &key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&bio_stats, &key);
		if (!st)
			return 0;
	}
	if (read) {
		__sync_fetch_and_add(&st->reads, 1);
		__sync_fetch_and_add(&st->read_bytes, bytes);
	} else {
		__sync_fetch_and_add(&st->writes, 1);
		__sync_fetch_and_add(&st->write_bytes, bytes);
	}
	return 0;
}

SEC("tp/block/block_bio_queue")
int iofs_bio_queue(void *ctx)
{
	if (bpf_core_type_exists(struct trace_event_raw_block_bio___511)) {
		struct trace_event_raw_block_bio___511 *r = ctx;

		return iofs_bio(r->dev, r->nr_sector, r->rwbs[0], r->rwbs[1]);
	} else {
		struct trace_event_raw_block_bio_queue___510 *r = ctx;

		return iofs_bio(r->dev, r->nr_sector, r->rwbs[0], r->rwbs[1]);
	}
}

char LICENSE[] SEC("license") = "GPL";
