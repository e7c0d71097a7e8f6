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
#include "ek_user_regs.h" /* no CO-RE for the registers: loads without the kernel's BTF */
#include "memleak.h"

#define MEMLEAK_STACK_FLAGS BPF_F_USER_STACK /* record() takes user stacks */
#include "memleak_record.h"

const volatile __u32 targ_tgid = 0;        /* the traced process (the uprobes are attached for it too) */

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

/* Only a thread inside an allocator call needs its entry (the others' are at depth 0), and LRU
 * keeps those: 8192 is plenty, and a preallocated map this size costs a start ~0.4 ms, not 3. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tid */
	__type(value, struct thread_state);
} threads SEC(".maps");

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
