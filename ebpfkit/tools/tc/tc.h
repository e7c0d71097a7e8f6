/* SPDX-License-Identifier: GPL-2.0 */
/* What tc_redirect.bpf.c and its session share: the endpoint map's value and the counters. */
#ifndef __EK_TC_H
#define __EK_TC_H

/* One endpoint: a namespace behind a veth pair, reached by its address (the map's key, IPv4
 * in network order). The packet is handed to the peer of the node-side veth, its Ethernet
 * header rewritten as if the node had routed it there. */
struct tc_endpoint {
	__u32 ifindex;       /* the node-side veth: bpf_redirect_peer delivers into its peer */
	__u8 mac[6];         /* the endpoint's own (its namespace's veth end) */
	__u8 node_mac[6];    /* the node-side veth's: the frame's source, as from its gateway */
	__u8 to_ingress;     /* steering to a node device: into its ingress (mac: the device's) */
	__u8 pad[3];
};

/* Steering: what goes to a port (of a protocol) goes to one endpoint or node device, whatever
 * its address (a node-local DNS cache answering for the cluster's DNS address). */
struct tc_steer_key {
	__u8 protocol; /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
	__be16 port;   /* destination port */
};

/* what the program did with each packet it saw */
enum tc_verdict {
	TC_TO_ENDPOINT = 0, /* bpf_redirect_peer into an endpoint's namespace */
	TC_ROUTED,          /* out of the node by the FIB's device, next hop's MAC known: bpf_redirect */
	TC_TO_NEIGH,        /* out of the node by the FIB's device, the kernel resolving the next hop: bpf_redirect_neigh */
	TC_PASSED,          /* not ours (not IPv4, for this node, TTL expiring, no route): the normal stack */
	TC_STEERED,         /* to the endpoint or device its destination port is steered to */
	TC_VERDICTS,
};

struct tc_counter {
	__u64 packets;
	__u64 bytes;
};

/* EDT rate limiting: a rule matches what leaves a device by its source address or its
 * socket's cgroup, and paces it to a rate by stamping each packet with its earliest departure
 * time, which the fq qdisc keeps it until; beyond the horizon a packet is dropped. */
enum tc_match {
	TC_MATCH_ADDRESS = 1, /* value: an IPv4 source address, network order */
	TC_MATCH_CGROUP = 2,  /* value: a cgroup v2 id (the sending socket's) */
};

struct tc_rate_key {
	__u32 match; /* enum tc_match */
	__u32 pad;
	__u64 value;
};

struct tc_rate {
	__u64 bytes_per_sec;
	__u64 horizon_ns;
	__u64 next_ns;  /* when the next packet may leave: the last one's departure plus its time */
	__u64 passed;   /* left at once */
	__u64 delayed;  /* stamped to leave later */
	__u64 dropped;  /* would have left beyond the horizon */
	__u64 bytes;    /* passed or delayed */
};

#endif
