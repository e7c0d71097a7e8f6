/* SPDX-License-Identifier: GPL-2.0 */
/* detect's events: one struct for every kind (session.py decodes it through the object's BTF). */
#ifndef __DETECT_H
#define __DETECT_H

#define DETECT_ANCESTORS 4   /* parents recorded with each event: proc.aname[1..4] */
#define DETECT_PATH_LEN 256
#define DETECT_ARGS_LEN 256  /* argv, NUL-separated, cut here */

enum detect_kind {
	DK_EXEC = 1,    /* a process image replaced (sched_process_exec) */
	DK_CONNECT = 2, /* connect() on an IPv4/IPv6 socket */
	DK_DUP = 3,     /* an IPv4/IPv6 socket duplicated onto fd 0, 1 or 2 (dup, dup2, dup3, fcntl) */
};

/* What an fd is (the kernel's view of its file), for stdio and the fds of events. */
enum detect_fd_kind {
	FDK_NONE = 0,   /* not open */
	FDK_FILE = 1,
	FDK_INET = 2,   /* an IPv4 socket */
	FDK_INET6 = 3,
	FDK_UNIX = 4,
	FDK_SOCKET = 5, /* another family */
	FDK_PIPE = 6,
	FDK_CHAR = 7,   /* a character device: a terminal, /dev/null */
};

/* Which syscall made a DK_DUP. */
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
	__s32 fd;                   /* connect: the socket; dup: the new fd (0-2) */
	__s32 oldfd;                /* dup: the fd duplicated */
	__u32 call;                 /* dup: enum detect_dup_call */
	__u16 family;               /* connect: AF_INET or AF_INET6 */
	__u16 port;                 /* connect: host order */
	__u8 addr[16];              /* connect: IPv4 in the first 4 bytes */
	__u64 socket_ino;           /* the network socket involved (its inode): connect's, the one
				     * duplicated, or (exec) the first on the process's stdio; 0: none */
	__u32 exe_dev;              /* exec: the executable's device (the kernel's dev_t) and inode */
	__u64 exe_ino;
	__u32 args_len;             /* exec: bytes of args used */
	__u32 nancestors;
	struct detect_ancestor ancestors[DETECT_ANCESTORS];
	char path[DETECT_PATH_LEN]; /* exec: the file executed */
	__u8 args[DETECT_ARGS_LEN]; /* exec: argv, NUL-separated (bytes: a char array decodes up to its first NUL) */
};

#endif /* __DETECT_H */
