/* SPDX-License-Identifier: GPL-2.0 */
/* Map layouts and constants of xdp_lb.bpf.c; ebpfkit/tools/xdp/lb.py reads both from the
 * object's BTF. lb_flow_hash() is mirrored in lb.py (flow_hash), checked by a test that
 * runs this one in the kernel. */
#ifndef __EK_XDP_LB_H
#define __EK_XDP_LB_H

#include "xdp_mode.h"

struct lb_backend {
	__u8 addr[16];  /* the backend's address: its identity (IPv4 in the first 4 bytes) */
	__u8 dmac[6];   /* the backend's MAC */
	__u8 smac[6];   /* the MAC of the interface towards it */
	__u32 ifindex;  /* that interface: the XDP one (XDP_TX) or another (devmap redirect) */
	__u32 weight;
	__u32 gen;      /* bumped each time the slot gets a backend: stale flow entries differ */
	__u8 family;    /* 4 or 6 */
	__u8 active;    /* 0: free or being removed; flows cached on it are re-hashed */
	__u16 _pad;
};

struct lb_flow_key {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family;
	__u16 _pad;
};

/* murmur3's 32-bit mixing of the key's ten words; lb.py flow_hash() computes the same */
static __always_inline __u32 lb_rol32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 lb_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = lb_rol32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = lb_rol32(h, 13);
	return h * 5 + 0xe6546b64;
}

static __always_inline __u32 lb_flow_hash(const struct lb_flow_key *k)
{
	const __u32 *w = (const __u32 *)k; /* src[4], dst[4], ports, proto/family */
	__u32 h = 0x9747b28c;
	int i;

#pragma unroll
	for (i = 0; i < 10; i++)
		h = lb_mix(h, w[i]);
	h ^= 40;
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

struct lb_flow_val {
	__u32 backend; /* slot in `backends` */
	__u32 gen;     /* the slot's gen when the flow was placed */
};

struct lb_counter {
	__u64 packets;
	__u64 bytes;
};

/* Slots of the per-CPU `lb_totals` array. */
enum lb_stat {
	LB_FORWARDED = 0,  /* to a backend: TX + REDIRECT */
	LB_TX = 1,
	LB_REDIRECT = 2,
	LB_PASSED = 3,     /* not for the VIP: up the stack */
	LB_NO_BACKEND = 4, /* for the VIP but no live backend: dropped */
	LB_MALFORMED = 5,  /* passed */
	LB_FLOW_HIT = 6,   /* placed by the flow cache */
	LB_FLOW_MISS = 7,  /* placed by the Maglev table */
	LB_MAX = 8,
};

/* Written by user space at attach time so other processes can show and reuse it. */
struct lb_conf {
	__u8 vip[16];
	__u16 port;
	__u8 proto;
	__u8 family;
	__u32 table_size;
	__u32 max_backends;
	enum ek_xdp_mode xdp_mode;
};

#endif /* __EK_XDP_LB_H */
