// SPDX-License-Identifier: GPL-2.0
/* pingtrace's checkpoints: wherever a pingtrace probe (an ICMP echo or echo reply with code 1
 * and the payload magic 0x7ace, see wire.py) passes a hook of the network stack, one event:
 * when, which checkpoint, which device and network namespace. Every other packet costs the
 * hook a header read and a compare. Tracepoints only (tp_btf, or raw tracepoints where the
 * kernel has no BTF of its own): they exist on every kernel this runs on, kprobes do not. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "ebpfkit.h"
#include "pingtrace.h"

const volatile __u32 targ_session = 0; /* 0: every session's probes (a server's view) */
const volatile bool server = false;    /* keep each request's checkpoints for its reply's entries */
const volatile __u32 user_id = 0;      /* --userid: which host the entries come from */
__u64 replies_stamped = 0;             /* server: replies that left with this host's entries */
__u32 reader_tid = 0; /* the client's thread that reads replies (set when it starts reading) */

/* The last reply received, until the reader's wakeup that follows it is seen. */
struct armed_reply {
	__u32 session;
	__u32 seq;
	__u32 netns;
	__u32 armed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct armed_reply);
} last_reply SEC(".maps");

EK_RINGBUF(events, 1024 * 1024);

struct probe_key {
	__u32 session;
	__u32 seq;
};

struct kept_entries {
	__u32 count;
	__u32 pad;
	struct pingtrace_entry e[PINGTRACE_MAX_ENTRIES];
};

/* Server: a request's checkpoints on this host, until its reply leaves (LRU: a request whose
 * reply never leaves makes room for others). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct probe_key);
	__type(value, struct kept_entries);
} kept SEC(".maps");

static struct kept_entries none_kept;
EK_EXPORT_TYPE(struct pingtrace_event);
EK_EXPORT_TYPE(struct wire_probe); /* wire.py's layout and constants */
EK_EXPORT_TYPE(struct wire_entry);
EK_EXPORT_TYPE(enum pingtrace_wire);
EK_EXPORT_TYPE(enum pingtrace_point);
EK_EXPORT_TYPE(enum skb_drop_reason); /* the reason names of this kernel, for session.py */

/* The wire's layout (plain structs: vmlinux.h's carry CO-RE relocations). */
struct wire_ipv4 {
	__u8 version_ihl;
	__u8 tos;
	__be16 total_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__be32 saddr;
	__be32 daddr;
};

#define ICMP_ECHO_REPLY 0
#define ICMP_ECHO_REQUEST 8
#define IP_PROTO_ICMP 1

struct pt_probe {
	__u32 session;
	__u32 seq;
	__u8 type;
};

/* An IPv4 header without options and the probe's header after it: one read for the common case. */
struct ip_and_probe {
	struct wire_ipv4 ip;
	struct wire_probe w;
};

/* Whether the IPv4 packet at l3 (kernel memory) is one of our probes. */
static __always_inline bool probe_at(const void *l3, struct pt_probe *p)
{
	struct ip_and_probe h;
	__u32 ihl;

	if (!l3 || bpf_probe_read_kernel(&h, sizeof(h), l3))
		return false;
	ihl = (h.ip.version_ihl & 0xf) * 4;
	if ((h.ip.version_ihl >> 4) != 4 || h.ip.protocol != IP_PROTO_ICMP || ihl < sizeof(h.ip))
		return false;
	if (ihl != sizeof(h.ip) && bpf_probe_read_kernel(&h.w, sizeof(h.w), l3 + ihl)) /* IP options */
		return false;
	if ((h.w.type != ICMP_ECHO_REQUEST && h.w.type != ICMP_ECHO_REPLY) || h.w.code != PINGTRACE_CODE ||
	    h.w.magic != bpf_htons(PINGTRACE_MAGIC))
		return false;
	p->session = bpf_ntohl(h.w.session);
	if (targ_session && p->session != targ_session)
		return false;
	p->seq = bpf_ntohl(h.w.seq);
	p->type = h.w.type;
	return true;
}

/* The packet's IPv4 header: where the IP layer set it (sending, and once received), or at
 * data (a device's receive path, after the Ethernet header was pulled). */
static __always_inline const void *l3_sent(const struct sk_buff *skb, bool typed)
{
	return EK_FIELD(typed, skb, head) + EK_FIELD(typed, skb, network_header);
}

static __always_inline const void *l3_arriving(const struct sk_buff *skb, bool typed)
{
	return EK_FIELD(typed, skb, data);
}

/* Surely no probe: not IPv4 (IPv6, ARP, ...), shorter than the smallest probe (a TCP ACK), or
 * owned by a local socket that is not an ICMP one (TCP or UDP data being sent, or copied to its
 * reader, whose header would be a cache miss to read): decided from the skb itself, before any
 * read of the packet (which costs a helper call). */
static __always_inline bool no_probe(const struct sk_buff *skb, bool typed)
{
	const struct sock *sk;

	if (EK_FIELD(typed, skb, protocol) != bpf_htons(0x0800) || EK_FIELD(typed, skb, len) < PINGTRACE_MIN_PACKET)
		return true;
	sk = EK_FIELD(typed, skb, sk);
	return sk && EK_FIELD(typed, sk, sk_protocol) != IP_PROTO_ICMP;
}

/* (Read for probes only.) With tp_btf the kernel's pointers are typed: a field is a load, where
 * a raw tracepoint pays a helper call per pointer followed; a probe passes 8 to 10 checkpoints
 * on a round trip, whose time it is measuring. */
static __always_inline __u32 netns_of_dev(const struct net_device *dev, bool typed)
{
	if (!dev)
		return 0;
	return typed ? dev->nd_net.net->ns.inum : BPF_CORE_READ(dev, nd_net.net, ns.inum);
}

static __always_inline __u32 netns_of_current(void)
{
	struct task_struct *task = (void *)bpf_get_current_task();

	return BPF_CORE_READ(task, nsproxy, net_ns, ns.inum);
}

/* Server: one more checkpoint of request p for its reply to carry, from the first time it is
 * received on this host (what it passed before that, seen only when the client runs on this
 * host too, is the client's). */
static __always_inline void keep(const struct pt_probe *p, __u32 point, __u32 netns, __u32 ifindex, __u64 ts)
{
	struct probe_key key = {.session = p->session, .seq = p->seq};
	struct kept_entries *k = bpf_map_lookup_elem(&kept, &key);
	__u32 n;

	if (!k) {
		if (point != PT_NETIF_RX && point != PT_RECEIVE)
			return;
		bpf_map_update_elem(&kept, &key, &none_kept, BPF_NOEXIST);
		k = bpf_map_lookup_elem(&kept, &key);
		if (!k)
			return;
	}
	n = k->count;
	if (n >= PINGTRACE_MAX_ENTRIES - 1) /* the last one is the egress's */
		return;
	k->e[n].netns = netns;
	k->e[n].ifindex = ifindex;
	k->e[n].user_id = user_id;
	k->e[n].point = point;
	k->e[n].ts = ts;
	k->count = n + 1;
}

static __always_inline void emit(const struct pt_probe *p, __u32 point, __u32 netns, __u32 ifindex, __u32 reason)
{
	struct pingtrace_event *ev;
	__u64 now = bpf_ktime_get_ns();

	if (server) { /* a server's view goes into its replies, not to user space */
		if (p->type == ICMP_ECHO_REQUEST && point != PT_DROP)
			keep(p, point, netns, ifindex, now);
		return;
	}
	ev = ek_ringbuf_reserve(events, sizeof(*ev));
	if (!ev)
		return;
	ev->ts = now;
	ev->session = p->session;
	ev->seq = p->seq;
	ev->netns = netns;
	ev->ifindex = ifindex;
	ev->point = point;
	ev->reason = reason;
	ev->icmp_type = p->type;
	ev->cpu = bpf_get_smp_processor_id();
	/* no wakeup: the client reads the events when a reply (or a probe's deadline) comes, and
	 * a wakeup's irq_work would add its cost to the very path being timed */
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
}

/* A checkpoint on a device: the packet's header found as ``l3`` says. */
static __always_inline int on_device(const struct sk_buff *skb, const struct net_device *dev,
				     __u32 point, bool arriving, bool typed)
{
	struct armed_reply *last;
	struct pt_probe p;
	__u32 zero = 0, netns;

	if (!skb || no_probe(skb, typed) || !probe_at(arriving ? l3_arriving(skb, typed) : l3_sent(skb, typed), &p))
		return 0;
	if (!dev)
		dev = EK_FIELD(typed, skb, dev);
	netns = netns_of_dev(dev, typed);
	emit(&p, point, netns, dev ? EK_FIELD(typed, dev, ifindex) : 0, 0);
	if (point == PT_RECEIVE && p.type == ICMP_ECHO_REPLY && (last = bpf_map_lookup_elem(&last_reply, &zero))) {
		last->session = p.session;
		last->seq = p.seq;
		last->netns = netns;
		last->armed = 1;
	}
	return 0;
}

/* The reader woken (in the waker's context: the softirq that queued the reply on its
 * socket) after a reply came: that reply's wakeup. */
static __always_inline int waking(__u32 tid)
{
	struct armed_reply *last;
	struct pt_probe p;
	__u32 zero = 0;

	if (!reader_tid || tid != reader_tid)
		return 0;
	last = bpf_map_lookup_elem(&last_reply, &zero);
	if (!last || !last->armed)
		return 0;
	last->armed = 0;
	p.session = last->session;
	p.seq = last->seq;
	p.type = ICMP_ECHO_REPLY;
	emit(&p, PT_WAKEUP, last->netns, 0, 0);
	return 0;
}

/* Copied to a reader: in the namespace of the socket it was queued on (the reader may be in
 * another); skb_iif is the device it came in by, there. */
static __always_inline int copied(const struct sk_buff *skb, bool typed)
{
	struct armed_reply *last;
	struct pt_probe p;
	struct sock *sk;
	__u32 zero = 0, netns;

	if (!skb || no_probe(skb, typed) || !probe_at(l3_sent(skb, typed), &p))
		return 0;
	last = bpf_map_lookup_elem(&last_reply, &zero);
	if (last && last->seq == p.seq && last->session == p.session)
		last->armed = 0; /* read without a wakeup (the reader was running): none to wait for */
	sk = EK_FIELD(typed, skb, sk);
	if (!sk)
		netns = netns_of_current();
	else
		netns = typed ? sk->__sk_common.skc_net.net->ns.inum : BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	emit(&p, PT_USER_COPY, netns, EK_FIELD(typed, skb, skb_iif), 0);
	return 0;
}

static __always_inline int dropped(const struct sk_buff *skb, __u32 reason, bool typed)
{
	struct pt_probe p;
	const struct net_device *dev;

	if (!skb || no_probe(skb, typed) || !probe_at(l3_sent(skb, typed), &p))
		return 0;
	dev = EK_FIELD(typed, skb, dev);
	emit(&p, PT_DROP, dev ? netns_of_dev(dev, typed) : netns_of_current(), dev ? EK_FIELD(typed, dev, ifindex) : 0,
	     reason);
	return 0;
}

/* The kernel's enum skb_drop_reason, which came with kfree_skb's reason argument (5.17):
 * declared here since a 5.10 kernel's vmlinux.h has none. */
enum skb_drop_reason___ek { SKB_DROP_REASON___ek };

/* Each hook twice: tp_btf where the kernel has BTF of its own, raw tracepoints elsewhere. */
#define PINGTRACE_HOOKS(kind, suffix, typed)                                                      \
	SEC(#kind "/net_dev_queue")                                                               \
	int BPF_PROG(pt_dev_queue##suffix, struct sk_buff *skb)                                   \
	{                                                                                         \
		return on_device(skb, NULL, PT_DEV_QUEUE, false, typed);                          \
	}                                                                                         \
	SEC(#kind "/qdisc_enqueue")                                                               \
	int BPF_PROG(pt_qdisc_enqueue##suffix, struct Qdisc *q, const struct netdev_queue *txq,   \
		     struct sk_buff *skb)                                                         \
	{                                                                                         \
		return on_device(skb, NULL, PT_QDISC_ENQUEUE, false, typed);                      \
	}                                                                                         \
	SEC(#kind "/qdisc_dequeue")                                                               \
	int BPF_PROG(pt_qdisc_dequeue##suffix, struct Qdisc *q, const struct netdev_queue *txq,   \
		     int packets, struct sk_buff *skb)                                            \
	{                                                                                         \
		return on_device(skb, NULL, PT_QDISC_DEQUEUE, false, typed);                      \
	}                                                                                         \
	SEC(#kind "/net_dev_start_xmit")                                                          \
	int BPF_PROG(pt_xmit##suffix, const struct sk_buff *skb, const struct net_device *dev)    \
	{                                                                                         \
		return on_device(skb, dev, PT_XMIT, false, typed);                                \
	}                                                                                         \
	SEC(#kind "/netif_rx")                                                                    \
	int BPF_PROG(pt_netif_rx##suffix, struct sk_buff *skb)                                    \
	{                                                                                         \
		return on_device(skb, NULL, PT_NETIF_RX, true, typed);                            \
	}                                                                                         \
	SEC(#kind "/netif_receive_skb")                                                           \
	int BPF_PROG(pt_receive##suffix, struct sk_buff *skb)                                     \
	{                                                                                         \
		return on_device(skb, NULL, PT_RECEIVE, true, typed);                             \
	}                                                                                         \
	SEC(#kind "/skb_copy_datagram_iovec")                                                     \
	int BPF_PROG(pt_copy##suffix, const struct sk_buff *skb, int len)                         \
	{                                                                                         \
		return copied(skb, typed);                                                        \
	}                                                                                         \
	SEC(#kind "/sched_waking")                                                                \
	int BPF_PROG(pt_waking##suffix, struct task_struct *t)                                    \
	{                                                                                         \
		return waking(EK_FIELD(typed, t, pid));                                           \
	}                                                                                         \
	SEC(#kind "/kfree_skb")                                                                   \
	int pt_drop##suffix(unsigned long long *ctx)                                              \
	{                                                                                         \
		/* (skb, location, reason): the reason since 5.17, with its enum */               \
		int reason = bpf_core_type_exists(enum skb_drop_reason___ek) ? (int)ctx[2] : 0;   \
		return dropped((const struct sk_buff *)ctx[0], reason, typed);                    \
	}

PINGTRACE_HOOKS(tp_btf, , true)
PINGTRACE_HOOKS(raw_tp, _raw, false)

/* Server, at tc egress of its devices: a reply to a probe leaves with this host's checkpoints
 * of its request, and this one, written into the probe's zero padding (big-endian, after the
 * header; the entries byte counts them) with the ICMP checksum updated by the difference. */
#define ETH_HEADER_LEN 14
#define TC_ACT_OK 0

static __always_inline int store_csummed(struct __sk_buff *skb, __u32 off, __u32 csum_off, void *new,
					 __u32 len, void *old)
{
	__s64 diff;

	if (bpf_skb_load_bytes(skb, off, old, len))
		return -1;
	diff = bpf_csum_diff(old, len, new, len, 0);
	if (diff < 0 || bpf_skb_store_bytes(skb, off, new, len, 0))
		return -1;
	return bpf_l4_csum_replace(skb, csum_off, 0, diff, 0) ? -1 : 0;
}

SEC("tc")
int pt_reply_out(struct __sk_buff *skb)
{
	const __u32 ip_off = ETH_HEADER_LEN, icmp_off = ETH_HEADER_LEN + sizeof(struct wire_ipv4);
	const __u32 csum_off = icmp_off + 2, head_off = icmp_off + 8, entries_off = icmp_off + sizeof(struct wire_probe);
	struct wire_entry be, old;
	struct kept_entries *k;
	struct probe_key key;
	struct wire_probe w;
	struct wire_ipv4 ip;
	__u32 n, last_netns = 0, head[1], old_head[1];

	if (!server || skb->protocol != bpf_htons(0x0800))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ip_off, &ip, sizeof(ip)) || ip.version_ihl != 0x45 || ip.protocol != IP_PROTO_ICMP)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, icmp_off, &w, sizeof(w)) || w.type != ICMP_ECHO_REPLY || w.code != PINGTRACE_CODE ||
	    w.magic != bpf_htons(PINGTRACE_MAGIC) || w.entries)
		return TC_ACT_OK;
	key.session = bpf_ntohl(w.session);
	key.seq = bpf_ntohl(w.seq);
	k = bpf_map_lookup_elem(&kept, &key);
	n = k ? k->count : 0;
	if (n > PINGTRACE_MAX_ENTRIES - 1)
		n = PINGTRACE_MAX_ENTRIES - 1;
	if (skb->len < entries_off + (n + 1) * sizeof(struct wire_entry))
		return TC_ACT_OK; /* no room: a probe smaller than the minimum, or foreign */
	for (__u32 i = 0; i < PINGTRACE_MAX_ENTRIES - 1; i++) {
		if (i >= n || !k)
			break;
		last_netns = k->e[i].netns;
		be.netns = bpf_htonl(last_netns);
		be.ifindex = bpf_htonl(k->e[i].ifindex);
		be.user_id = bpf_htonl(k->e[i].user_id);
		be.point = bpf_htonl(k->e[i].point);
		be.ts = bpf_cpu_to_be64(k->e[i].ts);
		if (store_csummed(skb, entries_off + i * sizeof(be), csum_off, &be, sizeof(be), &old))
			return TC_ACT_OK;
	}
	/* the last entry's netns, kept by the loop: indexing e[n - 1] here loses n's bound on 6.1 */
	be.netns = bpf_htonl(last_netns);
	be.ifindex = bpf_htonl(skb->ifindex);
	be.user_id = bpf_htonl(user_id);
	be.point = bpf_htonl(PT_EGRESS);
	be.ts = bpf_cpu_to_be64(bpf_ktime_get_ns());
	if (store_csummed(skb, entries_off + n * sizeof(be), csum_off, &be, sizeof(be), &old))
		return TC_ACT_OK;
	/* the header's first word: magic, version, and the entry count */
	if (bpf_skb_load_bytes(skb, head_off, old_head, sizeof(old_head)))
		return TC_ACT_OK;
	head[0] = old_head[0];
	((__u8 *)head)[3] = n + 1;
	if (store_csummed(skb, head_off, csum_off, head, sizeof(head), old_head))
		return TC_ACT_OK;
	if (k)
		bpf_map_delete_elem(&kept, &key);
	__sync_fetch_and_add(&replies_stamped, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
