/* Shared by iofsstat.bpf.c and, through BTF, by ebpfkit/tools/iofsstat.py. */
#ifndef __IOFSSTAT_H
#define __IOFSSTAT_H

#define IOFS_COMM_LEN 16
#define IOFS_NAME_MAX 256   /* NAME_MAX + NUL: the most one path component takes */
#define IOFS_PATH_BUF 2048  /* path components (leaf first), each NUL-terminated */
#define IOFS_MAX_DEPTH 48   /* dentries plus mount crossings walked for one path */

enum iofs_path_state {
	IOFS_PATH_COMPLETE = 0,  /* walked up to the root of the mount namespace */
	IOFS_PATH_TRUNCATED = 1, /* deeper than IOFS_MAX_DEPTH or longer than IOFS_PATH_BUF */
	IOFS_PATH_DETACHED = 2,  /* reached a root that is no mount root (unlinked, lazily unmounted) */
};

/* A file: the superblock's device (kernel dev_t: major << 20 | minor) and inode number. */
struct iofs_file {
	__u32 dev;
	__u32 pad;
	__u64 ino;
};

/* One (process, file) row of an interval. */
struct iofs_key {
	__u32 tgid;
	__u32 pad;
	struct iofs_file file;
};

struct iofs_stat {
	__u64 reads;
	__u64 writes;
	__u64 read_bytes;
	__u64 write_bytes;
	__u64 cgroup_id; /* cgroup v2 id (the cgroup directory's inode number) */
	char comm[IOFS_COMM_LEN];
};

/* The path of a file as names from the file up to the root: "c\0b\0a\0" for /a/b/c. */
struct iofs_path {
	__u32 len;   /* bytes of names used */
	__u32 state; /* enum iofs_path_state */
	__u8 names[IOFS_PATH_BUF + IOFS_NAME_MAX]; /* __u8, not char: user space gets bytes */
};

/* Block-layer IO of one process on one device in an interval. */
struct iofs_bio_key {
	__u32 tgid;
	__u32 dev;
};

struct iofs_bio_stat {
	__u64 reads;
	__u64 writes;
	__u64 read_bytes;
	__u64 write_bytes;
	__u64 cgroup_id;
	char comm[IOFS_COMM_LEN];
};

#endif
