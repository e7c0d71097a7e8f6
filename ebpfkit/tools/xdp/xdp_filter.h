/* SPDX-License-Identifier: GPL-2.0 */
/* Map layouts and constants of xdp_filter.bpf.c; ebpfkit/tools/xdp reads both from the
 * object's BTF (field names, enums), so nothing here is copied in Python. */
#ifndef __EK_XDP_FILTER_H
#define __EK_XDP_FILTER_H

#include "xdp_mode.h"

struct lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* The value of every rule table: which rule, and what else it asks of the packet. */
struct rule_val {
	__u32 id;      /* rule id: the slot in rule_stats */
	__u8 proto;    /* 0: any L4 protocol */
	__u8 port_dir; /* RULE_PORT_* */
	__u16 port;    /* host order */
};

enum rule_port_dir {
	RULE_PORT_NONE = 0,
	RULE_PORT_DST = 1,
	RULE_PORT_SRC = 2,
};

/* Key of the port/protocol table: {proto, NONE, 0} matches a whole protocol. */
struct port_key {
	__u8 proto;
	__u8 dir;
	__u16 port; /* host order */
};

/* The value of `active`: bit 0 is the set packets use; the other bits say which of its tables
 * hold rules, so a packet skips lookups that cannot match. Written as one 4-byte store. */
enum active_bits {
	ACTIVE_SET = 1 << 0,
	HAS_SRC4 = 1 << 1,
	HAS_DST4 = 1 << 2,
	HAS_SRC6 = 1 << 3,
	HAS_DST6 = 1 << 4,
	HAS_PORT_DST = 1 << 5,  /* port table entries with dir DST */
	HAS_PORT_SRC = 1 << 6,  /* ... with dir SRC */
	HAS_PROTO = 1 << 7,     /* ... whole-protocol entries */
};

struct ek_counter {
	__u64 packets;
	__u64 bytes;
};

/* Slots of the per-CPU `totals` array, for packets no rule matched. PASSED + DROPPED +
 * WOULD_DROP count each such packet once (the action taken); the others say why. Matched
 * packets are counted by their rule only (rule_stats; slot 0 keeps deleted rules' counts):
 * user space adds those to the action their match implies. */
enum filter_stat {
	FS_PASSED = 0,
	FS_DROPPED = 1,
	FS_WOULD_DROP = 2, /* dry run: the default said drop, the packet passed */
	FS_MALFORMED = 3,  /* truncated/inconsistent headers; the default action applies */
	FS_CONTROL = 4,    /* non-IP frames and IPv6 neighbour discovery: always passed */
	FS_MAX = 5,
};

/* Written by user space at attach time so other processes can show the configuration. */
struct filter_conf {
	__u32 default_deny;
	__u32 dry_run;
	__u32 max_rules;
	enum ek_xdp_mode xdp_mode;
};

#endif /* __EK_XDP_FILTER_H */
