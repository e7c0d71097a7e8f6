/* SPDX-License-Identifier: GPL-2.0 */
/* Packet parsing shared by the XDP filter and the XDP load balancer.
 *
 * Ethernet, up to two VLAN tags (802.1Q / 802.1ad), IPv4 (options, fragments) and IPv6
 * (hop-by-hop, routing, fragment, destination options and AH extension headers), then the
 * TCP/UDP/SCTP ports. Every read is checked against data_end first: a frame that ends before
 * a header it announces is MALFORMED, never a verifier problem and never a wild read.
 * Offsets are kept as a bounded scalar so the verifier can follow the variable-length chain.
 */
#ifndef __EK_XDP_PARSE_H
#define __EK_XDP_PARSE_H

#define EK_ETH_P_IP 0x0800
#define EK_ETH_P_IPV6 0x86DD
#define EK_ETH_P_8021Q 0x8100
#define EK_ETH_P_8021AD 0x88A8

#define EK_IPPROTO_HOPOPTS 0
#define EK_IPPROTO_ICMP 1
#define EK_IPPROTO_TCP 6
#define EK_IPPROTO_UDP 17
#define EK_IPPROTO_ROUTING 43
#define EK_IPPROTO_FRAGMENT 44
#define EK_IPPROTO_AH 51
#define EK_IPPROTO_ICMPV6 58
#define EK_IPPROTO_DSTOPTS 60
#define EK_IPPROTO_SCTP 132
#define EK_IPPROTO_UDPLITE 136

#define EK_MAX_VLANS 2
#define EK_MAX_EXT_HDRS 8
#define EK_MAX_OFF 4096 /* no header we parse starts further into the frame than this */

enum ek_parse_result {
	EK_PARSE_OK = 0,
	EK_PARSE_NOT_IP = 1,    /* ARP, LLDP, ...: not ours to judge */
	EK_PARSE_MALFORMED = 2, /* truncated or inconsistent headers */
};

struct ek_pkt {
	__u8 src[16];   /* network order; IPv4 uses the first 4 bytes */
	__u8 dst[16];
	__u16 sport;    /* host order; valid when has_ports */
	__u16 dport;
	__u8 family;    /* 4 or 6 */
	__u8 proto;     /* L4 protocol (after IPv6 extension headers) */
	__u8 has_ports;
	__u8 fragment;  /* a non-first fragment: no L4 header in this packet */
	__u8 icmp_type; /* valid for ICMP/ICMPv6 first fragments */
	__u8 vlans;     /* tags seen */
	__u16 l4_off;   /* offset of the L4 header from the start of the frame */
};

struct ek_vlan_hdr {
	__be16 tci;
	__be16 proto;
};

/* A pointer to len bytes at data + off, or NULL when the frame is shorter. */
#define EK_AT(data, end, off, len)                                                   \
	({                                                                           \
		void *__p = (void *)(data) + (off);                                  \
		(__p + (len) > (void *)(end)) ? (void *)0 : __p;                     \
	})

static __always_inline int ek_is_ext_hdr(__u8 nh)
{
	return nh == EK_IPPROTO_HOPOPTS || nh == EK_IPPROTO_ROUTING || nh == EK_IPPROTO_FRAGMENT ||
	       nh == EK_IPPROTO_DSTOPTS || nh == EK_IPPROTO_AH;
}

static __always_inline int ek_parse_l4(void *data, void *end, __u32 off, struct ek_pkt *p)
{
	__u8 *l4;

	p->l4_off = off;
	if (p->fragment)
		return EK_PARSE_OK; /* later fragments carry no ports */
	switch (p->proto) {
	case EK_IPPROTO_TCP: {
		struct tcphdr *th = EK_AT(data, end, off, sizeof(struct tcphdr));

		if (!th || th->doff < 5)
			return EK_PARSE_MALFORMED;
		p->sport = bpf_ntohs(th->source);
		p->dport = bpf_ntohs(th->dest);
		p->has_ports = 1;
		break;
	}
	case EK_IPPROTO_UDP:
	case EK_IPPROTO_UDPLITE: {
		struct udphdr *uh = EK_AT(data, end, off, sizeof(struct udphdr));

		if (!uh)
			return EK_PARSE_MALFORMED;
		p->sport = bpf_ntohs(uh->source);
		p->dport = bpf_ntohs(uh->dest);
		p->has_ports = 1;
		break;
	}
	case EK_IPPROTO_SCTP:
		l4 = EK_AT(data, end, off, 12); /* the SCTP common header */
		if (!l4)
			return EK_PARSE_MALFORMED;
		p->sport = (__u16)l4[0] << 8 | l4[1];
		p->dport = (__u16)l4[2] << 8 | l4[3];
		p->has_ports = 1;
		break;
	case EK_IPPROTO_ICMP:
	case EK_IPPROTO_ICMPV6:
		l4 = EK_AT(data, end, off, 4); /* type, code, checksum */
		if (!l4)
			return EK_PARSE_MALFORMED;
		p->icmp_type = l4[0];
		break;
	}
	return EK_PARSE_OK;
}

/* A big-endian 16-bit length as a scalar the verifier can bound: 6.1's and 6.12's drop the
 * bounds of a byte swap, and refuse a packet pointer plus an unbounded scalar. */
static __always_inline __u32 ek_len16(__be16 v)
{
	__u32 n = bpf_ntohs(v);

	barrier_var(n); /* or clang, knowing n < 65536, drops the mask */
	return n & 0xffff;
}

static __always_inline int ek_parse_ipv4(void *data, void *end, __u32 off, struct ek_pkt *p)
{
	struct iphdr *iph = EK_AT(data, end, off, sizeof(struct iphdr));
	__u32 hlen, tot;

	if (!iph || iph->version != 4 || iph->ihl < 5)
		return EK_PARSE_MALFORMED;
	hlen = iph->ihl * 4;
	tot = ek_len16(iph->tot_len);
	if (tot < hlen || !EK_AT(data, end, off, hlen) || (void *)iph + tot > end)
		return EK_PARSE_MALFORMED; /* options or payload cut off */
	p->family = 4;
	p->proto = iph->protocol;
	__builtin_memcpy(p->src, &iph->saddr, 4);
	__builtin_memcpy(p->dst, &iph->daddr, 4);
	p->fragment = (bpf_ntohs(iph->frag_off) & 0x1fff) != 0;
	return ek_parse_l4(data, end, off + hlen, p);
}

static __always_inline int ek_parse_ipv6(void *data, void *end, __u32 off, struct ek_pkt *p)
{
	struct ipv6hdr *ip6h = EK_AT(data, end, off, sizeof(struct ipv6hdr));
	__u8 nh;
	int i;

	if (!ip6h || ip6h->version != 6)
		return EK_PARSE_MALFORMED;
	if ((void *)(ip6h + 1) + ek_len16(ip6h->payload_len) > end)
		return EK_PARSE_MALFORMED;
	p->family = 6;
	__builtin_memcpy(p->src, &ip6h->saddr, 16);
	__builtin_memcpy(p->dst, &ip6h->daddr, 16);
	nh = ip6h->nexthdr;
	off += sizeof(struct ipv6hdr);

#pragma unroll
	for (i = 0; i < EK_MAX_EXT_HDRS; i++) {
		__u8 *h;

		if (!ek_is_ext_hdr(nh))
			break;
		h = EK_AT(data, end, off, 8); /* every extension header is at least 8 bytes */
		if (!h)
			return EK_PARSE_MALFORMED;
		if (nh == EK_IPPROTO_FRAGMENT) {
			/* offset in the upper 13 bits of bytes 2-3; non-zero: not the first */
			if (((__u16)h[2] << 8 | h[3]) & 0xfff8)
				p->fragment = 1;
			off += 8;
		} else if (nh == EK_IPPROTO_AH) {
			off += ((__u32)h[1] + 2) * 4;
		} else {
			off += ((__u32)h[1] + 1) * 8;
		}
		nh = h[0];
		if (off > EK_MAX_OFF)
			return EK_PARSE_MALFORMED;
	}
	if (ek_is_ext_hdr(nh))
		return EK_PARSE_MALFORMED; /* a longer chain than we follow: do not guess */
	p->proto = nh;
	return ek_parse_l4(data, end, off, p);
}

/* Fill p from the frame; returns an ek_parse_result. */
static __always_inline int ek_parse(struct xdp_md *ctx, struct ek_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = EK_AT(data, end, 0, sizeof(struct ethhdr));
	__u32 off = sizeof(struct ethhdr);
	__u16 proto;
	int i;

	if (!eth)
		return EK_PARSE_MALFORMED;
	proto = bpf_ntohs(eth->h_proto);
#pragma unroll
	for (i = 0; i < EK_MAX_VLANS; i++) {
		struct ek_vlan_hdr *vh;

		if (proto != EK_ETH_P_8021Q && proto != EK_ETH_P_8021AD)
			break;
		vh = EK_AT(data, end, off, sizeof(*vh));
		if (!vh)
			return EK_PARSE_MALFORMED;
		proto = bpf_ntohs(vh->proto);
		off += sizeof(*vh);
		p->vlans++;
	}
	if (proto == EK_ETH_P_IP)
		return ek_parse_ipv4(data, end, off, p);
	if (proto == EK_ETH_P_IPV6)
		return ek_parse_ipv6(data, end, off, p);
	if (proto == EK_ETH_P_8021Q || proto == EK_ETH_P_8021AD)
		return EK_PARSE_MALFORMED; /* more tags than we look through */
	return EK_PARSE_NOT_IP;
}

#endif /* __EK_XDP_PARSE_H */
