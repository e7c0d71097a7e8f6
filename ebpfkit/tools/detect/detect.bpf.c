// SPDX-License-Identifier: GPL-2.0
/* detect's events: process, network and fd events for the rule engine (session.py), with what
 * the rules need of the process read here, where it cannot have changed yet: its stdio (what
 * fds 0-2 are), its ancestors, its cgroup. Tracepoints only: kprobes are not everywhere.
 *
 * Filtered here: connect(), bind() and accept() only for IPv4/IPv6 sockets, duplications only of an IPv4/IPv6 socket
 * onto fd 0, 1 or 2 (a shell's everyday `> file` redirections never leave the kernel), file
 * calls only on watched files (baits, and the files and directories rules name). Where the
 * rules say a bait touched kills (bait_kill), the process is sent SIGKILL here, before the call
 * returns to it. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ebpfkit.h"
#include "ek_task.h"
#include "detect.h"

#define S_IFMT 0170000
#define S_IFSOCK 0140000
#define S_IFIFO 0010000
#define S_IFCHR 0020000
#define PIPEFS_MAGIC 0x50495045
#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define F_DUPFD 0
#define F_DUPFD_CLOEXEC 1030
#define O_ACCMODE 00000003
#define O_WRONLY 00000001
#define O_CREAT 00000100
#define O_TRUNC 00001000
#define SIGKILL 9
#define EPERM 1
#define EACCES 13

EK_RINGBUF(events, 4 * 1024 * 1024);
EK_EXPORT_TYPE(struct detect_event);

/* The reader is woken only once this much is waiting: under load one wakeup serves many events
 * (each is a context switch competing with the workload for a CPU); on a quiet system events
 * wait for the reader's next poll, 100 ms at most. */
#define WAKE_BYTES (64 * 1024)

static __always_inline void submit(struct detect_event *ev)
{
	bpf_ringbuf_submit(ev, bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKE_BYTES ? BPF_RB_FORCE_WAKEUP
											   : BPF_RB_NO_WAKEUP);
}

/* What the rules can match (prefilter.py works it out): an event no rule needs is not built. */
const volatile bool want_exec = true;
const volatile bool want_dup = true;
const volatile bool want_connect = true;  /* connect, bind, accept: "connect" names the three here */
const volatile bool connect_any = true;   /* else only on fd <= connect_fd_max, or by a comm in connect_comms */
const volatile int connect_fd_max = -1;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, char[16]);
	__type(value, __u8);
} connect_comms SEC(".maps");

/* A dup() or fcntl(F_DUPFD) of a socket, between its syscall's entry and exit (where the new
 * fd is known). */
struct pending_dup {
	__u64 ino;
	__s32 oldfd;
	__u32 call;
	__u8 kind;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tid */
	__type(value, struct pending_dup);
} pending_dups SEC(".maps");

static __always_inline bool is_inet(__u8 kind)
{
	return kind == FDK_INET || kind == FDK_INET6;
}

/* The file open as fd ``fd`` of ``task``, or NULL. */
static __always_inline struct file *file_of(struct task_struct *task, int fd)
{
	struct files_struct *files = BPF_CORE_READ(task, files);
	struct file **fds, *f = NULL;
	struct fdtable *fdt;

	if (!files || fd < 0)
		return NULL;
	fdt = BPF_CORE_READ(files, fdt);
	if (!fdt || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

/* What fd ``fd`` of ``task`` is; a socket's inode number into ``*ino``. */
static __always_inline __u8 fd_kind_ino(struct task_struct *task, int fd, __u64 *ino)
{
	struct file *f = file_of(task, fd);
	struct socket *sock;
	__u16 family;
	umode_t mode;

	if (!f)
		return FDK_NONE;
	mode = BPF_CORE_READ(f, f_inode, i_mode);
	switch (mode & S_IFMT) {
	case S_IFSOCK:
		*ino = BPF_CORE_READ(f, f_inode, i_ino);
		sock = BPF_CORE_READ(f, private_data);
		family = sock ? BPF_CORE_READ(sock, sk, __sk_common.skc_family) : 0;
		if (family == AF_INET)
			return FDK_INET;
		if (family == AF_INET6)
			return FDK_INET6;
		return family == AF_UNIX ? FDK_UNIX : FDK_SOCKET;
	case S_IFIFO: /* anonymous pipes live on pipefs; a named one on the filesystem holding it */
		return BPF_CORE_READ(f, f_inode, i_sb, s_magic) == PIPEFS_MAGIC ? FDK_PIPE : FDK_FIFO;
	case S_IFCHR:
		return FDK_CHAR;
	default:
		return FDK_FILE;
	}
}

static __always_inline __u8 fd_kind(struct task_struct *task, int fd)
{
	__u64 ino;

	return fd_kind_ino(task, fd, &ino);
}

/* One process cannot fill the ring buffer and blind detect to every other: beyond throttle_per_s
 * of its events in a second, the rest are counted, not sent: `throttles` holds each process's
 * count for its current second (user space reports it), `throttled` the total. (A bait's kill
 * does not depend on its event: it is sent before.) */
const volatile __u32 throttle_per_s = 2000; /* 0: no limit */

struct throttle {
	__u64 second; /* of bpf_ktime_get_ns() */
	__u32 sent;
	__u32 held;	  /* this second */
	__u64 held_total; /* since the process was first seen: what user space reports from, so a
			   * second it did not look at in time is not lost */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tgid */
	__type(value, struct throttle);
} throttles SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} throttled SEC(".maps");

/* False when the current process has used its events for this second (the event is counted). */
static __always_inline bool within_budget(__u64 id)
{
	struct throttle fresh = {.second = bpf_ktime_get_ns() / 1000000000ULL, .sent = 1}, *t;
	__u32 tgid = id >> 32, zero = 0;
	__u64 *total;

	if (!throttle_per_s)
		return true;
	t = bpf_map_lookup_elem(&throttles, &tgid);
	if (!t) {
		bpf_map_update_elem(&throttles, &tgid, &fresh, BPF_ANY);
		return true;
	}
	if (t->second != fresh.second) {
		fresh.held_total = t->held_total;
		*t = fresh;
		return true;
	}
	if (t->sent < throttle_per_s) {
		t->sent++;
		return true;
	}
	__sync_fetch_and_add(&t->held, 1);
	__sync_fetch_and_add(&t->held_total, 1);
	total = bpf_map_lookup_elem(&throttled, &zero);
	if (total)
		(*total)++; /* per-CPU slot */
	return false;
}

/* A zeroed event with who did it: the task, its stdio, its ancestors and cgroup. NULL when the
 * process is over its budget, or the ring buffer is full (counted as lost). */
static __always_inline struct detect_event *new_event(__u32 kind)
{
	struct task_struct *task = (void *)bpf_get_current_task(), *parent;
	__u64 id = bpf_get_current_pid_tgid();
	struct detect_event *ev;
	__u32 n = 0;

	if (!within_budget(id))
		return NULL;
	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev)
		return NULL;
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->ts = bpf_ktime_get_ns();
	ev->kind = kind;
	ev->pid = (__u32)id;
	ev->tgid = id >> 32;
	ev->uid = (__u32)bpf_get_current_uid_gid();
	ev->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	for (int fd = 0; fd < 3; fd++) {
		__u64 ino = 0;

		ev->stdio[fd] = fd_kind_ino(task, fd, &ino);
		if (is_inet(ev->stdio[fd]) && !ev->socket_ino)
			ev->socket_ino = ino;
	}
	parent = BPF_CORE_READ(task, real_parent);
	for (int i = 0; i < DETECT_ANCESTORS; i++) {
		__u32 pid;

		if (!parent)
			break;
		pid = BPF_CORE_READ(parent, tgid);
		if (!pid)
			break;
		ev->ancestors[i].pid = pid;
		BPF_CORE_READ_INTO(&ev->ancestors[i].comm, parent, comm);
		n = i + 1;
		if (pid == 1)
			break;
		parent = BPF_CORE_READ(parent, real_parent);
	}
	ev->nancestors = n;
	return ev;
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(detect_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct detect_event *ev;
	struct mm_struct *mm;
	unsigned long start, end, len;
	struct inode *inode;

	if (!want_exec || !(ev = new_event(DK_EXEC)))
		return 0;
	bpf_probe_read_kernel_str(ev->path, sizeof(ev->path), BPF_CORE_READ(bprm, filename));
	inode = BPF_CORE_READ(bprm, file, f_inode);
	ev->ino = BPF_CORE_READ(inode, i_ino);
	ev->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	if (!BPF_CORE_READ(inode, __i_nlink)) { /* no link: deleted, or a memfd ("memfd:NAME") */
		char name[6] = {};

		bpf_probe_read_kernel(name, sizeof(name), BPF_CORE_READ(bprm, file, f_path.dentry, d_name.name));
		ev->exe_memfd = name[0] == 'm' && name[1] == 'e' && name[2] == 'm' && name[3] == 'f' &&
				name[4] == 'd' && name[5] == ':';
	}
	mm = BPF_CORE_READ(p, mm);
	start = BPF_CORE_READ(mm, arg_start);
	end = BPF_CORE_READ(mm, arg_end);
	len = end > start ? end - start : 0;
	if (len > DETECT_ARGS_LEN - 1)
		len = DETECT_ARGS_LEN - 1;
	len &= DETECT_ARGS_LEN - 1;
	if (len && !bpf_probe_read_user(ev->args, len, (void *)start))
		ev->args_len = len;
	submit(ev);
	return 0;
}

/* A socket call some rule may match: on an fd up to connect_fd_max, or by a command named. */
static __always_inline bool socket_call_wanted(int fd)
{
	char comm[16] = {};

	if (!want_connect)
		return false;
	if (connect_any || fd <= connect_fd_max)
		return true;
	bpf_get_current_comm(comm, sizeof(comm));
	return bpf_map_lookup_elem(&connect_comms, comm) != NULL;
}

/* connect and bind, at entry: the IPv4/IPv6 address the caller named (its sockaddr). */
static __always_inline int addressed(struct trace_event_raw_sys_enter *ctx, __u32 call)
{
	struct detect_event *ev;
	const void *uaddr = (const void *)ctx->args[1];
	__u16 family = 0, port = 0;

	if (!socket_call_wanted((int)ctx->args[0]))
		return 0;
	if (bpf_probe_read_user(&family, sizeof(family), uaddr) || (family != AF_INET && family != AF_INET6))
		return 0;
	ev = new_event(DK_CONNECT);
	if (!ev)
		return 0;
	ev->call = call;
	ev->fd = (int)ctx->args[0];
	ev->fd_kind = fd_kind_ino((void *)bpf_get_current_task(), ev->fd, &ev->socket_ino);
	ev->family = family;
	bpf_probe_read_user(&port, sizeof(port), uaddr + 2);
	ev->port = bpf_ntohs(port);
	/* sockaddr_in: the address 4 bytes in; sockaddr_in6: 8 (after sin6_flowinfo) */
	bpf_probe_read_user(ev->addr, family == AF_INET ? 4 : 16, uaddr + (family == AF_INET ? 4 : 8));
	submit(ev);
	return 0;
}

/* One program per call: detect_connect for sys_enter_connect, detect_bind for sys_enter_bind. */
#define ADDRESSED(name, call)                                                \
	SEC("tp/syscalls/sys_enter_" #name)                                  \
	int detect_##name(struct trace_event_raw_sys_enter *ctx)             \
	{                                                                    \
		return addressed(ctx, call);                                 \
	}

ADDRESSED(connect, SOCK_CONNECT)
ADDRESSED(bind, SOCK_BIND)

/* accept and accept4, at exit: the new fd, and its peer read from the socket itself (the
 * caller may pass no sockaddr to fill). */
static __always_inline int accepted(struct trace_event_raw_sys_exit *ctx, __u32 call)
{
	int fd = (int)ctx->ret;
	struct detect_event *ev;
	struct socket *sock;
	struct file *f;
	struct sock *sk;
	__u16 family;
	__be32 addr4;

	if (fd < 0 || !socket_call_wanted(fd))
		return 0;
	f = file_of((void *)bpf_get_current_task(), fd);
	sock = f ? BPF_CORE_READ(f, private_data) : NULL;
	sk = sock ? BPF_CORE_READ(sock, sk) : NULL;
	family = sk ? BPF_CORE_READ(sk, __sk_common.skc_family) : 0;
	if (family != AF_INET && family != AF_INET6)
		return 0;
	ev = new_event(DK_CONNECT);
	if (!ev)
		return 0;
	ev->call = call;
	ev->fd = fd;
	ev->fd_kind = family == AF_INET ? FDK_INET : FDK_INET6;
	ev->socket_ino = BPF_CORE_READ(f, f_inode, i_ino);
	ev->family = family;
	ev->port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == AF_INET) {
		addr4 = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(ev->addr, &addr4, sizeof(addr4));
	} else {
		BPF_CORE_READ_INTO(&ev->addr, sk, __sk_common.skc_v6_daddr);
	}
	submit(ev);
	return 0;
}

/* detect_accept_exit for sys_exit_accept, detect_accept4_exit for sys_exit_accept4. */
#define ACCEPTED(name, call)                                                 \
	SEC("tp/syscalls/sys_exit_" #name)                                   \
	int detect_##name##_exit(struct trace_event_raw_sys_exit *ctx)       \
	{                                                                    \
		return accepted(ctx, call);                                  \
	}

ACCEPTED(accept, SOCK_ACCEPT)
ACCEPTED(accept4, SOCK_ACCEPT4)

static __always_inline int emit_dup(__s32 oldfd, __s32 newfd, __u32 call, __u8 kind, __u64 ino)
{
	struct detect_event *ev = new_event(DK_DUP);

	if (!ev)
		return 0;
	ev->socket_ino = ino;
	ev->fd = newfd;
	ev->oldfd = oldfd;
	ev->call = call;
	ev->fd_kind = kind;
	submit(ev);
	return 0;
}

/* dup2/dup3 name the new fd: decided at entry. */
static __always_inline int dup_to(__s32 oldfd, __s32 newfd, __u32 call)
{
	__u64 ino = 0;
	__u8 kind;

	if (!want_dup || newfd < 0 || newfd > 2 || oldfd == newfd)
		return 0;
	kind = fd_kind_ino((void *)bpf_get_current_task(), oldfd, &ino);
	return is_inet(kind) ? emit_dup(oldfd, newfd, call, kind, ino) : 0;
}

SEC("tp/syscalls/sys_enter_dup2")
int detect_dup2(struct trace_event_raw_sys_enter *ctx)
{
	return dup_to((int)ctx->args[0], (int)ctx->args[1], DUP_DUP2);
}

SEC("tp/syscalls/sys_enter_dup3")
int detect_dup3(struct trace_event_raw_sys_enter *ctx)
{
	return dup_to((int)ctx->args[0], (int)ctx->args[1], DUP_DUP3);
}

/* dup and fcntl(F_DUPFD) take the lowest free fd: known at exit. */
static __always_inline int remember_dup(__s32 oldfd, __u32 call)
{
	struct pending_dup pending = {.oldfd = oldfd, .call = call};
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (!want_dup)
		return 0;
	pending.kind = fd_kind_ino((void *)bpf_get_current_task(), oldfd, &pending.ino);
	if (is_inet(pending.kind))
		bpf_map_update_elem(&pending_dups, &tid, &pending, BPF_ANY);
	return 0;
}

static __always_inline int dup_done(long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending_dup *pending = bpf_map_lookup_elem(&pending_dups, &tid);
	struct pending_dup copy;

	if (!pending)
		return 0;
	copy = *pending;
	bpf_map_delete_elem(&pending_dups, &tid);
	return ret >= 0 && ret <= 2 ? emit_dup(copy.oldfd, (__s32)ret, copy.call, copy.kind, copy.ino) : 0;
}

SEC("tp/syscalls/sys_enter_dup")
int detect_dup(struct trace_event_raw_sys_enter *ctx)
{
	return remember_dup((int)ctx->args[0], DUP_DUP);
}

SEC("tp/syscalls/sys_exit_dup")
int detect_dup_exit(struct trace_event_raw_sys_exit *ctx)
{
	return dup_done(ctx->ret);
}

SEC("tp/syscalls/sys_enter_fcntl")
int detect_fcntl(struct trace_event_raw_sys_enter *ctx)
{
	long cmd = ctx->args[1];

	if ((cmd != F_DUPFD && cmd != F_DUPFD_CLOEXEC) || ctx->args[2] > 2)
		return 0;
	return remember_dup((int)ctx->args[0], DUP_FCNTL);
}

SEC("tp/syscalls/sys_exit_fcntl")
int detect_fcntl_exit(struct trace_event_raw_sys_exit *ctx)
{
	return dup_done(ctx->ret);
}

/* --- watched calls: privilege, ptrace, module load, BPF program load ---------------------- */

const volatile bool want_privilege = true;
const volatile bool want_ptrace = true;
const volatile bool want_module = true;
const volatile bool want_bpf = true;
const volatile bool want_mount = true;

#define BPF_PROG_LOAD_CMD 5

/* ``nargs``: the call's arguments, at most 3 read. No more: the kernel refuses to attach a
 * program that reads past the end of a tracepoint's record (setuid's holds one). */
static __always_inline int watched(struct trace_event_raw_sys_enter *ctx, __u32 call, int nargs)
{
	struct detect_event *ev = new_event(DK_SYSCALL);

	if (!ev)
		return 0;
	ev->call = call;
	ev->fd = -1;
	ev->arg[0] = ctx->args[0];
	if (nargs > 1)
		ev->arg[1] = ctx->args[1];
	if (nargs > 2)
		ev->arg[2] = ctx->args[2];
	submit(ev);
	return 0;
}

/* One program per call: detect_setuid for sys_enter_setuid, and so on. */
#define WATCHED_CALL(name, want, call, nargs)                                \
	SEC("tp/syscalls/sys_enter_" #name)                                  \
	int detect_##name(struct trace_event_raw_sys_enter *ctx)             \
	{                                                                    \
		return want ? watched(ctx, call, nargs) : 0;                 \
	}

WATCHED_CALL(setuid, want_privilege, SC_SETUID, 1)
WATCHED_CALL(setreuid, want_privilege, SC_SETREUID, 2)
WATCHED_CALL(setresuid, want_privilege, SC_SETRESUID, 3)
WATCHED_CALL(capset, want_privilege, SC_CAPSET, 2)
WATCHED_CALL(ptrace, want_ptrace, SC_PTRACE, 3)
WATCHED_CALL(init_module, want_module, SC_INIT_MODULE, 3)
WATCHED_CALL(finit_module, want_module, SC_FINIT_MODULE, 3)

/* A mount: its target, filesystem type and source, read now (the caller's memory is its own). */
SEC("tp/syscalls/sys_enter_mount")
int detect_mount(struct trace_event_raw_sys_enter *ctx)
{
	struct detect_event *ev;

	if (!want_mount || !(ev = new_event(DK_SYSCALL)))
		return 0;
	ev->call = SC_MOUNT;
	ev->fd = -1;
	ev->arg[0] = ctx->args[3]; /* the flags */
	bpf_probe_read_user_str(ev->path, sizeof(ev->path), (void *)ctx->args[1]);
	bpf_probe_read_user_str(ev->args + DETECT_FSTYPE_AT, DETECT_SOURCE_AT - DETECT_FSTYPE_AT, (void *)ctx->args[2]);
	bpf_probe_read_user_str(ev->args + DETECT_SOURCE_AT, DETECT_ARGS_LEN - DETECT_SOURCE_AT, (void *)ctx->args[0]);
	submit(ev);
	return 0;
}

SEC("tp/syscalls/sys_enter_fsopen")
int detect_fsopen(struct trace_event_raw_sys_enter *ctx)
{
	struct detect_event *ev;

	if (!want_mount || !(ev = new_event(DK_SYSCALL)))
		return 0;
	ev->call = SC_FSOPEN;
	ev->fd = -1;
	bpf_probe_read_user_str(ev->args + DETECT_FSTYPE_AT, DETECT_SOURCE_AT - DETECT_FSTYPE_AT, (void *)ctx->args[0]);
	submit(ev);
	return 0;
}

/* Only program loads: bpf() is also every map read of every BPF tool, this one's included. */
SEC("tp/syscalls/sys_enter_bpf")
int detect_bpf(struct trace_event_raw_sys_enter *ctx)
{
	return want_bpf && ctx->args[0] == BPF_PROG_LOAD_CMD ? watched(ctx, SC_BPF, 3) : 0;
}

/* --- watched files: baits, and the files and directories rules name -------------------- */

const volatile __u32 bait_kill = 0;    /* 1 << enum detect_file_call: those calls on a bait kill */
const volatile bool watch_dirs = false; /* some entry is a directory: look at an opened file's parent */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DETECT_WATCH_MAX);
	__type(key, struct detect_watch_key);
	__type(value, struct detect_watch);
} watch_keys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DETECT_WATCH_MAX);
	__type(key, char[DETECT_NAME_LEN]);
	__type(value, struct detect_watch);
} watch_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DETECT_WATCH_MAX);
	__type(key, __u32);
	__type(value, __u32); /* enum detect_watch_flags */
} watch_flags SEC(".maps");

/* The watched directories by name (their last DETECT_NAME_LEN - 1 bytes), for a rename into
 * one: the kernel sees only the new path's text there. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DETECT_WATCH_MAX);
	__type(key, char[DETECT_NAME_LEN]);
	__type(value, struct detect_watch);
} watch_dir_names SEC(".maps");

struct name_scratch {
	char path[DETECT_PATH_LEN];
	char name[DETECT_NAME_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct name_scratch);
} name_scratch SEC(".maps");

/* The id of the watched file whose name ends the user path ``upath``, or -1. A global
 * function: the verifier walks its loop once, not at each of its ten callers. */
__noinline int watched_named(__u64 upath)
{
	__u32 zero = 0;
	struct name_scratch *s = bpf_map_lookup_elem(&name_scratch, &zero);
	struct detect_watch *entry;
	long n, len;
	int start = 0;

	if (!s || !upath)
		return -1;
	n = bpf_probe_read_user_str(s->path, sizeof(s->path), (const void *)upath);
	if (n <= 1)
		return -1;
	/* the name's last DETECT_NAME_LEN - 1 bytes at most: back from the end to a '/', no
	 * further (a short loop is a quick verification, and the map keys the names so) */
	start = n - DETECT_NAME_LEN > 0 ? n - DETECT_NAME_LEN : 0;
	for (int k = 0; k < DETECT_NAME_LEN; k++) {
		int i = n - 2 - k;

		if (i < 0)
			break;
		if (s->path[i & (DETECT_PATH_LEN - 1)] == '/') {
			start = i + 1;
			break;
		}
	}
	len = n - 1 - start; /* n counts the NUL */
	if (len <= 0)
		return -1;
	if (len > DETECT_NAME_LEN - 1)
		len = DETECT_NAME_LEN - 1;
	__builtin_memset(s->name, 0, sizeof(s->name));
	bpf_probe_read_kernel(s->name, len, s->path + (start & (DETECT_PATH_LEN - 1)));
	entry = bpf_map_lookup_elem(&watch_names, s->name);
	return entry ? (int)entry->id : -1;
}

/* The (dev, ino) of the directory a *at() call's dirfd names (AT_FDCWD: the working one). */
static __always_inline bool dir_key_at(int dirfd, struct detect_watch_key *key)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct dentry *dir = NULL;
	struct file *f;

	if (dirfd == DETECT_AT_FDCWD) {
		dir = BPF_CORE_READ(task, fs, pwd.dentry);
	} else {
		f = ek_current_fd_file(dirfd);
		if (!f)
			return false;
		dir = BPF_CORE_READ(f, f_path.dentry);
	}
	if (!dir)
		return false;
	key->dev = BPF_CORE_READ(dir, d_sb, s_dev);
	key->ino = BPF_CORE_READ(dir, d_inode, i_ino);
	return true;
}

/* The watched directory an fd or the working directory (dirfd AT_FDCWD) is, or -1. */
static __always_inline int watched_dir_at(int dirfd)
{
	struct detect_watch_key key = {};
	struct detect_watch *entry;
	__u32 *entry_flags;

	if (!dir_key_at(dirfd, &key))
		return -1;
	entry = bpf_map_lookup_elem(&watch_keys, &key);
	if (!entry)
		return -1;
	entry_flags = bpf_map_lookup_elem(&watch_flags, &entry->id);
	return entry_flags && (*entry_flags & WATCH_DIR) ? (int)entry->id : -1;
}

/* Where a rename's new path ``upath`` (relative to ``dirfd``) puts the file: the watched
 * directory it may be in (its id), DETECT_WATCH_UNRESOLVED when the kernel cannot tell (a parent
 * named "." or ".."), or -1. A name alone is in dirfd's directory (exact, by inode); a path's
 * parent is matched by its name, which user space confirms against the directory's inode. A
 * global function, verified once. */
__noinline int watched_parent(__u64 upath, int dirfd)
{
	__u32 zero = 0;
	struct name_scratch *s = bpf_map_lookup_elem(&name_scratch, &zero);
	struct detect_watch *entry;
	int last = -1, start = 0, i;
	long n, len;

	if (!s || !upath)
		return -1;
	n = bpf_probe_read_user_str(s->path, sizeof(s->path), (const void *)upath);
	if (n <= 1)
		return -1;
	for (int k = 0; k < DETECT_NAME_LEN; k++) { /* the last '/', as watched_named finds it */
		i = n - 2 - k;
		if (i < 0)
			break;
		if (s->path[i & (DETECT_PATH_LEN - 1)] == '/') {
			last = i;
			break;
		}
	}
	if (last < 0)
		/* a name: in dirfd's directory; or a path too long to see its parent from here */
		return n - 1 < DETECT_NAME_LEN ? watched_dir_at(dirfd) : DETECT_WATCH_UNRESOLVED;
	start = last - (DETECT_NAME_LEN - 1) > 0 ? last - (DETECT_NAME_LEN - 1) : 0;
	for (int k = 1; k < DETECT_NAME_LEN; k++) { /* the '/' before the parent's name */
		i = last - k;
		if (i < 0)
			break;
		if (s->path[i & (DETECT_PATH_LEN - 1)] == '/') {
			start = i + 1;
			break;
		}
	}
	len = last - start;
	if (len <= 0)
		return -1; /* the root, or "//": never a watched directory's name */
	if (s->path[start & (DETECT_PATH_LEN - 1)] == '.' &&
	    (len == 1 || (len == 2 && s->path[(start + 1) & (DETECT_PATH_LEN - 1)] == '.')))
		return DETECT_WATCH_UNRESOLVED;
	__builtin_memset(s->name, 0, sizeof(s->name));
	bpf_probe_read_kernel(s->name, len & (DETECT_NAME_LEN - 1), s->path + (start & (DETECT_PATH_LEN - 1)));
	entry = bpf_map_lookup_elem(&watch_dir_names, s->name);
	return entry ? (int)entry->id : -1;
}

/* ``call`` on entry ``id`` kills its caller: a bait, and the rules say so for that call. */
static __always_inline bool kills(__u32 id, __u32 call)
{
	__u32 *entry_flags = bpf_map_lookup_elem(&watch_flags, &id);

	return entry_flags && (*entry_flags & WATCH_BAIT) && (bait_kill & (1u << call));
}

/* Kill the caller if the entry is a bait and the rules say so for ``call``; report the call. */
static __always_inline void file_touched(__u32 id, __u32 call, __s32 fd, __u32 flags, __u64 dev, __u64 ino,
					 bool by_dir, const char *upath, const char *unewpath,
					 const struct detect_watch_key *base)
{
	struct detect_event *ev;
	bool killed = false;

	if (kills(id, call))
		/* delivered as the call returns; a write sees it pending and writes nothing */
		killed = !bpf_send_signal(SIGKILL);
	ev = new_event(DK_FILE);
	if (!ev)
		return;
	ev->call = call;
	ev->fd = fd;
	ev->flags = flags;
	ev->dev = dev;
	ev->ino = ino;
	ev->watch_id = id;
	ev->killed = killed;
	ev->by_name = !ino;
	ev->by_dir = by_dir;
	if (upath)
		bpf_probe_read_user_str(ev->path, sizeof(ev->path), upath);
	if (unewpath)
		bpf_probe_read_user_str(ev->args, sizeof(ev->args), unewpath);
	if (base) { /* a rename into a watched directory: the directory its new path starts from */
		ev->arg[0] = base->dev;
		ev->arg[1] = base->ino;
	}
	submit(ev);
}

/* The watched entry of the file open as the caller's fd ``fd`` (its key into ``*key``), or of
 * its directory (``*by_dir``) where directories are watched; NULL for neither. */
static __always_inline struct detect_watch *watched_open_as(int fd, struct detect_watch_key *key, bool *by_dir)
{
	struct file *f = ek_current_fd_file(fd);
	struct detect_watch_key parent = {};
	struct detect_watch *entry;
	struct inode *inode;

	if (!f)
		return NULL;
	inode = BPF_CORE_READ(f, f_inode);
	key->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	key->ino = BPF_CORE_READ(inode, i_ino);
	entry = bpf_map_lookup_elem(&watch_keys, key);
	if (entry || !watch_dirs)
		return entry;
	parent.dev = key->dev; /* a file's directory is on its filesystem (but at a mount's root) */
	parent.ino = BPF_CORE_READ(f, f_path.dentry, d_parent, d_inode, i_ino);
	entry = bpf_map_lookup_elem(&watch_keys, &parent);
	*by_dir = entry != NULL;
	return entry;
}

/* The watched files each process has been reported writing to (opened for writing, or a first
 * write), so its further writes are not reported again. */
struct written_key {
	__u64 dev;
	__u64 ino;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 10240);
	__type(key, struct written_key);
	__type(value, __u8);
} written SEC(".maps");

/* True the first time the caller's process is seen writing the file ``key``. */
static __always_inline bool first_write(const struct detect_watch_key *key)
{
	struct written_key w = {.dev = key->dev, .ino = key->ino, .tgid = bpf_get_current_pid_tgid() >> 32};
	__u8 one = 1;

	return !bpf_map_update_elem(&written, &w, &one, BPF_NOEXIST);
}

/* At an open's exit (where the file is known), from the arguments still in the saved user
 * registers: one program a call, no entry program and no map between them. (NULL registers:
 * a kernel whose stack does not hold them where ek_current_syscall_regs looks.) */
static __always_inline int open_done(struct trace_event_raw_sys_exit *ctx, __u32 call)
{
	struct pt_regs *regs = ek_current_syscall_regs(ctx->id);
	struct detect_watch_key key = {};
	struct detect_watch *entry;
	bool by_dir = false;
	const char *upath;
	long ret = ctx->ret;
	__u64 flags = 0;
	int id;

	if (!regs || (ret < 0 && ret != -EPERM && ret != -EACCES))
		return 0;
	if (call == FC_OPEN || call == FC_CREAT) {
		upath = (const char *)PT_REGS_PARM1_CORE_SYSCALL(regs);
		flags = call == FC_OPEN ? PT_REGS_PARM2_CORE_SYSCALL(regs) : O_CREAT | O_WRONLY | O_TRUNC; /* creat's */
	} else {
		upath = (const char *)PT_REGS_PARM2_CORE_SYSCALL(regs);
		if (call == FC_OPENAT)
			flags = PT_REGS_PARM3_CORE_SYSCALL(regs);
		else /* openat2: struct open_how's first field */
			bpf_probe_read_user(&flags, sizeof(flags), (void *)PT_REGS_PARM3_CORE_SYSCALL(regs));
	}
	if (!(flags & O_ACCMODE) && !(flags & O_TRUNC))
		return 0; /* it cannot change the file */
	if (ret < 0) {
		/* denied (by the guard's LSM programs, or by permissions): no file to key it by, so
		 * by its name; the attempt is what tells ransomware, whatever stopped it */
		id = watched_named((__u64)upath);
		if (id >= 0)
			file_touched(id, call, (__s32)ret, (__u32)flags, 0, 0, false, upath, NULL, NULL);
		return 0;
	}
	entry = watched_open_as((int)ret, &key, &by_dir);
	if (!entry)
		return 0;
	if (flags & O_ACCMODE)
		first_write(&key); /* its writes through this fd are this report's */
	file_touched(entry->id, call, (__s32)ret, (__u32)flags, key.dev, key.ino, by_dir, upath, NULL, NULL);
	return 0;
}

/* One program per open call: detect_openat_exit for sys_exit_openat, and so on. */
#define OPEN_EXIT(name, call)                                                \
	SEC("tp/syscalls/sys_exit_" #name)                                   \
	int detect_##name##_exit(struct trace_event_raw_sys_exit *ctx)       \
	{                                                                    \
		return open_done(ctx, call);                                 \
	}

OPEN_EXIT(openat, FC_OPENAT)
OPEN_EXIT(open, FC_OPEN)
OPEN_EXIT(creat, FC_CREAT)
OPEN_EXIT(openat2, FC_OPENAT2)

SEC("tp/syscalls/sys_enter_ftruncate")
int detect_ftruncate(struct trace_event_raw_sys_enter *ctx)
{
	struct detect_watch_key key = {};
	bool by_dir = false;
	struct detect_watch *entry = watched_open_as((int)ctx->args[0], &key, &by_dir);

	if (entry)
		file_touched(entry->id, FC_FTRUNCATE, (int)ctx->args[0], 0, key.dev, key.ino, by_dir, NULL, NULL, NULL);
	return 0;
}

/* A write to a watched file through an fd detect did not see opened (opened before it started,
 * or inherited): reported once per process and file, except that each write to a bait that
 * kills does (a process is killed at its first). */
static __always_inline int write_call(struct trace_event_raw_sys_enter *ctx, __u32 call)
{
	struct detect_watch_key key = {};
	bool by_dir = false;
	int fd = (int)ctx->args[0];
	struct detect_watch *entry = watched_open_as(fd, &key, &by_dir);

	if (entry && (kills(entry->id, call) || first_write(&key)))
		file_touched(entry->id, call, fd, 0, key.dev, key.ino, by_dir, NULL, NULL, NULL);
	return 0;
}

#define WRITE_CALL(name, call)                                               \
	SEC("tp/syscalls/sys_enter_" #name)                                  \
	int detect_##name(struct trace_event_raw_sys_enter *ctx)             \
	{                                                                    \
		return write_call(ctx, call);                                \
	}

WRITE_CALL(write, FC_WRITE)
WRITE_CALL(pwrite64, FC_PWRITE64)
WRITE_CALL(writev, FC_WRITEV)
WRITE_CALL(pwritev, FC_PWRITEV)
WRITE_CALL(pwritev2, FC_PWRITEV2)

/* The calls that name a path, not an open file: matched by the watched file's name; a rename
 * (``unewpath``, relative to ``newdirfd``) also by the watched directory it moves a file into. */
static __always_inline int named(const char *upath, const char *unewpath, int newdirfd, __u32 call)
{
	int id = watched_named((__u64)upath);

	if (id < 0 && unewpath)
		id = watched_named((__u64)unewpath); /* renamed over a watched file: its content is gone too */
	if (id >= 0) {
		file_touched(id, call, -1, 0, 0, 0, false, upath, unewpath, NULL);
		return 0;
	}
	if (!unewpath || !watch_dirs)
		return 0;
	id = watched_parent((__u64)unewpath, newdirfd);
	if (id != -1) { /* user space resolves a relative new path against newdirfd's directory */
		struct detect_watch_key base = {};

		dir_key_at(newdirfd, &base);
		file_touched(id, call, newdirfd, 0, 0, 0, true, upath, unewpath, &base);
	}
	return 0;
}

SEC("tp/syscalls/sys_enter_truncate")
int detect_truncate(struct trace_event_raw_sys_enter *ctx)
{
	return named((const char *)ctx->args[0], NULL, 0, FC_TRUNCATE);
}

SEC("tp/syscalls/sys_enter_rename")
int detect_rename(struct trace_event_raw_sys_enter *ctx)
{
	return named((const char *)ctx->args[0], (const char *)ctx->args[1], DETECT_AT_FDCWD, FC_RENAME);
}

SEC("tp/syscalls/sys_enter_renameat")
int detect_renameat(struct trace_event_raw_sys_enter *ctx)
{
	return named((const char *)ctx->args[1], (const char *)ctx->args[3], (int)ctx->args[2], FC_RENAMEAT);
}

SEC("tp/syscalls/sys_enter_renameat2")
int detect_renameat2(struct trace_event_raw_sys_enter *ctx)
{
	return named((const char *)ctx->args[1], (const char *)ctx->args[3], (int)ctx->args[2], FC_RENAMEAT2);
}

SEC("tp/syscalls/sys_enter_unlink")
int detect_unlink(struct trace_event_raw_sys_enter *ctx)
{
	return named((const char *)ctx->args[0], NULL, 0, FC_UNLINK);
}

SEC("tp/syscalls/sys_enter_unlinkat")
int detect_unlinkat(struct trace_event_raw_sys_enter *ctx)
{
	return named((const char *)ctx->args[1], NULL, 0, FC_UNLINKAT);
}

char LICENSE[] SEC("license") = "GPL";
