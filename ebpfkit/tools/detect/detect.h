/* SPDX-License-Identifier: GPL-2.0 */
/* detect's events: one struct for every kind (session.py decodes it through the object's BTF). */
#ifndef __DETECT_H
#define __DETECT_H

#define DETECT_ANCESTORS 4   /* parents recorded with each event: proc.aname[1..4] */
#define DETECT_PATH_LEN 256
#define DETECT_ARGS_LEN 256  /* argv, NUL-separated, cut here */
#define DETECT_NAME_LEN 64   /* a watched file's name, as watch_names keys it (longer: its last 63 bytes) */
#define DETECT_WATCH_MAX 4096 /* watched files and directories */

enum detect_kind {
	DK_EXEC = 1,    /* a process image replaced (sched_process_exec) */
	DK_CONNECT = 2, /* connect(), bind() or accept() on an IPv4/IPv6 socket (call: which) */
	DK_DUP = 3,     /* an IPv4/IPv6 socket duplicated onto fd 0, 1 or 2 (dup, dup2, dup3, fcntl) */
	DK_FILE = 4,    /* a watched file opened for writing, truncated, renamed or removed */
	DK_SYSCALL = 5, /* a watched call: privilege, ptrace, module load, bpf(BPF_PROG_LOAD) */
};

/* Which watched syscall made a DK_SYSCALL (entered: the attempt, whatever its result). */
enum detect_sys_call {
	SC_SETUID = 1,
	SC_SETREUID = 2,
	SC_SETRESUID = 3,
	SC_CAPSET = 4,
	SC_PTRACE = 5,
	SC_INIT_MODULE = 6,
	SC_FINIT_MODULE = 7,
	SC_BPF = 8,
	SC_MOUNT = 9,
	SC_FSOPEN = 10, /* the new mount API's first step: the filesystem type */
};

#define DETECT_FSTYPE_AT 0     /* mount, fsopen: where in args the filesystem type is */
#define DETECT_SOURCE_AT 128   /* mount: where in args the source is */

/* Which syscall made a DK_FILE (a bit of bait_kill each: 1 << call). */
enum detect_file_call {
	FC_OPEN = 1,
	FC_OPENAT = 2,
	FC_OPENAT2 = 3,
	FC_CREAT = 4,
	FC_TRUNCATE = 5,
	FC_FTRUNCATE = 6,
	FC_RENAME = 7,
	FC_RENAMEAT = 8,
	FC_RENAMEAT2 = 9,
	FC_UNLINK = 10,
	FC_UNLINKAT = 11,
	FC_WRITE = 12,    /* the writes: through an fd opened before detect saw it (the first a */
	FC_PWRITE64 = 13, /* process makes to each watched file; one that detect saw opened for */
	FC_WRITEV = 14,   /* writing was reported then) */
	FC_PWRITEV = 15,
	FC_PWRITEV2 = 16,
};

/* A watched file, in the kernel: by (device, inode) for the calls that give an open file (open,
 * ftruncate), by file name for those that give only a path (truncate, rename, unlink); a
 * watched directory by its (device, inode), as the parent of a file opened for writing. */
struct detect_watch_key {
	__u64 dev;  /* the superblock's s_dev */
	__u64 ino;
};

struct detect_watch {
	__u32 id;   /* the index of its path in the session's list */
};

#define DETECT_AT_FDCWD -100               /* a dirfd: the working directory */
#define DETECT_WATCH_UNRESOLVED 0x7fffffff /* a file event's watch_id: user space finds the entry */

enum detect_watch_flags {
	WATCH_BAIT = 1, /* a bait: a call on it may kill (bait_kill) */
	WATCH_DIR = 2,  /* a directory: what is opened for writing in it */
};

/* What an fd is (the kernel's view of its file), for stdio and the fds of events. */
enum detect_fd_kind {
	FDK_NONE = 0,   /* not open */
	FDK_FILE = 1,
	FDK_INET = 2,   /* an IPv4 socket */
	FDK_INET6 = 3,
	FDK_UNIX = 4,
	FDK_SOCKET = 5, /* another family */
	FDK_PIPE = 6,   /* an anonymous pipe (pipe(2), a shell's |) */
	FDK_CHAR = 7,   /* a character device: a terminal, /dev/null */
	FDK_FIFO = 8,   /* a named pipe (mkfifo): a path on a filesystem */
};

/* Which syscall made a DK_DUP. */
/* Which call made a DK_CONNECT: connect and bind at entry (the address the caller named),
 * accept at exit (the new fd, its peer read from the socket). */
enum detect_socket_call {
	SOCK_CONNECT = 0,
	SOCK_BIND = 1,
	SOCK_ACCEPT = 2,
	SOCK_ACCEPT4 = 3,
};

enum detect_dup_call {
	DUP_DUP = 1,
	DUP_DUP2 = 2,
	DUP_DUP3 = 3,
	DUP_FCNTL = 4,
};

struct detect_ancestor {
	__u32 pid;
	char comm[16];
};

struct detect_event {
	__u64 ts;
	__u32 kind;                 /* enum detect_kind */
	__u32 pid;                  /* thread */
	__u32 tgid;
	__u32 uid;
	__u64 cgroup_id;
	char comm[16];
	__u8 stdio[3];              /* enum detect_fd_kind of fds 0, 1, 2 when it happened */
	__u8 fd_kind;               /* connect: the socket's kind; dup: the duplicated fd's */
	__s32 fd;                   /* connect: the socket; dup: the new fd (0-2); file: open's result (a
				     * negative errno when it failed), ftruncate's fd, a rename into a
				     * watched directory's newdirfd (-100: the working directory), else -1 */
	__s32 oldfd;                /* dup: the fd duplicated */
	__u32 call;                 /* connect: enum detect_socket_call; dup: enum detect_dup_call;
				     * file: enum detect_file_call; syscall: enum detect_sys_call */
	__s64 arg[3];               /* syscall: its first arguments */
	__u16 family;               /* connect: AF_INET or AF_INET6 */
	__u16 port;                 /* connect: host order */
	__u8 addr[16];              /* connect: IPv4 in the first 4 bytes */
	__u64 socket_ino;           /* the network socket involved (its inode): connect's, the one
				     * duplicated, or (exec) the first on the process's stdio; 0: none */
	__u32 dev;                  /* exec: the executable's device (the kernel's dev_t) and inode; */
	__u64 ino;                  /* file: the file's (0 when matched by name) */
	__u32 watch_id;             /* file: the watched entry's index */
	__u32 flags;                /* file, open: its flags */
	__u8 killed;                /* file: SIGKILL sent from the kernel (a bait's) */
	__u8 by_name;               /* file: matched by file name (truncate, rename, unlink), not inode */
	__u8 by_dir;                /* file: matched as a file in a watched directory */
	__u8 exe_memfd;             /* exec: the file executed is a memfd (no path: fileless) */
	__u32 args_len;             /* exec: bytes of args used */
	__u32 nancestors;
	struct detect_ancestor ancestors[DETECT_ANCESTORS];
	char path[DETECT_PATH_LEN]; /* exec: the file executed; file: the path the call named (rename: the old);
				     * mount: the target */
	__u8 args[DETECT_ARGS_LEN]; /* exec: argv, NUL-separated (bytes: a char array decodes up to its
				     * first NUL); file, rename: the new path; mount, fsopen: the filesystem
				     * type at DETECT_FSTYPE_AT, mount's source at DETECT_SOURCE_AT */
};

#endif /* __DETECT_H */
