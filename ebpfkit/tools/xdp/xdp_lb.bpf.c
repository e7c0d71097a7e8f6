// SPDX-License-Identifier: GPL-2.0
/* XDP L4 load balancer, direct server return: a packet for the VIP gets the MAC of a
 * backend chosen by Maglev hashing of its 5-tuple and leaves at L2 (XDP_TX back out of the
 * interface it came in on, or XDP_REDIRECT through a devmap to another one). Nothing above
 * L2 changes: backends hold the VIP on a loopback address and answer the client directly.
 *
 * A flow cache (LRU) keeps established flows on their backend when the table changes; an
 * entry whose backend was removed (slot inactive, or reused: gen differs) is re-hashed.
 * The Maglev table is double-buffered like the filter's rules: user space writes the
 * inactive copy, flips `lb_active`, and waits out running programs (`barrier`).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "xdp_parse.h"
#include "xdp_barrier.h"
#include "ebpfkit.h"
#include "xdp_lb.h"

EK_EXPORT_TYPE(enum lb_stat); /* the lb_totals slots, read by xdp/lb.py from BTF */

const volatile __u8 vip_addr[16] = {};
const volatile __u8 vip_family = 4;
const volatile __u8 vip_proto = EK_IPPROTO_TCP;
const volatile __u16 vip_port = 0;     /* host order */
const volatile __u32 table_size = 65537; /* = max_entries of table_a/table_b, a prime */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct lb_backend);
} backends SEC(".maps");

#define LB_TABLE(name)                                                               \
	struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                    \
		__uint(max_entries, 65537);                                          \
		__type(key, __u32);                                                  \
		__type(value, __u32);                                                \
	} name SEC(".maps")

LB_TABLE(table_a);
LB_TABLE(table_b);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} lb_active SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct lb_flow_key);
	__type(value, struct lb_flow_val);
} flows SEC(".maps");

/* backend slot -> egress ifindex, for backends behind another interface */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct lb_counter);
} backend_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_MAX);
	__type(key, __u32);
	__type(value, struct lb_counter);
} lb_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_conf);
} lb_conf SEC(".maps");

static __always_inline void count(void *map, __u32 slot, __u64 bytes)
{
	struct lb_counter *c = bpf_map_lookup_elem(map, &slot);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

static __always_inline int is_vip(const struct ek_pkt *p)
{
	int i;

	if (p->family != vip_family || p->proto != vip_proto || p->fragment || !p->has_ports)
		return 0;
	if (vip_port && p->dport != vip_port)
		return 0;
#pragma unroll
	for (i = 0; i < 16; i++)
		if (p->dst[i] != vip_addr[i])
			return 0;
	return 1;
}

static __always_inline struct lb_backend *live_backend(__u32 slot, __u32 gen)
{
	struct lb_backend *b = bpf_map_lookup_elem(&backends, &slot);

	return b && b->active && (!gen || b->gen == gen) ? b : 0;
}

SEC("xdp")
int xdp_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u64 len = end - data;
	struct lb_flow_key key = {};
	struct lb_flow_val *cached, val;
	struct lb_backend *b = 0;
	struct ek_pkt p = {};
	struct ethhdr *eth;
	__u32 zero = 0, *set, *slot, idx;
	int res;

	res = ek_parse(ctx, &p);
	if (res == EK_PARSE_MALFORMED) {
		count(&lb_totals, LB_MALFORMED, len);
		return XDP_PASS;
	}
	if (res != EK_PARSE_OK || !is_vip(&p)) {
		count(&lb_totals, LB_PASSED, len);
		return XDP_PASS;
	}

	__builtin_memcpy(key.src, p.src, 16);
	__builtin_memcpy(key.dst, p.dst, 16);
	key.sport = p.sport;
	key.dport = p.dport;
	key.proto = p.proto;
	key.family = p.family;

	cached = bpf_map_lookup_elem(&flows, &key);
	if (cached) {
		val = *cached;
		b = live_backend(val.backend, val.gen);
	}
	if (b) {
		count(&lb_totals, LB_FLOW_HIT, len);
	} else {
		set = bpf_map_lookup_elem(&lb_active, &zero);
		idx = lb_flow_hash(&key) % table_size;
		slot = set && *set ? bpf_map_lookup_elem(&table_b, &idx) :
				     bpf_map_lookup_elem(&table_a, &idx);
		if (slot)
			b = live_backend(*slot, 0);
		if (!b) {
			count(&lb_totals, LB_NO_BACKEND, len);
			return XDP_DROP;
		}
		val.backend = *slot;
		val.gen = b->gen;
		bpf_map_update_elem(&flows, &key, &val, BPF_ANY);
		count(&lb_totals, LB_FLOW_MISS, len);
	}

	eth = data;
	if ((void *)(eth + 1) > end) /* parsed above; the verifier wants to see it again */
		return XDP_PASS;
	__builtin_memcpy(eth->h_dest, b->dmac, 6);
	__builtin_memcpy(eth->h_source, b->smac, 6);
	count(&backend_stats, val.backend, len);
	count(&lb_totals, LB_FORWARDED, len);
	if (b->ifindex == ctx->ingress_ifindex) {
		count(&lb_totals, LB_TX, len);
		return XDP_TX;
	}
	count(&lb_totals, LB_REDIRECT, len);
	return bpf_redirect_map(&tx_ports, val.backend, XDP_DROP);
}

char LICENSE[] SEC("license") = "GPL";
