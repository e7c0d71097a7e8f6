/* Shared between guard.bpf.c and ebpfkit/guard (user space). */
#ifndef __GUARD_H
#define __GUARD_H

/* operation bits: the same values as ebpfkit/policy/guard.py OPERATIONS */
#define GUARD_OP_WRITE   1
#define GUARD_OP_UNLINK  2
#define GUARD_OP_RENAME  4
#define GUARD_OP_LINK    8
#define GUARD_OP_SETATTR 16
#define GUARD_OP_READ    32
#define GUARD_OP_EXEC    64
#define GUARD_OP_KILL    128
#define GUARD_OP_PTRACE  256
#define GUARD_OP_BPF     512

#define GUARD_SELF_SHIFT 16 /* protected value: self-only ops above this */
#define GUARD_MAX_DEPTH 32 /* ancestor directories checked per access */
#define GUARD_PATH_LEN 128

/* hooks, for the log */
enum guard_hook {
	GUARD_HOOK_FILE_OPEN = 1,
	GUARD_HOOK_FILE_PERMISSION,
	GUARD_HOOK_INODE_UNLINK,
	GUARD_HOOK_INODE_RENAME,
	GUARD_HOOK_INODE_LINK,
	GUARD_HOOK_INODE_SETATTR,
	GUARD_HOOK_PATH_TRUNCATE,
	GUARD_HOOK_MMAP_FILE,
	GUARD_HOOK_TASK_KILL,
	GUARD_HOOK_PTRACE,
	GUARD_HOOK_BPF,
};

/* an object is (device, inode): paths can be renamed, linked and bind-mounted */
struct guard_key {
	__u64 dev;
	__u64 ino;
};

struct guard_event {
	__u64 ts_ns;
	__u64 dev;
	__u64 ino;
	__u32 pid;
	__u32 target_pid; /* task_kill / ptrace */
	__u32 hook;
	__u32 op;
	__s32 verdict;    /* 0 allowed (audit), -EPERM denied */
	__u32 sig;
	char comm[16];
	char name[GUARD_PATH_LEN]; /* the dentry name the hook saw */
};

#endif
