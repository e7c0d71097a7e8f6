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

/* Pre-filter of the protected map: one bit per hash of (dev, ino), so the ancestor walk
 * costs an inlined array lookup per level and a hash lookup only on a (rare) hit. The hash
 * is mirrored in ebpfkit/guard/core.py (filter_bit). */
#define GUARD_FILTER_BITS 20
#define GUARD_FILTER_WORDS (1 << (GUARD_FILTER_BITS - 6))
#define GUARD_FILTER_MULT 0x9E3779B97F4A7C15ULL

/* (dev, GUARD_READ_MARK) is in the filter for every device holding an object whose reads are
 * denied: read() on other devices skips the check with one array lookup */
#define GUARD_READ_MARK 0xffffffffffffffffULL

/* generation map indexes (see verdicts in guard.bpf.c) */
#define GUARD_GEN_POLICY 0
#define GUARD_GEN_RENAME 1

/* self_ids kinds: the guard's own programs and links, by kernel id */
#define GUARD_SELF_PROG 1
#define GUARD_SELF_LINK 2

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
	GUARD_HOOK_BPF_MAP,
	GUARD_HOOK_BPF_PROG,
	GUARD_HOOK_SB_UMOUNT,
	GUARD_HOOK_BPRM_CHECK,
	GUARD_HOOK_FILE_MPROTECT,
};

/* an object is (device, inode): paths can be renamed, linked and bind-mounted */
struct guard_key {
	__u64 dev;
	__u64 ino;
};

struct guard_verdict {
	__u32 gen_policy;
	__u32 gen_rename;
	__u32 ops;
	__u32 pad;
	struct guard_key hit;
};

struct guard_self_key {
	__u32 kind; /* GUARD_SELF_* */
	__u32 id;
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
	__u32 bpf_cmd;    /* bpf(): the command */
	__u32 obj_id;     /* bpf hooks: id of the guard's map, program or link */
	char comm[16];
	char name[GUARD_PATH_LEN]; /* the dentry name the hook saw (bpf_map: the map name) */
};

#endif
