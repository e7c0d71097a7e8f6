/* Shared by pingtrace.bpf.c and, through BTF, by session.py (the events it decodes) and wire.py
 * (the probe's layout and constants, with which it builds and parses probes). */
#ifndef __PINGTRACE_H
#define __PINGTRACE_H

/* The probe's constants (an enum, so that they reach wire.py through BTF). */
enum pingtrace_wire {
	PINGTRACE_CODE = 1,        /* the ICMP code of an echo that is a probe (sysak's) */
	PINGTRACE_MAGIC = 0x7ace,  /* the first two bytes of a probe's payload */
	PINGTRACE_VERSION = 1,     /* the payload's format */
	PINGTRACE_MIN_SIZE = 144,  /* the smallest payload a probe has (wire.MIN_SIZE, which a user is told) */
};
#define PINGTRACE_MIN_PACKET (20 + 8 + PINGTRACE_MIN_SIZE) /* IPv4 and ICMP headers, and that */

/* Checkpoints, in the order a probe passes them on one host (wire.py names them: PT_ dropped, lower case). */
enum pingtrace_point {
	PT_USER_TX = 0,       /* the client sent it (user space) */
	PT_DEV_QUEUE = 1,     /* dev_queue_xmit: handed to a device */
	PT_QDISC_ENQUEUE = 2, /* queued in the device's qdisc */
	PT_QDISC_DEQUEUE = 3, /* taken out of it */
	PT_XMIT = 4,          /* the driver's start_xmit */
	PT_NETIF_RX = 5,      /* queued for receive on a CPU's backlog (veth, loopback) */
	PT_RECEIVE = 6,       /* netif_receive_skb: the stack takes it */
	PT_WAKEUP = 7,        /* the client's reading thread woken (sched_waking) after a reply came */
	PT_USER_COPY = 8,     /* copied to the receiving socket's reader */
	PT_USER_RX = 9,       /* the client read the reply (user space) */
	PT_DROP = 10,         /* freed as dropped (kfree_skb, with the kernel's reason) */
	PT_EGRESS = 11,       /* a server's reply leaving its stack (tc egress, where it writes its entries) */
};

#define PINGTRACE_MAX_ENTRIES 5 /* a server's checkpoints a reply carries (in a 144-byte probe's padding) */

/* The probe on the wire, big-endian (wire.py reads this layout from the object's BTF, fields by
 * name): the ICMP echo header, then the payload's header; entries follow it. */
struct wire_probe {
	__u8 type;
	__u8 code;
	__u16 checksum;
	__be16 echo_id;
	__be16 echo_seq;
	__be16 magic;
	__u8 version;
	__u8 entries;
	__be32 session;
	__be32 seq;
	__be32 reserved;
};

/* One of a server's checkpoints in a reply, after the header (struct pingtrace_entry, big-endian). */
struct wire_entry {
	__be32 netns;
	__be32 ifindex;
	__be32 user_id;
	__be32 point;
	__be64 ts;
};

/* A checkpoint a server keeps for a request, and writes into its reply (big-endian there). */
struct pingtrace_entry {
	__u32 netns;
	__u32 ifindex;
	__u32 user_id;   /* --userid of the host that wrote it */
	__u32 point;
	__u64 ts;        /* that host's CLOCK_MONOTONIC ns */
};

struct pingtrace_event {
	__u64 ts;        /* CLOCK_MONOTONIC ns */
	__u32 session;   /* the client run the probe belongs to */
	__u32 seq;
	__u32 netns;     /* inode of the network namespace */
	__u32 ifindex;   /* 0 where no device is involved */
	__u32 point;     /* enum pingtrace_point */
	__u32 reason;    /* PT_DROP: the kernel's skb_drop_reason */
	__u8 icmp_type;  /* 8 request, 0 reply */
	__u8 pad[3];
	__u32 cpu;
};

#endif
