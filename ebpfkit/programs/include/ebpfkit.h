/* Helpers shared by ebpfkit's BPF programs; users' programs may include it too:
 *   #include "vmlinux.h"
 *   #include <bpf/bpf_helpers.h>
 *   #include "ebpfkit.h"
 */
#ifndef __EBPFKIT_H
#define __EBPFKIT_H

/* BPF_MAP_TYPE_TASK_STORAGE (5.11) by value, which is ABI: an older kernel's vmlinux.h has no
 * such name, and a program that leaves the map out there must still compile against it */
#define EK_MAP_TYPE_TASK_STORAGE 29

/* A ring buffer whose failed reservations are counted, so user space can report every
 * lost record: EK_RINGBUF(events, 256 * 1024) defines the map `events` and a per-CPU
 * counter `events_lost` that ebpfkit's RingBuffer reader adds to its loss count. */
#define EK_RINGBUF(name, bytes)                                                  \
	struct {                                                                 \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                              \
		__uint(max_entries, bytes);                                      \
	} name SEC(".maps");                                                     \
	struct {                                                                 \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                         \
		__uint(max_entries, 1);                                          \
		__type(key, __u32);                                              \
		__type(value, __u64);                                            \
	} name##_lost SEC(".maps")

static __always_inline void ek_count_lost(void *lost_map)
{
	__u32 zero = 0;
	__u64 *lost = bpf_map_lookup_elem(lost_map, &zero);

	if (lost)
		(*lost)++; /* per-CPU slot: no atomic needed */
}

/* bpf_ringbuf_reserve that counts a failure in name_lost. */
#define ek_ringbuf_reserve(name, size)                                           \
	({                                                                       \
		void *__rec = bpf_ringbuf_reserve(&name, size, 0);               \
		if (!__rec)                                                      \
			ek_count_lost(&name##_lost);                             \
		__rec;                                                           \
	})

/* bpf_ringbuf_output that counts a failure in name_lost. */
#define ek_ringbuf_output(name, data, size)                                      \
	({                                                                       \
		long __err = bpf_ringbuf_output(&name, data, size, 0);           \
		if (__err)                                                       \
			ek_count_lost(&name##_lost);                             \
		__err;                                                           \
	})

/* A BPF_MAP_TYPE_STACK_TRACE map for bpf_get_stackid (127 frames, the kernel's most), read
 * by ebpfkit's StackTraces: EK_STACK_MAP(stacks, 4096); */
#define EK_STACK_MAP(name, entries)                                              \
	struct {                                                                 \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                          \
		__uint(max_entries, entries);                                    \
		__uint(key_size, sizeof(__u32));                                 \
		__uint(value_size, 127 * sizeof(__u64));                         \
	} name SEC(".maps")

/* Keep a type in the object's BTF so user space can decode records of it: clang drops a
 * struct that only local variables use. EK_EXPORT_TYPE(struct event); at file scope. */
#define __EK_CAT2(a, b) a##b
#define __EK_CAT(a, b) __EK_CAT2(a, b)
#define EK_EXPORT_TYPE(type) \
	const type *__EK_CAT(__ek_export_, __LINE__) __attribute__((unused))

/* A field of a kernel struct: read directly where the program's arguments are typed (tp_btf,
 * fentry: the verifier knows the pointer, and a load costs a load), else through
 * bpf_probe_read_kernel (raw_tp), a helper call each. ``typed`` must be a constant; the
 * includer includes bpf/bpf_core_read.h. */
#define EK_FIELD(typed, p, field) ((typed) ? (p)->field : BPF_CORE_READ(p, field))

/* Histogram buckets: slot i counts values in [2^i, 2^(i+1)), slot 0 holds 0 and 1. */
#define EK_MAX_SLOTS 32

static __always_inline __u32 ek_log2(__u32 v)
{
	__u32 shift, r;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 ek_log2l(__u64 v)
{
	__u32 hi = v >> 32;

	return hi ? ek_log2(hi) + 32 : ek_log2(v);
}

/* v as a slot of a max_slots array, clamped to max_slots - 1. Clang would clamp a
 * zero-extended copy and index with the original, which older verifiers (6.1) see as
 * unbounded: the empty asm hides that the value fits 32 bits, so the register compared is
 * the one used. */
static __always_inline __u64 ek_clamp_slot(__u64 slot, __u32 max_slots)
{
	asm volatile("" : "+r"(slot));
	if (slot >= max_slots)
		slot = max_slots - 1;
	return slot;
}

/* The log2 histogram slot of v, clamped to max_slots - 1. */
static __always_inline __u64 ek_hist_slot(__u64 v, __u32 max_slots)
{
	return ek_clamp_slot(ek_log2l(v), max_slots);
}

/* The value at key, created from init first if there is none (another CPU may create it
 * at the same time: BPF_NOEXIST keeps whichever came first). NULL only if the map is full. */
static __always_inline void *ek_map_lookup_or_init(void *map, const void *key, const void *init)
{
	void *value = bpf_map_lookup_elem(map, key);

	if (value)
		return value;
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

#endif /* __EBPFKIT_H */
