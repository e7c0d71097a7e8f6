/* Shared by iotrace.bpf.c and, through BTF, by ebpfkit/tools/iotrace.py. */
#ifndef __IOTRACE_H
#define __IOTRACE_H

#define IOTRACE_COMM_LEN 16
#define IOTRACE_RWBS_LEN 10
#define IOTRACE_MAX_FSDEVS 16 /* --disk: the disk and its partitions */

/* iotrace_event.kind: which layer the record comes from */
#define IOTRACE_SYSCALL 1
#define IOTRACE_BIO_QUEUE 2
#define IOTRACE_RQ_INSERT 3
#define IOTRACE_RQ_ISSUE 4
#define IOTRACE_RQ_COMPLETE 5

/* iotrace_event.syscall */
#define IOTRACE_READ 1
#define IOTRACE_WRITE 2
#define IOTRACE_PREAD64 3
#define IOTRACE_PWRITE64 4
#define IOTRACE_READV 5
#define IOTRACE_WRITEV 6
#define IOTRACE_PREADV 7
#define IOTRACE_PWRITEV 8
#define IOTRACE_PREADV2 9
#define IOTRACE_PWRITEV2 10

/* One record per syscall (at its exit) or per block tracepoint hit. Times are
 * bpf_ktime_get_ns(), i.e. CLOCK_MONOTONIC. Devices are kernel dev_t (major << 20 | minor). */
struct iotrace_event {
	__u64 ts;        /* syscall exit, or the block event */
	__u64 ts_enter;  /* syscall entry */
	__u64 ino;       /* syscall: the file's inode */
	__s64 offset;    /* syscall: file offset of the IO, -1 if unknown */
	__u64 count;     /* syscall: bytes asked for (0 for readv/writev: unknown) */
	__s64 ret;       /* syscall: return value */
	__u64 sector;    /* block: first 512-byte sector */
	__u32 nr_sector; /* block: size in sectors */
	__u32 dev;       /* block: the disk; syscall: the file's fs (s_dev), or i_rdev of a block device file */
	__u32 tid;
	__u32 tgid;
	__u32 flags;     /* syscall: the file's f_flags (O_DIRECT...) */
	__s32 error;     /* rq_complete: the request's error */
	__s32 fd;        /* syscall: the fd (user space maps the file through /proc/PID/fd) */
	__u32 gen;       /* syscall: i_generation (with ino, a file handle finds a closed file) */
	__u16 mode;      /* syscall: i_mode of the file */
	__u8 kind;       /* IOTRACE_SYSCALL... */
	__u8 syscall;    /* IOTRACE_READ... */
	char rwbs[IOTRACE_RWBS_LEN];
	char comm[IOTRACE_COMM_LEN];
};

#endif
