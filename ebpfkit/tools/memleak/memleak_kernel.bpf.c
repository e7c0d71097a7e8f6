// SPDX-License-Identifier: GPL-2.0
/* Outstanding kernel allocations by kernel stack (memleak without -p/-c): the kmem and
 * percpu tracepoints give each allocation's address and size as it happens, and each free's
 * address; the records, maps and filters are user mode's (memleak_record.h).
 *
 * Raw tracepoints: the tracepoint's own arguments, nothing copied. Not tp_btf: the verifiers
 * of 6.1 and 6.12 refuse a tp_btf program reading a `const void *` argument (kmalloc's ptr:
 * "invalid bpf_context access"), which 6.18's allows. Where kernels differ (bcc#4384):
 *  - before 6.1, kmalloc_node and kmem_cache_alloc_node were tracepoints of their own, and
 *    kmem_cache_alloc passed (call_site, ptr, bytes_req, bytes_alloc, ...); from 6.1 the node
 *    variants are gone and kmem_cache_alloc passes the cache (call_site, ptr, s, ...), whose
 *    `size` is the bytes each object takes. The session loads the node programs only where
 *    the kernel has those tracepoints; trace_event_raw_kmem_cache_alloc exists from 6.1 on.
 *  - before 6.0, percpu_alloc_percpu had no call_site or bytes_alloc (the size asked, once
 *    per CPU); its ptr was the 7th argument, not the 8th.
 * 6.1 and 6.18 pass the same arguments; a struct page is keyed by its address.
 * Modelled on BCC's and libbpf-tools' memleak. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "ebpfkit.h"
#include "memleak.h"

#define MEMLEAK_STACK_FLAGS 0  /* record() takes kernel stacks */
#define MEMLEAK_ALLOCS_FLAGS 0 /* preallocated: growing, it would record its own allocations */
#include "memleak_record.h"

const volatile __u64 page_size = 4096; /* the session sets the machine's */

static __always_inline int allocated(void *ctx, __u64 addr, __u64 size)
{
	if (addr && size && !sampled_out(size))
		record(ctx, addr, size);
	return 0;
}

static __always_inline int freed(__u64 addr)
{
	if (addr)
		free_known(addr);
	return 0;
}

/* (call_site, ptr, bytes_req, bytes_alloc, gfp_flags[, node]): the same on every kernel */
SEC("raw_tp/kmalloc")
int memleak_kmalloc(struct bpf_raw_tracepoint_args *ctx)
{
	return allocated(ctx, ctx->args[1], ctx->args[3]);
}

SEC("raw_tp/kmalloc_node") /* before 6.1 */
int memleak_kmalloc_node(struct bpf_raw_tracepoint_args *ctx)
{
	return allocated(ctx, ctx->args[1], ctx->args[3]);
}

/* 6.1's own kmem_cache_alloc record, a local flavour: not in an older vmlinux.h */
struct trace_event_raw_kmem_cache_alloc___v61 {
	unsigned long call_site;
} __attribute__((preserve_access_index));

SEC("raw_tp/kmem_cache_alloc")
int memleak_kmem_cache_alloc(struct bpf_raw_tracepoint_args *ctx)
{
	struct kmem_cache *s;

	if (!bpf_core_type_exists(struct trace_event_raw_kmem_cache_alloc___v61))
		return allocated(ctx, ctx->args[1], ctx->args[3]); /* before 6.1: bytes_alloc */
	s = (struct kmem_cache *)ctx->args[2];
	return allocated(ctx, ctx->args[1], BPF_CORE_READ(s, size));
}

SEC("raw_tp/kmem_cache_alloc_node") /* before 6.1: as kmalloc_node */
int memleak_kmem_cache_alloc_node(struct bpf_raw_tracepoint_args *ctx)
{
	return allocated(ctx, ctx->args[1], ctx->args[3]);
}

SEC("raw_tp/kfree") /* (call_site, ptr) */
int memleak_kfree(struct bpf_raw_tracepoint_args *ctx)
{
	return freed(ctx->args[1]);
}

SEC("raw_tp/kmem_cache_free") /* (call_site, ptr[, s]) */
int memleak_kmem_cache_free(struct bpf_raw_tracepoint_args *ctx)
{
	return freed(ctx->args[1]);
}

SEC("raw_tp/mm_page_alloc") /* (page, order, gfp_flags, migratetype) */
int memleak_page_alloc(struct bpf_raw_tracepoint_args *ctx)
{
	return allocated(ctx, ctx->args[0], page_size << (__u32)ctx->args[1]);
}

SEC("raw_tp/mm_page_free") /* (page, order) */
int memleak_page_free(struct bpf_raw_tracepoint_args *ctx)
{
	return freed(ctx->args[0]);
}

/* 6.0's record, a local flavour: an older vmlinux.h has the struct without the field */
struct trace_event_raw_percpu_alloc_percpu___v60 {
	size_t bytes_alloc;
} __attribute__((preserve_access_index));

SEC("raw_tp/percpu_alloc_percpu")
int memleak_percpu_alloc(struct bpf_raw_tracepoint_args *ctx)
{
	/* 6.0+: (call_site, reserved, is_atomic, size, align, base_addr, off, ptr, bytes_alloc, gfp) */
	if (bpf_core_field_exists(struct trace_event_raw_percpu_alloc_percpu___v60, bytes_alloc))
		return allocated(ctx, ctx->args[7], ctx->args[8]);
	/* before: (reserved, is_atomic, size, align, base_addr, off, ptr) */
	return allocated(ctx, ctx->args[6], ctx->args[2]);
}

SEC("raw_tp/percpu_free_percpu") /* (base_addr, off, ptr) */
int memleak_percpu_free(struct bpf_raw_tracepoint_args *ctx)
{
	return freed(ctx->args[2]);
}

EK_EXPORT_TYPE(struct alloc_info);
EK_EXPORT_TYPE(struct combined_alloc);

char LICENSE[] SEC("license") = "GPL";
