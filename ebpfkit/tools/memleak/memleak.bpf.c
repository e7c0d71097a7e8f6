// SPDX-License-Identifier: GPL-2.0
/* Outstanding user allocations by stack. Uprobes on the allocator's entry points stash the
 * size per thread; the uretprobe records the returned address with its size, time and user
 * stack in `allocs`; a free finds it there and drops it. With --combined-only the per-stack
 * totals are kept here too (`combined`, atomic adds, exact under many threads), so user
 * space reads one small map instead of every allocation.
 *
 * Allocator functions call each other (operator new calls malloc, malloc may call mmap,
 * aliases share an address): a per-thread depth makes the outermost call the one recorded,
 * and a free of the address an operator delete just freed is its own nested free.
 * Modelled on BCC's and libbpf-tools' memleak. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ebpfkit.h"
#include "memleak.h"

const volatile __u32 targ_tgid = 0;        /* the traced process (the uprobes are attached for it too) */
const volatile __u64 min_size = 0;         /* -z */
const volatile __u64 max_size = (__u64)-1; /* -Z */
const volatile __u32 sample_every = 1;     /* -s: record one allocation in N */
const volatile bool combined_only = false;

enum alloc_kind { KIND_PLAIN, KIND_REALLOC, KIND_POSIX_MEMALIGN, KIND_MMAP };

/* A thread's allocator call in progress (kept while the thread lives: one lookup a call). */
struct thread_state {
	__u64 size;
	__u64 ptr;      /* realloc's old pointer, posix_memalign's memptr */
	__u64 freeing;  /* the address an operator delete freed: free() of it is nested */
	__u32 depth;    /* allocator calls in progress on this thread */
	__u8 kind;
	__u8 skip;      /* filtered out (-z/-Z/-s): not recorded */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, struct thread_state);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144); /* the session sets max_allocations */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64); /* address */
	__type(value, struct alloc_info);
} allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __s32); /* stack id (negative: none recorded) */
	__type(value, struct combined_alloc);
} combined SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384); /* the session sets stack_storage_size */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MEMLEAK_MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MEMLEAK_NR_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &which);

	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline bool traced(void)
{
	return !targ_tgid || (bpf_get_current_pid_tgid() >> 32) == targ_tgid;
}

static __always_inline struct thread_state *thread(bool create)
{
	static const struct thread_state fresh;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct thread_state *st = bpf_map_lookup_elem(&threads, &tid);

	if (st || !create)
		return st;
	bpf_map_update_elem(&threads, &tid, &fresh, BPF_NOEXIST);
	st = bpf_map_lookup_elem(&threads, &tid);
	if (!st)
		count(MEMLEAK_THREADS_FULL);
	return st;
}

static __always_inline bool sampled_out(__u64 size)
{
	if (size < min_size || size > max_size)
		return true;
	return sample_every > 1 && bpf_get_prandom_u32() % sample_every;
}

static __always_inline int alloc_enter(__u64 size, __u64 ptr, enum alloc_kind kind)
{
	struct thread_state *st;

	if (!traced())
		return 0;
	st = thread(true);
	if (!st || st->depth++) /* nested in another allocator call: the outer one records */
		return 0;
	st->size = size;
	st->ptr = ptr;
	st->kind = kind;
	st->freeing = 0;
	st->skip = sampled_out(size);
	return 0;
}

/* Per-stack totals: created once, then only atomic adds (negative ones on free). */
static __always_inline void add_combined(__s32 stack_id, __s64 bytes, __s64 n)
{
	struct combined_alloc *c, zero = {};

	c = bpf_map_lookup_elem(&combined, &stack_id);
	if (!c) {
		bpf_map_update_elem(&combined, &stack_id, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&combined, &stack_id);
		if (!c)
			return;
	}
	__sync_fetch_and_add(&c->bytes, bytes);
	__sync_fetch_and_add(&c->count, n);
}

static __always_inline void record(void *ctx, __u64 addr, __u64 size)
{
	struct alloc_info info = {.size = size, .timestamp_ns = bpf_ktime_get_ns()};

	info.stack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (info.stack_id < 0)
		count(MEMLEAK_STACK_MISSED);
	if (bpf_map_update_elem(&allocs, &addr, &info, BPF_ANY)) {
		count(MEMLEAK_ALLOCS_FULL);
		return;
	}
	count(MEMLEAK_ALLOCS);
	if (combined_only)
		add_combined(info.stack_id, size, 1);
}

/* Drop a recorded allocation; false if `addr` was not recorded. */
static __always_inline bool forget(__u64 addr)
{
	struct alloc_info *info = bpf_map_lookup_elem(&allocs, &addr);
	__u64 size;
	__s32 stack_id;

	if (!info)
		return false;
	size = info->size;
	stack_id = info->stack_id;
	if (bpf_map_delete_elem(&allocs, &addr)) /* another thread's free of it won */
		return true;
	count(MEMLEAK_FREES);
	if (combined_only)
		add_combined(stack_id, -(__s64)size, -1);
	return true;
}

static __always_inline void free_known(__u64 addr)
{
	if (!forget(addr))
		count(MEMLEAK_UNKNOWN_FREES);
}

SEC("uretprobe")
int BPF_KRETPROBE(alloc_return, void *ret)
{
	struct thread_state *st;
	__u64 addr = (__u64)ret, size;
	void *out;

	if (!traced())
		return 0;
	st = thread(false);
	if (!st || !st->depth || --st->depth) /* not ours, or an inner call returning */
		return 0;
	size = st->size;
	switch (st->kind) {
	case KIND_REALLOC: /* the old block is gone once a new one is returned (or size 0) */
		if (st->ptr && (addr || !size))
			free_known(st->ptr);
		break;
	case KIND_POSIX_MEMALIGN: /* returns 0 and stores the address through memptr */
		out = (void *)st->ptr;
		if (addr || bpf_probe_read_user(&addr, sizeof(addr), out))
			addr = 0;
		break;
	case KIND_MMAP:
		if (addr == (__u64)-1) /* MAP_FAILED */
			addr = 0;
		break;
	}
	if (addr && size && !st->skip)
		record(ctx, addr, size);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(malloc_enter, __u64 size) /* also valloc, pvalloc, operator new */
{
	return alloc_enter(size, 0, KIND_PLAIN);
}

SEC("uprobe")
int BPF_KPROBE(memalign_enter, __u64 alignment, __u64 size) /* also aligned_alloc */
{
	return alloc_enter(size, 0, KIND_PLAIN);
}

SEC("uprobe")
int BPF_KPROBE(calloc_enter, __u64 nmemb, __u64 size)
{
	return alloc_enter(nmemb * size, 0, KIND_PLAIN);
}

SEC("uprobe")
int BPF_KPROBE(realloc_enter, void *ptr, __u64 size)
{
	return alloc_enter(size, (__u64)ptr, KIND_REALLOC);
}

SEC("uprobe")
int BPF_KPROBE(posix_memalign_enter, void **memptr, __u64 alignment, __u64 size)
{
	return alloc_enter(size, (__u64)memptr, KIND_POSIX_MEMALIGN);
}

SEC("uprobe")
int BPF_KPROBE(mmap_enter, void *addr, __u64 length)
{
	return alloc_enter(length, 0, KIND_MMAP);
}

SEC("uprobe")
int BPF_KPROBE(free_enter, void *ptr)
{
	struct thread_state *st;
	__u64 addr = (__u64)ptr;

	if (!addr || !traced())
		return 0;
	st = thread(false);
	if (st && st->freeing == addr) { /* operator delete's own free() of it */
		st->freeing = 0;
		return 0;
	}
	if (st && st->depth) /* inside an allocator call (realloc's own free): the outer one counts */
		return 0;
	free_known(addr);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(delete_enter, void *ptr) /* operator delete/delete[] and their variants */
{
	struct thread_state *st;
	__u64 addr = (__u64)ptr;

	if (!addr || !traced())
		return 0;
	st = thread(true);
	if (st && st->freeing == addr) /* a delete variant calling another one */
		return 0;
	if (st)
		st->freeing = addr;
	free_known(addr);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(munmap_enter, void *addr)
{
	/* Not counted when unknown: the allocator's own munmaps and unmapped libraries are. */
	if (traced())
		forget((__u64)addr);
	return 0;
}

EK_EXPORT_TYPE(struct alloc_info);
EK_EXPORT_TYPE(struct combined_alloc);

char LICENSE[] SEC("license") = "GPL";
