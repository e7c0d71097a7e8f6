// SPDX-License-Identifier: GPL-2.0
/* tc redirect: a node's fast path. Attached at the ingress of each endpoint's node-side veth
 * and of the uplink, it hands an IPv4 packet for an endpoint straight into that endpoint's
 * namespace (bpf_redirect_peer: ingress to ingress, no backlog, no node stack), and one for
 * elsewhere straight out of the device the node's FIB names (bpf_redirect with the next hop's
 * MAC, or bpf_redirect_neigh where the kernel must resolve it first). The node's stack and
 * netfilter never see these packets; everything else goes on to the stack untouched. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ebpfkit.h"
#include "tc.h"

#define ETH_P_IP 0x0800
#define AF_INET 2
#define TC_ACT_OK 0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IP_OFFSET_MASK 0x3FFF /* a fragment's offset and "more fragments": only a first, whole packet has ports */

const volatile bool targ_route = true; /* also send what is for elsewhere out by the FIB */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __be32);
	__type(value, struct tc_endpoint);
} endpoints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct tc_steer_key);
	__type(value, struct tc_endpoint);
} steering SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TC_VERDICTS);
	__type(key, __u32);
	__type(value, struct tc_counter);
} counters SEC(".maps");

static __always_inline long counted(__u32 verdict, struct __sk_buff *skb, long action)
{
	struct tc_counter *c = bpf_map_lookup_elem(&counters, &verdict);

	if (c) {
		c->packets++;
		c->bytes += skb->len;
	}
	return action;
}

/* as the kernel's ip_decrease_ttl: the checksum follows the TTL down by one */
static __always_inline void ttl_decrement(struct iphdr *ip)
{
	__u32 check = ip->check;

	check += bpf_htons(0x0100);
	ip->check = (__sum16)(check + (check >= 0xFFFF));
	ip->ttl--;
}

/* The endpoint or device the packet's destination port is steered to, or NULL. */
static __always_inline struct tc_endpoint *steered(struct iphdr *ip, void *data_end)
{
	struct tc_steer_key key = {.protocol = ip->protocol};
	__be16 *ports = (void *)ip + ip->ihl * 4;

	if ((ip->protocol != IPPROTO_TCP && ip->protocol != IPPROTO_UDP) || ip->ihl < 5 ||
	    (ip->frag_off & bpf_htons(IP_OFFSET_MASK)) || (void *)(ports + 2) > data_end)
		return NULL;
	key.port = ports[1];
	return bpf_map_lookup_elem(&steering, &key);
}

SEC("tc")
int tc_redirect(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct bpf_fib_lookup fib = {};
	struct tc_endpoint *to;
	long found;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ttl <= 1)
		return counted(TC_PASSED, skb, TC_ACT_OK); /* an expiring TTL: the stack says so (ICMP) */
	to = steered(ip, data_end);
	if (to && to->ifindex != skb->ifindex) {
		__builtin_memcpy(eth->h_dest, to->mac, sizeof(eth->h_dest));
		if (to->to_ingress) /* a node device's: the node's stack takes it as arrived there */
			return counted(TC_STEERED, skb, bpf_redirect(to->ifindex, BPF_F_INGRESS));
		ttl_decrement(ip);
		__builtin_memcpy(eth->h_source, to->node_mac, sizeof(eth->h_source));
		return counted(TC_STEERED, skb, bpf_redirect_peer(to->ifindex, 0));
	}
	to = bpf_map_lookup_elem(&endpoints, &ip->daddr);
	if (to) {
		if (to->ifindex == skb->ifindex) /* back where it came from: the stack's business */
			return counted(TC_PASSED, skb, TC_ACT_OK);
		ttl_decrement(ip);
		__builtin_memcpy(eth->h_dest, to->mac, sizeof(eth->h_dest));
		__builtin_memcpy(eth->h_source, to->node_mac, sizeof(eth->h_source));
		return counted(TC_TO_ENDPOINT, skb, bpf_redirect_peer(to->ifindex, 0));
	}
	if (!targ_route)
		return counted(TC_PASSED, skb, TC_ACT_OK);
	fib.family = AF_INET;
	fib.tos = ip->tos;
	fib.l4_protocol = ip->protocol;
	/* tot_len left 0: the kernel checks the skb against the device's MTU itself, as a GSO
	 * packet (a whole TCP window at once) must be checked, segment by segment */
	fib.ipv4_src = ip->saddr;
	fib.ipv4_dst = ip->daddr;
	fib.ifindex = skb->ingress_ifindex;
	found = bpf_fib_lookup(skb, &fib, sizeof(fib), 0);
	if (found == BPF_FIB_LKUP_RET_SUCCESS) {
		ttl_decrement(ip);
		__builtin_memcpy(eth->h_dest, fib.dmac, sizeof(eth->h_dest));
		__builtin_memcpy(eth->h_source, fib.smac, sizeof(eth->h_source));
		return counted(TC_ROUTED, skb, bpf_redirect(fib.ifindex, 0));
	}
	if (found == BPF_FIB_LKUP_RET_NO_NEIGH) {
		struct bpf_redir_neigh next_hop = {.nh_family = AF_INET, .ipv4_nh = fib.ipv4_dst};

		ttl_decrement(ip);
		return counted(TC_TO_NEIGH, skb, bpf_redirect_neigh(fib.ifindex, &next_hop, sizeof(next_hop), 0));
	}
	return counted(TC_PASSED, skb, TC_ACT_OK); /* for this node, blackholed, unreachable, ... */
}

char LICENSE[] SEC("license") = "GPL";
