// SPDX-License-Identifier: GPL-2.0
/* tc ratelimit: EDT (earliest departure time) pacing at a device's egress, as Cilium's
 * bandwidth manager. Each packet a rule matches (by its socket's cgroup, else its IPv4
 * source address) is stamped with the time it may leave: the rule's previous departure plus
 * the packet's length at the rule's rate. The fq qdisc on the device holds it until then,
 * lock-free per flow, where HTB would queue it behind a lock; a packet that could not leave
 * within the horizon is dropped instead (TCP then backs off). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ebpfkit.h"
#include "tc.h"

#define ETH_P_IP 0x0800
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define NSEC_PER_SEC 1000000000ULL
#define ETH_HLEN 14

const volatile bool targ_cgroups = false; /* some rule matches a cgroup */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct tc_rate_key);
	__type(value, struct tc_rate);
} rates SEC(".maps");

static __always_inline struct tc_rate *rule_of(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct tc_rate_key key = {};
	struct tc_rate *rule;

	if (targ_cgroups) {
		key.match = TC_MATCH_CGROUP;
		key.value = bpf_skb_cgroup_id(skb);
		rule = bpf_map_lookup_elem(&rates, &key);
		if (rule)
			return rule;
	}
	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return NULL;
	key.match = TC_MATCH_ADDRESS;
	key.value = ip->saddr;
	return bpf_map_lookup_elem(&rates, &key);
}

SEC("tc")
int tc_ratelimit(struct __sk_buff *skb)
{
	struct tc_rate *rule = rule_of(skb);
	__u64 now, leave, delay, next;

	if (!rule || !rule->bytes_per_sec)
		return TC_ACT_OK;
	now = bpf_ktime_get_ns();
	leave = skb->tstamp > now ? skb->tstamp : now; /* a departure someone set before, or now */
	/* IP bytes: the rate a user means is what the network carries, not the Ethernet header */
	delay = (__u64)(skb->len > ETH_HLEN ? skb->len - ETH_HLEN : skb->len) * NSEC_PER_SEC / rule->bytes_per_sec;
	next = rule->next_ns;
	if (next <= leave) { /* the rule is idle enough: this one leaves when it would anyway */
		rule->next_ns = leave + delay;
		__sync_fetch_and_add(&rule->passed, 1);
		__sync_fetch_and_add(&rule->bytes, skb->len - ETH_HLEN);
		return TC_ACT_OK;
	}
	if (next - now > rule->horizon_ns) {
		__sync_fetch_and_add(&rule->dropped, 1);
		return TC_ACT_SHOT;
	}
	rule->next_ns = next + delay;
	skb->tstamp = next;
	__sync_fetch_and_add(&rule->delayed, 1);
	__sync_fetch_and_add(&rule->bytes, skb->len - ETH_HLEN);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
