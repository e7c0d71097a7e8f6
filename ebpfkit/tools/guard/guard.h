/* Shared between guard.bpf.c and ebpfkit/tools/guard (user space), which reads the
 * layouts and enums below from the object's BTF. */
#ifndef __GUARD_H
#define __GUARD_H

/* operation bits; the log names them from this enum (GUARD_OP_WRITE -> write). The policy
 * is parsed before any object is loaded, so ebpfkit/policy/guard.py OPERATIONS repeats the
 * first seven: a test compares it with this enum. */
enum guard_op {
	GUARD_OP_WRITE   = 1,
	GUARD_OP_UNLINK  = 2,
	GUARD_OP_RENAME  = 4,
	GUARD_OP_LINK    = 8,
	GUARD_OP_SETATTR = 16,
	GUARD_OP_READ    = 32,
	GUARD_OP_EXEC    = 64,
	GUARD_OP_KILL    = 128,
	GUARD_OP_PTRACE  = 256,
	GUARD_OP_BPF     = 512,
};

#define GUARD_SELF_SHIFT 16 /* protected value: self-only ops above this */
#define GUARD_MAX_DEPTH 32 /* ancestor directories checked per access */
#define GUARD_PATH_LEN 128

/* Pre-filter of the protected map: one bit per hash of (dev, ino), so the ancestor walk
 * costs an inlined array lookup per level and a hash lookup only on a (rare) hit. The hash
 * (guard_filter_bit below) is mirrored in ebpfkit/tools/guard/core.py (filter_bit); a test
 * runs this one in the kernel and compares. */
#define GUARD_FILTER_BITS 20
#define GUARD_FILTER_WORDS (1 << (GUARD_FILTER_BITS - 6))
#define GUARD_FILTER_MULT 0x9E3779B97F4A7C15ULL

/* (dev, GUARD_READ_MARK) is in the filter for every device holding an object whose reads are
 * denied: read() on other devices skips the check with one array lookup */
#define GUARD_READ_MARK 0xffffffffffffffffULL

/* generation map indexes (see verdicts in guard.bpf.c) */
enum guard_gen {
	GUARD_GEN_POLICY = 0,
	GUARD_GEN_RENAME = 1,
};

/* the bits of a `trusted` value: the executable is trusted, and so are its children */
enum guard_trust {
	GUARD_TRUST_SELF = 1,
	GUARD_TRUST_INHERIT = 2,
};

/* self_ids kinds: the guard's own programs, links and maps, by kernel id */
enum guard_self_kind {
	GUARD_SELF_PROG = 1,
	GUARD_SELF_LINK = 2,
	GUARD_SELF_MAP = 3,
};

/* self_ids values: what an untrusted subject may do with the object */
enum guard_self_access {
	GUARD_SELF_NOTHING = 1,
	GUARD_SELF_READABLE = 2, /* a map it may open read-only (the counters, for `guard status`) */
};

/* hooks, for the log, which names them from this enum (GUARD_HOOK_FILE_OPEN -> file_open) */
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
	GUARD_HOOK_PTRACE_ACCESS_CHECK,
	GUARD_HOOK_BPF,
	GUARD_HOOK_BPF_MAP,
	GUARD_HOOK_BPF_PROG,
	GUARD_HOOK_SB_UMOUNT,
	GUARD_HOOK_BPRM_CHECK_SECURITY,
	GUARD_HOOK_FILE_MPROTECT,
};

/* an object is (device, inode): paths can be renamed, linked and bind-mounted */
struct guard_key {
	__u64 dev;
	__u64 ino;
};

/* the filter bit of a key: a multiplicative hash of (dev, ino) */
static __always_inline __u32 guard_filter_bit(const struct guard_key *key)
{
	__u64 h = (key->ino ^ (key->dev << 32)) * GUARD_FILTER_MULT;

	return h >> (64 - GUARD_FILTER_BITS);
}

struct guard_verdict {
	__u32 gen_policy;
	__u32 gen_rename;
	__u32 ops;
	__u32 pad;
	struct guard_key hit;
};

struct guard_self_key {
	enum guard_self_kind kind;
	__u32 id;
};

struct guard_event {
	__u64 ts_ns;
	__u64 dev;
	__u64 ino;
	__u32 pid;
	__u32 target_pid; /* task_kill / ptrace */
	enum guard_hook hook;
	__u32 op;         /* enum guard_op bits */
	__s32 verdict;    /* 0 allowed (audit), -EPERM denied */
	__u32 sig;
	__u32 bpf_cmd;    /* bpf(): the command */
	__u32 obj_id;     /* bpf hooks: id of the guard's map, program or link */
	char comm[16];
	char name[GUARD_PATH_LEN]; /* the dentry name the hook saw (bpf_map: the map name) */
};

#endif
