// SPDX-License-Identifier: GPL-2.0
/* Socket-level acceleration between two local TCP sockets.
 *
 * sockops stores every established socket of the cgroup in a SOCKHASH keyed by its own
 * 4-tuple and family; sk_msg looks up the peer (the same tuple seen from the other side)
 * and hands each sendmsg straight to the peer's ingress queue, skipping TCP/IP below.
 * When the peer is not in the map the message takes the normal TCP path.
 *
 * sockmap_pass is a pass-through sk_skb verdict: on kernels with commit 929e30f93125
 * a socket in a sockhash without a verdict program reports FIONREAD 0 and misses epoll
 * wake-ups for data arriving through TCP; with a verdict attached that data goes through
 * the psock ingress queue, which FIONREAD and poll see. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "sockmap.h"

#define AF_INET 2
#define AF_INET6 10

const volatile bool targ_ipv6 = true;          /* also accelerate pure IPv6 connections */
const volatile bool targ_filter_ports = false; /* only connections with a port in `ports` */

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65535);
	__type(key, struct sockmap_key);
	__type(value, __u64);
} sock_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u8);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sockmap_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sockmap_info);
} info SEC(".maps");

static __always_inline struct sockmap_stats *my_stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero); /* this CPU's: no atomics needed */
}

static __always_inline void bump(__u32 slot, __u64 by)
{
	struct sockmap_stats *s = my_stats();

	if (s && slot < SOCKMAP_NR_STATS)
		s->count[slot] += by;
}

static __always_inline bool v4_mapped(__u32 a0, __u32 a1, __u32 a2)
{
	return a0 == 0 && a1 == 0 && a2 == bpf_htonl(0xffff);
}

/* Fill `key` with the socket's own tuple from a bpf_sock_ops or sk_msg_md context (both
 * name the fields alike). local_port is host order there, remote_port network order in
 * a 32-bit field: both end up host order here. Evaluates to false for what we skip. */
#define OWN_KEY(ctx, key)                                                              \
	({                                                                             \
		bool __ok = true;                                                      \
		__u32 __fam = (ctx)->family;                                           \
		if (__fam == AF_INET) {                                                \
			(key)->family = AF_INET;                                       \
			(key)->local_addr[0] = (ctx)->local_ip4;                       \
			(key)->remote_addr[0] = (ctx)->remote_ip4;                     \
		} else if (__fam == AF_INET6) {                                        \
			__u32 l0 = (ctx)->local_ip6[0], l1 = (ctx)->local_ip6[1];      \
			__u32 l2 = (ctx)->local_ip6[2], l3 = (ctx)->local_ip6[3];      \
			__u32 r0 = (ctx)->remote_ip6[0], r1 = (ctx)->remote_ip6[1];    \
			__u32 r2 = (ctx)->remote_ip6[2], r3 = (ctx)->remote_ip6[3];    \
			if (v4_mapped(l0, l1, l2) && v4_mapped(r0, r1, r2)) {          \
				/* an IPv4 client of a server on "::": key it as IPv4 */ \
				(key)->family = AF_INET;                               \
				(key)->local_addr[0] = l3;                             \
				(key)->remote_addr[0] = r3;                            \
			} else if (targ_ipv6) {                                        \
				(key)->family = AF_INET6;                              \
				(key)->local_addr[0] = l0;                             \
				(key)->local_addr[1] = l1;                             \
				(key)->local_addr[2] = l2;                             \
				(key)->local_addr[3] = l3;                             \
				(key)->remote_addr[0] = r0;                            \
				(key)->remote_addr[1] = r1;                            \
				(key)->remote_addr[2] = r2;                            \
				(key)->remote_addr[3] = r3;                            \
			} else {                                                       \
				__ok = false;                                          \
			}                                                              \
		} else {                                                               \
			__ok = false;                                                  \
		}                                                                      \
		(key)->local_port = (ctx)->local_port;                                 \
		(key)->remote_port = bpf_ntohl((ctx)->remote_port);                    \
		__ok;                                                                  \
	})

static __always_inline bool port_selected(const struct sockmap_key *key)
{
	__u16 local = key->local_port, remote = key->remote_port;

	if (!targ_filter_ports)
		return true;
	return bpf_map_lookup_elem(&ports, &local) || bpf_map_lookup_elem(&ports, &remote);
}

SEC("sockops")
int sockmap_sockops(struct bpf_sock_ops *skops)
{
	struct sockmap_key key = {};
	__u32 op = skops->op;

	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (!OWN_KEY(skops, &key) || !port_selected(&key))
		return 1;
	if (bpf_sock_hash_update(skops, &sock_hash, &key, BPF_NOEXIST) == 0)
		bump(SOCKMAP_SOCKETS_ADDED, 1);
	else
		bump(SOCKMAP_ADD_FAILED, 1);
	return 1;
}

SEC("sk_msg")
int sockmap_redirect(struct sk_msg_md *msg)
{
	struct sockmap_key own = {}, peer = {};
	struct sockmap_stats *s = my_stats();
	__u32 size = msg->size;

	if (!s)
		return SK_PASS;
	if (OWN_KEY(msg, &own)) {
		/* the peer's own tuple is ours with the ends swapped */
		peer.family = own.family;
		__builtin_memcpy(peer.local_addr, own.remote_addr, sizeof(peer.local_addr));
		__builtin_memcpy(peer.remote_addr, own.local_addr, sizeof(peer.remote_addr));
		peer.local_port = own.remote_port;
		peer.remote_port = own.local_port;
		if (bpf_msg_redirect_hash(msg, &sock_hash, &peer, BPF_F_INGRESS) == SK_PASS) {
			s->count[SOCKMAP_MSGS_REDIRECTED]++;
			s->count[SOCKMAP_BYTES_REDIRECTED] += size;
			return SK_PASS;
		}
	}
	s->count[SOCKMAP_MSGS_FALLBACK]++;
	s->count[SOCKMAP_BYTES_FALLBACK] += size;
	return SK_PASS; /* not redirected: the normal TCP path */
}

SEC("sk_skb") /* attached as BPF_SK_SKB_VERDICT (libbpf 1.1 has no sk_skb/verdict) */
int sockmap_pass(struct __sk_buff *skb)
{
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
