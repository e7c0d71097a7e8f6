/* SPDX-License-Identifier: Apache-2.0 */
/* BCC's C dialect over vmlinux.h and libbpf's headers: what ebpfkit.bcc's translator puts
 * in front of a BCC program (see translate.py).
 *
 * A table macro (BPF_HASH, BPF_ARRAY, ...) declares a BTF-defined map. When the translator
 * parses the program (EK_BCC_PARSE), each table also has one function-pointer member per
 * BCC method, so `counts.increment(key)` is a well-typed call in the syntax tree; the
 * translator turns each such call into `__ek_increment(counts, key)`, defined below. */
#pragma once

/* ---- the member list of a table's struct ---- */
#ifdef EK_BCC_PARSE
#define __EK_KV_METHODS(K, V)                                                                     \
	V *(*lookup)(K *);                                                                        \
	V *(*lookup_or_init)(K *, V *);                                                           \
	V *(*lookup_or_try_init)(K *, V *);                                                       \
	int (*update)(K *, V *);                                                                  \
	int (*insert)(K *, V *);                                                                  \
	int (*delete)(K *);                                                                       \
	void (*increment)(K, ...);                                                                \
	void (*atomic_increment)(K, ...);
#define __EK_PERF_METHODS                                                                         \
	int (*perf_submit)(void *, void *, __u32);                                                \
	int (*perf_submit_skb)(void *, __u32, void *, __u32);
#define __EK_RINGBUF_METHODS                                                                      \
	int (*ringbuf_output)(void *, __u64, __u64);                                              \
	void *(*ringbuf_reserve)(__u64);                                                          \
	void (*ringbuf_submit)(void *, __u64);                                                    \
	void (*ringbuf_discard)(void *, __u64);
#define __EK_STACK_METHODS int (*get_stackid)(void *, __u64);
#define __EK_MAPS_SECTION
#else
#define __EK_KV_METHODS(K, V)
#define __EK_PERF_METHODS
#define __EK_RINGBUF_METHODS
#define __EK_STACK_METHODS
#define __EK_MAPS_SECTION SEC(".maps")
#endif

/* ---- argument-count dispatch: NAME(a), NAME(a, b), ... -> NAME1(a), NAME2(a, b), ... ---- */
#define __EK_CAT(a, b) a##b
#define __EK_XCAT(a, b) __EK_CAT(a, b)
#define __EK_NARG(...) __EK_NARG_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define __EK_NARG_(_1, _2, _3, _4, _5, _6, N, ...) N
#define __EK_DISPATCH(name, ...) __EK_XCAT(name, __EK_NARG(__VA_ARGS__))(__VA_ARGS__)

#define __EK_KV_TABLE(maptype, K, V, N, name)                                                     \
	struct {                                                                                  \
		__uint(type, maptype);                                                            \
		__uint(max_entries, N);                                                           \
		__type(key, K);                                                                   \
		__type(value, V);                                                                 \
		__EK_KV_METHODS(K, V)                                                             \
	} name __EK_MAPS_SECTION

/* BPF_TABLE("hash", K, V, name, N) and friends: the translator rewrites the type string
 * into the macro's name (BPF_TABLE("lru_hash", ...) -> __EK_TABLE_lru_hash(...)) */
#define __EK_TABLE_hash(K, V, name, N) __EK_KV_TABLE(BPF_MAP_TYPE_HASH, K, V, N, name)
#define __EK_TABLE_array(K, V, name, N) __EK_KV_TABLE(BPF_MAP_TYPE_ARRAY, K, V, N, name)
#define __EK_TABLE_percpu_hash(K, V, name, N) __EK_KV_TABLE(BPF_MAP_TYPE_PERCPU_HASH, K, V, N, name)
#define __EK_TABLE_percpu_array(K, V, name, N) __EK_KV_TABLE(BPF_MAP_TYPE_PERCPU_ARRAY, K, V, N, name)
#define __EK_TABLE_lru_hash(K, V, name, N) __EK_KV_TABLE(BPF_MAP_TYPE_LRU_HASH, K, V, N, name)
#define __EK_TABLE_lru_percpu_hash(K, V, name, N) __EK_KV_TABLE(BPF_MAP_TYPE_LRU_PERCPU_HASH, K, V, N, name)
/* BCC: a histogram keyed by int is an array, by anything else a hash */
#define __EK_TABLE_histogram(K, V, name, N)                                                      \
	__EK_KV_TABLE(__builtin_types_compatible_p(K, int) ? BPF_MAP_TYPE_ARRAY : BPF_MAP_TYPE_HASH, K, V, N, name)
#define BPF_TABLE(kind, K, V, name, N) __EK_TABLE_##kind(K, V, name, N)

#define BPF_HASH(...) __EK_DISPATCH(__EK_HASH, __VA_ARGS__)
#define __EK_HASH1(name) __EK_HASH4(name, u64, u64, 10240)
#define __EK_HASH2(name, K) __EK_HASH4(name, K, u64, 10240)
#define __EK_HASH3(name, K, V) __EK_HASH4(name, K, V, 10240)
#define __EK_HASH4(name, K, V, N) __EK_TABLE_hash(K, V, name, N)

#define BPF_LRU_HASH(...) __EK_DISPATCH(__EK_LRU, __VA_ARGS__)
#define __EK_LRU1(name) __EK_LRU4(name, u64, u64, 10240)
#define __EK_LRU2(name, K) __EK_LRU4(name, K, u64, 10240)
#define __EK_LRU3(name, K, V) __EK_LRU4(name, K, V, 10240)
#define __EK_LRU4(name, K, V, N) __EK_TABLE_lru_hash(K, V, name, N)

#define BPF_PERCPU_HASH(...) __EK_DISPATCH(__EK_PCPU_HASH, __VA_ARGS__)
#define __EK_PCPU_HASH1(name) __EK_PCPU_HASH4(name, u64, u64, 10240)
#define __EK_PCPU_HASH2(name, K) __EK_PCPU_HASH4(name, K, u64, 10240)
#define __EK_PCPU_HASH3(name, K, V) __EK_PCPU_HASH4(name, K, V, 10240)
#define __EK_PCPU_HASH4(name, K, V, N) __EK_TABLE_percpu_hash(K, V, name, N)

#define BPF_ARRAY(...) __EK_DISPATCH(__EK_ARRAY, __VA_ARGS__)
#define __EK_ARRAY1(name) __EK_ARRAY3(name, u64, 10240)
#define __EK_ARRAY2(name, V) __EK_ARRAY3(name, V, 10240)
#define __EK_ARRAY3(name, V, N) __EK_TABLE_array(int, V, name, N)

#define BPF_PERCPU_ARRAY(...) __EK_DISPATCH(__EK_PCPU_ARRAY, __VA_ARGS__)
#define __EK_PCPU_ARRAY1(name) __EK_PCPU_ARRAY3(name, u64, 10240)
#define __EK_PCPU_ARRAY2(name, V) __EK_PCPU_ARRAY3(name, V, 10240)
#define __EK_PCPU_ARRAY3(name, V, N) __EK_TABLE_percpu_array(int, V, name, N)

#define BPF_HISTOGRAM(...) __EK_DISPATCH(__EK_HIST, __VA_ARGS__)
#define __EK_HIST1(name) __EK_HIST3(name, int, 64)
#define __EK_HIST2(name, K) __EK_HIST3(name, K, 64)
#define __EK_HIST3(name, K, N) __EK_TABLE_histogram(K, u64, name, N)

#define BPF_PERF_OUTPUT(name)                                                                     \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);                                      \
		__uint(key_size, sizeof(int));                                                    \
		__uint(value_size, sizeof(__u32));                                                \
		__EK_PERF_METHODS                                                                 \
	} name __EK_MAPS_SECTION

#define BPF_RINGBUF_OUTPUT(name, pages)                                                           \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                                               \
		__uint(max_entries, (pages) * 4096);                                              \
		__EK_RINGBUF_METHODS                                                              \
	} name __EK_MAPS_SECTION

#define BPF_STACK_TRACE(name, N)                                                                  \
	struct {                                                                                  \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                                           \
		__uint(max_entries, N);                                                           \
		__uint(key_size, sizeof(__u32));                                                  \
		__uint(value_size, 127 * sizeof(__u64));                                          \
		__EK_STACK_METHODS                                                                \
	} name __EK_MAPS_SECTION

/* ---- the methods, as the translator writes them: __ek_<method>(table, args...) ---- */
/* BCC's reads of a USDT probe's arguments (numbered from 1) over libbpf's bpf_usdt_arg()
 * (<bpf/usdt.bpf.h>, included for programs with USDT probes), which decodes this place's spec */
#define bpf_usdt_readarg(n, ctx, addr)                                                            \
	({                                                                                        \
		long __ek_arg = 0;                                                                \
		int __ek_err = bpf_usdt_arg((struct pt_regs *)(ctx), (n) - 1, &__ek_arg);        \
		*(addr) = (typeof(*(addr)))__ek_arg;                                              \
		__ek_err;                                                                         \
	})
#define bpf_usdt_readarg_p(n, ctx, buf, len)                                                      \
	({                                                                                        \
		long __ek_arg = 0;                                                                \
		int __ek_err = bpf_usdt_arg((struct pt_regs *)(ctx), (n) - 1, &__ek_arg);        \
		__ek_err ? __ek_err : bpf_probe_read_user((buf), (len), (void *)__ek_arg);        \
	})
/* a kernel pointer computed by the program, dereferenced (the translator wraps `*(p)` so) */
#define __EK_DEREF(p)                                                                             \
	({                                                                                        \
		typeof(*(p)) __ek_d;                                                              \
		bpf_probe_read_kernel(&__ek_d, sizeof(__ek_d), (p));                              \
		__ek_d;                                                                           \
	})
#define __ek_lookup(t, k) bpf_map_lookup_elem(&t, k)
#define __ek_update(t, k, v) bpf_map_update_elem(&t, k, v, BPF_ANY)
#define __ek_insert(t, k, v) bpf_map_update_elem(&t, k, v, BPF_NOEXIST)
#define __ek_delete(t, k) bpf_map_delete_elem(&t, k)
#define __ek_lookup_or_try_init(t, k, init)                                                       \
	({                                                                                        \
		typeof(*(t).value) *__ek_v = bpf_map_lookup_elem(&t, k);                          \
		if (!__ek_v) {                                                                    \
			bpf_map_update_elem(&t, k, init, BPF_NOEXIST);                            \
			__ek_v = bpf_map_lookup_elem(&t, k);                                      \
		}                                                                                 \
		__ek_v;                                                                           \
	})
#define __ek_lookup_or_init(t, k, init) __ek_lookup_or_try_init(t, k, init)
/* exact under concurrency: a missing entry is created zeroed (only one creator wins), then
 * every caller adds atomically */
#define __ek_increment(t, ...) __EK_XCAT(__ek_increment, __EK_NARG(__VA_ARGS__))(t, __VA_ARGS__)
#define __ek_increment1(t, k) __ek_increment2(t, k, 1)
/* (parameters named apart from the members .key and .value they sit beside) */
#define __ek_increment2(t, k, n)                                                                  \
	({                                                                                        \
		typeof(*(t).key) __ek_k = (k);                                                    \
		typeof(*(t).value) *__ek_v = bpf_map_lookup_elem(&t, &__ek_k);                    \
		if (!__ek_v) {                                                                    \
			typeof(*(t).value) __ek_zero = 0;                                         \
			bpf_map_update_elem(&t, &__ek_k, &__ek_zero, BPF_NOEXIST);                \
			__ek_v = bpf_map_lookup_elem(&t, &__ek_k);                                \
		}                                                                                 \
		if (__ek_v)                                                                       \
			__sync_fetch_and_add(__ek_v, (n));                                        \
	})
#define __ek_atomic_increment(t, ...) __ek_increment(t, __VA_ARGS__)
#define __ek_perf_submit(t, ctx, data, size) bpf_perf_event_output(ctx, &t, BPF_F_CURRENT_CPU, data, size)
#define __ek_perf_submit_skb(t, ctx, skb_len, data, size)                                         \
	bpf_perf_event_output(ctx, &t, ((__u64)(skb_len) << 32) | BPF_F_CURRENT_CPU, data, size)
#define __ek_ringbuf_output(t, data, size, flags) bpf_ringbuf_output(&t, data, size, flags)
#define __ek_ringbuf_reserve(t, size) bpf_ringbuf_reserve(&t, size, 0)
#define __ek_ringbuf_submit(t, data, flags) bpf_ringbuf_submit(data, flags)
#define __ek_ringbuf_discard(t, data, flags) bpf_ringbuf_discard(data, flags)
#define __ek_get_stackid(t, ctx, flags) bpf_get_stackid(ctx, &t, flags)

/* ---- probes declared by name ---- */
#define TRACEPOINT_PROBE(category, event)                                                         \
	SEC("tracepoint/" #category "/" #event)                                                   \
	int tracepoint__##category##__##event(struct tracepoint__##category##__##event *args)
#define RAW_TRACEPOINT_PROBE(event)                                                               \
	SEC("raw_tracepoint/" #event)                                                             \
	int raw_tracepoint__##event(struct bpf_raw_tracepoint_args *ctx)

/* fentry/fexit and BPF-LSM (typed arguments through libbpf's BPF_PROG) */
#define KFUNC_PROBE(event, args...) SEC("fentry/" #event) int BPF_PROG(kfunc__##event, ##args)
#define KRETFUNC_PROBE(event, args...) SEC("fexit/" #event) int BPF_PROG(kretfunc__##event, ##args)
#define LSM_PROBE(event, args...) SEC("lsm/" #event) int BPF_PROG(lsm__##event, ##args)

/* ---- BCC's helper spellings ---- */
/* BCC's bpf_trace_printk takes the format alone (libbpf's helper also takes its size) */
#define bpf_trace_printk(fmt, ...)                                                                \
	({                                                                                        \
		static const char __ek_fmt[] = fmt;                                               \
		((long (*)(const char *, __u32, ...))BPF_FUNC_trace_printk)(__ek_fmt, sizeof(__ek_fmt), \
									    ##__VA_ARGS__);               \
	})
/* bpf_probe_read/bpf_probe_read_str stay libbpf's: the compat helpers, which read user or kernel
 * memory (x86's address spaces do not overlap), as BCC's tools expect. Their _kernel forms are
 * the compat ones too on x86: BCC's tools read syscall tracepoints' user strings with them
 * (trace's `"%s", args->filename`), which the strict helper refuses, leaving them empty. */
#if defined(__TARGET_ARCH_x86)
#define bpf_probe_read_kernel bpf_probe_read
#define bpf_probe_read_kernel_str bpf_probe_read_str
#endif
#define lock_xadd(ptr, val) ((void)__sync_fetch_and_add(ptr, val))
#define bpf_get_current_task_btf_ptr() ((struct task_struct *)bpf_get_current_task())

#ifndef TASK_COMM_LEN
#define TASK_COMM_LEN 16
#endif
#ifndef PERF_MAX_STACK_DEPTH
#define PERF_MAX_STACK_DEPTH 127
#endif
#ifndef BPF_F_CURRENT_CPU
#define BPF_F_CURRENT_CPU 0xffffffffULL
#endif
#ifndef BPF_F_USER_STACK
#define BPF_F_USER_STACK (1ULL << 8)
#endif
#ifndef BPF_F_REUSE_STACKID
#define BPF_F_REUSE_STACKID (1ULL << 10)
#endif
#define __user
#include <linux/errno.h> /* ebpfkit.bcc's shim: the kernel's headers give every program the error numbers */
/* a function's sixth argument (x86-64 passes six in registers; libbpf before 1.2 names five) */
#if !defined(PT_REGS_PARM6) && defined(__TARGET_ARCH_x86)
#define PT_REGS_PARM6(x) (((const struct pt_regs *)(x))->r9)
#define PT_REGS_PARM6_CORE_SYSCALL(x) BPF_CORE_READ((const struct pt_regs *)(x), r9)
#elif !defined(PT_REGS_PARM6) && defined(__TARGET_ARCH_arm64)
#define PT_REGS_PARM6(x) (((const struct user_pt_regs *)(x))->regs[5])
#define PT_REGS_PARM6_CORE_SYSCALL(x) BPF_CORE_READ((const struct pt_regs *)(x), regs[5])
#endif
/* constants of the kernel's headers that BTF cannot carry (the shims under linux/, net/
 * are empty: one place for all of them) */
#ifndef S_IFMT
#define NAME_MAX 255
#define PATH_MAX 4096
#define FMODE_READ 0x1
#define FMODE_WRITE 0x2
#define FMODE_EXEC 0x20
#define S_IFMT 00170000
#define S_IFREG 0100000
#define S_IFDIR 0040000
#define S_ISREG(m) (((m) & S_IFMT) == S_IFREG)
#define S_ISDIR(m) (((m) & S_IFMT) == S_IFDIR)
#define S_IFLNK 0120000
#define S_IFSOCK 0140000
#define S_IFIFO 0010000
#define S_IFCHR 0020000
#define S_IFBLK 0060000
#define S_ISLNK(m) (((m) & S_IFMT) == S_IFLNK)
#define S_ISSOCK(m) (((m) & S_IFMT) == S_IFSOCK)
#define S_ISFIFO(m) (((m) & S_IFMT) == S_IFIFO)
#define S_ISCHR(m) (((m) & S_IFMT) == S_IFCHR)
#define S_ISBLK(m) (((m) & S_IFMT) == S_IFBLK)
#define FMODE_CREATED 0x100000 /* the open created the file (fs.h: 1 << 20 since 4.19) */
#define SCM_RIGHTS 0x01
/* a transfer's direction (linux/kernel.h): ttysnoop compares iov_iter's data_source with WRITE */
#ifndef READ
#define READ 0
#define WRITE 1
#endif
/* security_capable()'s options (linux/security.h, since 5.1, which every kernel with BTF is):
 * capable tests CAP_OPT_NONE to read its last argument as these bits, not as 4.x's audit flag */
#define CAP_OPT_NONE 0x0
#define CAP_OPT_NOAUDIT (1 << 1)
#define CAP_OPT_INSETID (1 << 2)
/* open(2)'s flags (asm-generic/fcntl.h: x86 and arm64 share them) */
#define O_ACCMODE 00000003
#define O_RDONLY 00000000
#define O_WRONLY 00000001
#define O_RDWR 00000002
#define O_CREAT 00000100
#define O_EXCL 00000200
#define O_NOCTTY 00000400
#define O_TRUNC 00001000
#define O_APPEND 00002000
#define O_NONBLOCK 00004000
#define O_DSYNC 00010000
#define FASYNC 00020000
#define O_DIRECT 00040000
#define O_LARGEFILE 00100000
#define O_DIRECTORY 00200000
#define O_NOFOLLOW 00400000
#define O_NOATIME 01000000
#define O_CLOEXEC 02000000
#define __O_SYNC 04000000
#define O_SYNC (__O_SYNC | O_DSYNC)
#define O_PATH 010000000
#define __O_TMPFILE 020000000
#define O_TMPFILE (__O_TMPFILE | O_DIRECTORY)
/* profile asks whether an address is the kernel's: on x86-64 and arm64 every kernel address
 * is above this and every user address below (the kernel's own PAGE_OFFSET moves at boot) */
#define PAGE_OFFSET 0xffff000000000000ULL
/* task states (BTF has no #defines) */
#define TASK_RUNNING 0x0000
#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
#endif
#ifndef IFNAMSIZ
#define IFNAMSIZ 16
#endif
#ifndef DNAME_INLINE_LEN
#define DNAME_INLINE_LEN 32 /* a dentry's inline name (64-bit); BCC's tools size name buffers with it */
#endif
#ifndef AF_INET
#define AF_INET 2
#define AF_INET6 10
#endif
#ifndef likely
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif
#ifndef min
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define min_t(type, a, b) min((type)(a), (type)(b))
#define max_t(type, a, b) max((type)(a), (type)(b))
#endif
#define div_u64(dividend, divisor) ((u64)(dividend) / (u32)(divisor))
#define NSEC_PER_USEC 1000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_SEC 1000000000ULL
#define USEC_PER_SEC 1000000ULL
/* the kernel's casts between socket structs (inline functions in its headers) */
#define tcp_sk(sk) ((struct tcp_sock *)(sk))
#define inet_sk(sk) ((struct inet_sock *)(sk))
#define inet_csk(sk) ((struct inet_connection_sock *)(sk))
/* the kernel's byte-order spellings BCC's tools use (vmlinux.h has no macros) */
#define ntohs(x) bpf_ntohs(x)
#define htons(x) bpf_htons(x)
#define ntohl(x) bpf_ntohl(x)
#define htonl(x) bpf_htonl(x)
#define be16_to_cpu(x) bpf_ntohs(x)
#define be32_to_cpu(x) bpf_ntohl(x)
#define be64_to_cpu(x) bpf_be64_to_cpu(x)
#define cpu_to_be16(x) bpf_htons(x)
#define cpu_to_be32(x) bpf_htonl(x)

/* ---- a tracepoint's __data_loc fields (args->data_loc_<field>: length << 16 | offset) ---- */
#define TP_DATA_LOC_READ_CONST(dst, field, length)                                                \
	bpf_probe_read_kernel((void *)(dst), (length), (char *)args + (args->data_loc_##field & 0xFFFF))
#define TP_DATA_LOC_READ(dst, field)                                                              \
	bpf_probe_read_kernel((void *)(dst), (args->data_loc_##field >> 16),                      \
			      (char *)args + (args->data_loc_##field & 0xFFFF))
#define TP_DATA_LOC_READ_STR(dst, field, length)                                                  \
	bpf_probe_read_kernel_str((void *)(dst), (length), (char *)args + (args->data_loc_##field & 0xFFFF))

/* ---- BCC's log2 slots: bpf_log2l(v) is 1 + floor(log2(v)) (1 for 0), the slot that
 * print_log2_hist() shows as 2^(n-1) -> 2^n - 1 ("0 -> 1" for slot 1) ---- */
static __always_inline unsigned int bpf_log2(unsigned int v)
{
	unsigned int bits = 0, step;

	step = (v >= (1U << 16)) << 4; v >>= step; bits += step;
	step = (v >= (1U << 8)) << 3; v >>= step; bits += step;
	step = (v >= (1U << 4)) << 2; v >>= step; bits += step;
	step = (v >= (1U << 2)) << 1; v >>= step; bits += step;
	return bits + (v >> 1);
}

static __always_inline unsigned int bpf_log2l(unsigned long v)
{
	unsigned int high = v >> 32;

	return high ? bpf_log2(high) + 33 : bpf_log2(v) + 1;
}

#define BPF_LICENSE(name) char _license[] SEC("license") = #name

/* ---- a kprobe on a syscall's function, run on the syscall's tracepoint instead (kernels
 * without kprobes: bpf.py compiles the program a second time with this defined and loads
 * only that function from it). Its arguments are the enter record's args[], its return
 * value the exit record's ret. Registers a kprobe would give are not there: read through
 * PT_REGS_PARMn, they lie past the record's end, which the kernel refuses at attach. ---- */
#ifdef __EK_SYSCALL_TRACEPOINT
#undef PT_REGS_SYSCALL_REGS
#define PT_REGS_SYSCALL_REGS(x) ((struct pt_regs *)(x))
#define __EK_SYSCALL_ARG(x, n) (((const struct trace_event_raw_sys_enter *)(x))->args[n])
#undef PT_REGS_PARM1_CORE_SYSCALL
#define PT_REGS_PARM1_CORE_SYSCALL(x) __EK_SYSCALL_ARG(x, 0)
#undef PT_REGS_PARM2_CORE_SYSCALL
#define PT_REGS_PARM2_CORE_SYSCALL(x) __EK_SYSCALL_ARG(x, 1)
#undef PT_REGS_PARM3_CORE_SYSCALL
#define PT_REGS_PARM3_CORE_SYSCALL(x) __EK_SYSCALL_ARG(x, 2)
#undef PT_REGS_PARM4_CORE_SYSCALL
#define PT_REGS_PARM4_CORE_SYSCALL(x) __EK_SYSCALL_ARG(x, 3)
#undef PT_REGS_PARM5_CORE_SYSCALL
#define PT_REGS_PARM5_CORE_SYSCALL(x) __EK_SYSCALL_ARG(x, 4)
#undef PT_REGS_PARM6_CORE_SYSCALL
#define PT_REGS_PARM6_CORE_SYSCALL(x) __EK_SYSCALL_ARG(x, 5)
#undef PT_REGS_RC
#define PT_REGS_RC(x) (((const struct trace_event_raw_sys_exit *)(x))->ret)
#endif
