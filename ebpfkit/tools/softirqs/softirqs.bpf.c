// SPDX-License-Identifier: GPL-2.0
/* Softirqs: how often each vector's handler ran and for how long (total, or a log2
 * histogram), per vector and optionally per CPU. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ebpfkit.h"
#include "ek_handler_stats.h"

struct softirq_key {
	__u32 vec; /* HI_SOFTIRQ=0, TIMER_SOFTIRQ, NET_TX_SOFTIRQ, ... (the kernel's enum) */
	__u32 cpu; /* 0 unless per CPU */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct softirq_key);
	__type(value, struct ek_handler_stat);
} stats SEC(".maps");

static __always_inline struct ek_handler_stat *stat_of(unsigned int vec)
{
	struct softirq_key key = {.vec = vec, .cpu = ek_handler_cpu()};

	return ek_handler_stat_of(&stats, &key);
}

static __always_inline int vector_entry(unsigned int vec)
{
	if (targ_count)
		ek_handler_count(stat_of(vec));
	else
		ek_handler_started();
	return 0;
}

static __always_inline int vector_exit(unsigned int vec)
{
	__u64 delta;

	if (!targ_count && (delta = ek_handler_elapsed()) != EK_NOT_TIMED)
		ek_handler_account(stat_of(vec), delta);
	return 0;
}

/* Each hook twice: BTF-typed tracepoints where the kernel has BTF of its own, raw
 * tracepoints (the same argument, untyped) elsewhere. */
#define SOFTIRQS_HOOKS(kind, suffix)                                                              \
	SEC(#kind "/softirq_entry")                                                               \
	int BPF_PROG(softirq_entry##suffix, unsigned int vec_nr)                                  \
	{                                                                                         \
		return vector_entry(vec_nr);                                                      \
	}                                                                                         \
	SEC(#kind "/softirq_exit")                                                                \
	int BPF_PROG(softirq_exit##suffix, unsigned int vec_nr)                                   \
	{                                                                                         \
		return vector_exit(vec_nr);                                                       \
	}

SOFTIRQS_HOOKS(tp_btf, )
SOFTIRQS_HOOKS(raw_tp, _raw)

char LICENSE[] SEC("license") = "GPL";
