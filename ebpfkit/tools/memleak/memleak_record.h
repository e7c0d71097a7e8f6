/* What memleak's two programs share: the outstanding allocations by address, their stacks,
 * the per-stack totals of --combined-only, the counters, the -z/-Z/-s filters, and recording
 * and forgetting one allocation. memleak.bpf.c (user mode: uprobes) and memleak_kernel.bpf.c
 * (kernel mode: kmem/percpu tracepoints) each include it once, after defining
 * MEMLEAK_STACK_FLAGS: the bpf_get_stackid flags of the stacks they record. */
#ifndef __MEMLEAK_RECORD_H
#define __MEMLEAK_RECORD_H

#ifndef MEMLEAK_STACK_FLAGS
#error "define MEMLEAK_STACK_FLAGS (BPF_F_USER_STACK, or 0 for kernel stacks) before including memleak_record.h"
#endif
/* The allocations map's flags: user mode lets it grow as needed (BPF_F_NO_PREALLOC); kernel
 * mode preallocates it (0), or each element it took would be a kernel allocation it records. */
#ifndef MEMLEAK_ALLOCS_FLAGS
#define MEMLEAK_ALLOCS_FLAGS BPF_F_NO_PREALLOC
#endif

const volatile __u64 min_size = 0;         /* -z */
const volatile __u64 max_size = (__u64)-1; /* -Z */
const volatile __u32 sample_every = 1;     /* -s: record one allocation in N */
const volatile bool combined_only = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144); /* the session sets max_allocations */
	__uint(map_flags, MEMLEAK_ALLOCS_FLAGS);
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

/* A stack map keeps one stack per bucket (its hash's low bits): a stack whose bucket already
 * holds another one is refused (-EEXIST) for as long as that one stays, however empty the
 * map. Such stacks are kept here instead, in buckets of their own, and their ids are offset
 * by MEMLEAK_SPILL_BASE. The session sizes it (a quarter of `stacks`). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 4096);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MEMLEAK_MAX_STACK_DEPTH * sizeof(__u64));
} spilled_stacks SEC(".maps");

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

static __always_inline bool sampled_out(__u64 size)
{
	if (size < min_size || size > max_size)
		return true;
	return sample_every > 1 && bpf_get_prandom_u32() % sample_every;
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

/* The stack's id: in `stacks`, or in `spilled_stacks` (offset) where its bucket was taken. */
static __always_inline __s32 stack_id_of(void *ctx)
{
	__s32 id = bpf_get_stackid(ctx, &stacks, MEMLEAK_STACK_FLAGS);

	if (id != -MEMLEAK_EEXIST)
		return id;
	id = bpf_get_stackid(ctx, &spilled_stacks, MEMLEAK_STACK_FLAGS);
	return id < 0 ? id : id + MEMLEAK_SPILL_BASE;
}

static __always_inline void record(void *ctx, __u64 addr, __u64 size)
{
	struct alloc_info info = {.size = size, .timestamp_ns = bpf_ktime_get_ns()};

	info.stack_id = stack_id_of(ctx);
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

#endif
