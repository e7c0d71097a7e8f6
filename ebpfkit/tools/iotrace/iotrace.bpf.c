// SPDX-License-Identifier: GPL-2.0
/* iotrace recorder: a timestamp for each layer an IO passes. read/write syscalls (enter and
 * exit, with the file's inode and offset) and the block layer's bio_queue, rq_insert,
 * rq_issue and rq_complete. User space joins them into per-request lifecycles later. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "ek_block.h"
#include "iotrace.h"

#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_IFBLK 0060000

const volatile __u32 targ_tgid = 0; /* 0: every process */
const volatile __u32 self_tgid = 0; /* the recorder: its writes to the record file are noise */
const volatile __u32 targ_disk = 0; /* 0: every disk; block events are per whole disk */
const volatile __u32 targ_ndevs = 0;
const volatile __u32 targ_fsdevs[IOTRACE_MAX_FSDEVS] = {}; /* syscalls: the disk and its partitions */

EK_RINGBUF(events, 8 * 1024 * 1024);
EK_EXPORT_TYPE(struct iotrace_event);

__u64 dropped_syscalls = 0; /* the starts map was full: entries not recorded */

struct sys_start {
	__u64 ts;
	struct file *file;
	__s64 offset;
	__u64 count;
	__u64 ino;
	__u32 dev;
	__u32 flags;
	__s32 fd;
	__u32 gen;
	__u16 mode;
	__u8 syscall;
	__u8 positional; /* pread/pwrite: the offset is an argument, not f_pos */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct sys_start);
} starts SEC(".maps");

struct blk_key {
	__u32 dev;
	__u32 pad;
	__u64 sector;
};

/* with -p: block requests whose first bio the target queued (the rq tracepoints run in
 * any context, so the submitter is only known at bio_queue) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct blk_key);
	__type(value, __u8);
} tracked SEC(".maps");

static __always_inline bool fsdev_wanted(__u32 dev)
{
	if (!targ_ndevs)
		return true;
	for (int i = 0; i < IOTRACE_MAX_FSDEVS; i++)
		if (i < targ_ndevs && targ_fsdevs[i] == dev)
			return true;
	return false;
}

static __always_inline struct file *fd_file(int fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *file = NULL;

	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return file;
}

static __always_inline int on_enter(__u8 syscall, long fd, __u64 count, __s64 offset, bool positional)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = id;
	struct sys_start st = {};
	struct inode *inode;
	struct file *file; /* a local: BPF_CORE_READ(st.file, ...) would relocate st too */

	st.ts = bpf_ktime_get_ns();
	if (tgid == self_tgid || (targ_tgid && tgid != targ_tgid))
		return 0;
	file = fd_file(fd);
	if (!file)
		return 0;
	st.file = file;
	inode = BPF_CORE_READ(file, f_inode);
	st.mode = BPF_CORE_READ(inode, i_mode);
	/* only IO that can reach a disk: regular files and block devices (not pipes, sockets) */
	if ((st.mode & S_IFMT) == S_IFREG)
		st.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	else if ((st.mode & S_IFMT) == S_IFBLK)
		st.dev = BPF_CORE_READ(inode, i_rdev);
	else
		return 0;
	if (!fsdev_wanted(st.dev))
		return 0;
	st.ino = BPF_CORE_READ(inode, i_ino);
	st.fd = fd;
	st.gen = BPF_CORE_READ(inode, i_generation);
	st.flags = BPF_CORE_READ(file, f_flags);
	st.count = count;
	st.offset = positional ? offset : BPF_CORE_READ(file, f_pos);
	st.syscall = syscall;
	st.positional = positional;
	if (bpf_map_update_elem(&starts, &tid, &st, BPF_ANY))
		__sync_fetch_and_add(&dropped_syscalls, 1);
	return 0;
}

static __always_inline int on_exit(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = id;
	struct sys_start *st = bpf_map_lookup_elem(&starts, &tid);
	struct iotrace_event *ev;

	if (!st)
		return 0;
	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev) {
		bpf_map_delete_elem(&starts, &tid);
		return 0;
	}
	ev->ts = bpf_ktime_get_ns();
	ev->ts_enter = st->ts;
	ev->ino = st->ino;
	ev->offset = st->offset;
	/* read/write: where the IO really went is f_pos after it minus what moved
	 * (this also gets O_APPEND writes right, whose f_pos at entry is stale) */
	if (!st->positional && ret > 0) {
		struct file *file = st->file;

		ev->offset = BPF_CORE_READ(file, f_pos) - ret;
	}
	ev->count = st->count;
	ev->ret = ret;
	ev->sector = 0;
	ev->nr_sector = 0;
	ev->dev = st->dev;
	ev->tid = tid;
	ev->tgid = id >> 32;
	ev->flags = st->flags;
	ev->error = 0;
	ev->fd = st->fd;
	ev->gen = st->gen;
	ev->mode = st->mode;
	ev->kind = IOTRACE_SYSCALL;
	ev->syscall = st->syscall;
	ev->rwbs[0] = 0;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	bpf_map_delete_elem(&starts, &tid);
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

#define ENTER(name, nr, count, offset, positional)                                     \
	SEC("tp/syscalls/sys_enter_" #name)                                                \
	int iotrace_enter_##name(struct trace_event_raw_sys_enter *ctx)                    \
	{                                                                                  \
		return on_enter(nr, ctx->args[0], count, offset, positional);              \
	}                                                                                  \
	SEC("tp/syscalls/sys_exit_" #name)                                                 \
	int iotrace_exit_##name(struct trace_event_raw_sys_exit *ctx)                      \
	{                                                                                  \
		return on_exit(ctx->ret);                                                  \
	}

ENTER(read, IOTRACE_READ, ctx->args[2], -1, false)
ENTER(write, IOTRACE_WRITE, ctx->args[2], -1, false)
ENTER(pread64, IOTRACE_PREAD64, ctx->args[2], ctx->args[3], true)
ENTER(pwrite64, IOTRACE_PWRITE64, ctx->args[2], ctx->args[3], true)
ENTER(readv, IOTRACE_READV, 0, -1, false)
ENTER(writev, IOTRACE_WRITEV, 0, -1, false)
/* preadv(fd, vec, vlen, pos_l, pos_h): on 64-bit pos_l holds the whole offset */
ENTER(preadv, IOTRACE_PREADV, 0, ctx->args[3], true)
ENTER(pwritev, IOTRACE_PWRITEV, 0, ctx->args[3], true)
/* preadv2/pwritev2 add flags; offset -1 means "at f_pos" like readv/writev */
ENTER(preadv2, IOTRACE_PREADV2, 0, ctx->args[3], (long)ctx->args[3] != -1)
ENTER(pwritev2, IOTRACE_PWRITEV2, 0, ctx->args[3], (long)ctx->args[3] != -1)

static __always_inline int on_block(__u8 kind, __u32 dev, __u64 sector, __u32 nr_sector,
				    const char *rwbs, __s32 error)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct blk_key key = { .dev = dev, .sector = sector };
	struct iotrace_event *ev;
	__u8 one = 1;

	/* flushes carry no data and no sector: nothing to time per request */
	if (!nr_sector || (targ_disk && dev != targ_disk))
		return 0;
	if (targ_tgid) {
		if (kind == IOTRACE_BIO_QUEUE) {
			if ((id >> 32) != targ_tgid)
				return 0;
			bpf_map_update_elem(&tracked, &key, &one, BPF_ANY);
		} else if (!bpf_map_lookup_elem(&tracked, &key)) {
			return 0;
		} else if (kind == IOTRACE_RQ_COMPLETE) {
			bpf_map_delete_elem(&tracked, &key);
		}
	}
	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev)
		return 0;
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->ts = bpf_ktime_get_ns();
	ev->offset = -1;
	ev->fd = -1;
	ev->sector = sector;
	ev->nr_sector = nr_sector;
	ev->dev = dev;
	ev->tid = id;
	ev->tgid = id >> 32;
	ev->error = error;
	ev->kind = kind;
	bpf_probe_read_kernel_str(ev->rwbs, sizeof(ev->rwbs), rwbs);
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

SEC("tp/block/block_bio_queue")
int iotrace_bio_queue(void *ctx)
{
	if (bpf_core_type_exists(struct trace_event_raw_block_bio___511)) {
		struct trace_event_raw_block_bio___511 *r = ctx;

		return on_block(IOTRACE_BIO_QUEUE, r->dev, r->sector, r->nr_sector, r->rwbs, 0);
	} else {
		struct trace_event_raw_block_bio_queue___510 *r = ctx;

		return on_block(IOTRACE_BIO_QUEUE, r->dev, r->sector, r->nr_sector, r->rwbs, 0);
	}
}

SEC("tp/block/block_rq_insert")
int iotrace_rq_insert(struct trace_event_raw_block_rq *ctx)
{
	return on_block(IOTRACE_RQ_INSERT, ctx->dev, ctx->sector, ctx->nr_sector, ctx->rwbs, 0);
}

SEC("tp/block/block_rq_issue")
int iotrace_rq_issue(struct trace_event_raw_block_rq *ctx)
{
	return on_block(IOTRACE_RQ_ISSUE, ctx->dev, ctx->sector, ctx->nr_sector, ctx->rwbs, 0);
}

SEC("tp/block/block_rq_complete")
int iotrace_rq_complete(void *ctx)
{
	if (bpf_core_type_exists(struct trace_event_raw_block_rq_completion___511)) {
		struct trace_event_raw_block_rq_completion___511 *r = ctx;

		return on_block(IOTRACE_RQ_COMPLETE, r->dev, r->sector, r->nr_sector, r->rwbs, r->error);
	} else {
		struct trace_event_raw_block_rq_complete___510 *r = ctx;

		return on_block(IOTRACE_RQ_COMPLETE, r->dev, r->sector, r->nr_sector, r->rwbs, r->error);
	}
}

char LICENSE[] SEC("license") = "GPL";
