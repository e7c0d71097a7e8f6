// SPDX-License-Identifier: GPL-2.0
/* Socket-level acceleration between two local TCP sockets.
 *
 * sockops stores every established socket of the cgroup in a SOCKHASH keyed by its own
 * 4-tuple (one map for IPv4, one for IPv6); sk_msg looks up the peer (the same tuple seen
 * from the other side) and hands each sendmsg straight to the peer's ingress queue,
 * skipping TCP/IP below.
 * When the peer is not in the map the message takes the normal TCP path.
 *
 * sockmap_pass is a pass-through sk_skb verdict: on kernels with commit 929e30f93125
 * a socket in a sockhash without a verdict program reports FIONREAD 0 and misses epoll
 * wake-ups for data arriving through TCP; with a verdict attached that data goes through
 * the psock ingress queue, which FIONREAD and poll see. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ebpfkit.h"
#include "sockmap.h"

EK_EXPORT_TYPE(enum sockmap_stat); /* the counters' names, read by sockmap/maps.py from BTF */

#define AF_INET 2
#define AF_INET6 10

const volatile bool targ_ipv6 = true;          /* also accelerate pure IPv6 connections */
const volatile bool targ_filter_ports = false; /* only connections with a port in `ports` */

/* IPv4 and IPv4-mapped sockets; pure IPv6 ones in sock_hash6. A socket is in one map only,
 * and sk_msg, attached to both, redirects into whichever holds the peer. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65535);
	__type(key, struct sockmap_key4);
	__type(value, __u64);
} sock_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65535);
	__type(key, struct sockmap_key6);
	__type(value, __u64);
} sock_hash6 SEC(".maps");

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

static __always_inline bool port_selected(__u16 local, __u16 remote)
{
	if (!targ_filter_ports)
		return true;
	return bpf_map_lookup_elem(&ports, &local) || bpf_map_lookup_elem(&ports, &remote);
}

/* Store the socket under its own tuple; false when it is not one we accelerate. */
static __always_inline bool store_socket(struct bpf_sock_ops *skops, long *err)
{
	/* local_port is host order; remote_port network order in a 32-bit field */
	__u16 lport = skops->local_port, rport = bpf_ntohl(skops->remote_port);
	__u32 family = skops->family;

	if (!port_selected(lport, rport))
		return false;
	if (family == AF_INET) {
		struct sockmap_key4 key = {skops->local_ip4, skops->remote_ip4, lport, rport};

		*err = bpf_sock_hash_update(skops, &sock_hash, &key, BPF_NOEXIST);
		return true;
	}
	if (family != AF_INET6)
		return false;
	if (v4_mapped(skops->local_ip6[0], skops->local_ip6[1], skops->local_ip6[2]) &&
	    v4_mapped(skops->remote_ip6[0], skops->remote_ip6[1], skops->remote_ip6[2])) {
		/* an IPv4 client of a server on "::": key it as IPv4 */
		struct sockmap_key4 key = {skops->local_ip6[3], skops->remote_ip6[3], lport, rport};

		*err = bpf_sock_hash_update(skops, &sock_hash, &key, BPF_NOEXIST);
		return true;
	}
	if (!targ_ipv6)
		return false;
	struct sockmap_key6 key = {
		{skops->local_ip6[0], skops->local_ip6[1], skops->local_ip6[2], skops->local_ip6[3]},
		{skops->remote_ip6[0], skops->remote_ip6[1], skops->remote_ip6[2], skops->remote_ip6[3]},
		lport, rport,
	};

	*err = bpf_sock_hash_update(skops, &sock_hash6, &key, BPF_NOEXIST);
	return true;
}

SEC("sockops")
int sockmap_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	long err = 0;

	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (store_socket(skops, &err))
		bump(err ? SOCKMAP_ADD_FAILED : SOCKMAP_SOCKETS_ADDED, 1);
	return 1;
}

/* Hand the message to the peer, whose own tuple is ours with the ends swapped. Only
 * sockets sockops stored run this, so the family (and targ_ipv6) was checked there. */
static __always_inline long redirect_to_peer(struct sk_msg_md *msg)
{
	__u16 lport = msg->local_port, rport = bpf_ntohl(msg->remote_port);

	if (msg->family == AF_INET) {
		struct sockmap_key4 peer = {msg->remote_ip4, msg->local_ip4, rport, lport};

		return bpf_msg_redirect_hash(msg, &sock_hash, &peer, BPF_F_INGRESS);
	}
	__u32 l0 = msg->local_ip6[0], l1 = msg->local_ip6[1], l2 = msg->local_ip6[2], l3 = msg->local_ip6[3];
	__u32 r0 = msg->remote_ip6[0], r1 = msg->remote_ip6[1], r2 = msg->remote_ip6[2], r3 = msg->remote_ip6[3];

	if (v4_mapped(l0, l1, l2) && v4_mapped(r0, r1, r2)) {
		struct sockmap_key4 peer = {r3, l3, rport, lport};

		return bpf_msg_redirect_hash(msg, &sock_hash, &peer, BPF_F_INGRESS);
	}
	struct sockmap_key6 peer = {{r0, r1, r2, r3}, {l0, l1, l2, l3}, rport, lport};

	return bpf_msg_redirect_hash(msg, &sock_hash6, &peer, BPF_F_INGRESS);
}

SEC("sk_msg")
int sockmap_redirect(struct sk_msg_md *msg)
{
	struct sockmap_stats *s = my_stats();
	__u32 size = msg->size;

	if (!s)
		return SK_PASS;
	if (redirect_to_peer(msg) == SK_PASS) {
		s->count[SOCKMAP_MSGS_REDIRECTED]++;
		s->count[SOCKMAP_BYTES_REDIRECTED] += size;
	} else {
		s->count[SOCKMAP_MSGS_FALLBACK]++;
		s->count[SOCKMAP_BYTES_FALLBACK] += size;
	}
	return SK_PASS; /* redirected, or else the normal TCP path */
}

SEC("sk_skb") /* attached as BPF_SK_SKB_VERDICT (libbpf 1.1 has no sk_skb/verdict) */
int sockmap_pass(struct __sk_buff *skb)
{
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
