/* Shared by sockmap.bpf.c and, through BTF, by ebpfkit/sockmap/ (Python). */
#ifndef __SOCKMAP_H
#define __SOCKMAP_H

/* One end of a TCP connection, as sockops stores it: the own tuple, addresses in network
 * byte order, ports in host byte order. IPv4 (and IPv4-mapped IPv6 sockets, so a client on
 * AF_INET and a server accepting on "::" produce matching keys) goes into its own map with
 * a 12-byte key: sk_msg hashes one key per message, and a short key keeps that as cheap
 * as the minimal IPv4-only sample's. */
struct sockmap_key4 {
	__u32 local_addr;
	__u32 remote_addr;
	__u16 local_port;
	__u16 remote_port;
};

struct sockmap_key6 {
	__u32 local_addr[4];
	__u32 remote_addr[4];
	__u16 local_port;
	__u16 remote_port;
};

/* Counters in the single per-CPU `stats` value: one lookup per message. */
enum sockmap_stat {
	SOCKMAP_SOCKETS_ADDED = 0,  /* sockets stored in the map by sockops */
	SOCKMAP_ADD_FAILED,         /* map full, or the socket was refused */
	SOCKMAP_MSGS_REDIRECTED,    /* sendmsg calls handed straight to the peer socket */
	SOCKMAP_BYTES_REDIRECTED,
	SOCKMAP_MSGS_FALLBACK,      /* peer not local / not in the map: normal TCP path */
	SOCKMAP_BYTES_FALLBACK,
	SOCKMAP_NR_STATS,
};

struct sockmap_stats {
	__u64 count[SOCKMAP_NR_STATS];
};

/* What `enable` chose, for `status` (written by user space, never read by the programs). */
struct sockmap_info {
	__u64 enabled_at;    /* CLOCK_REALTIME seconds */
	__u32 ipv6;
	__u32 skb_verdict;   /* the pass-through sk_skb verdict (regression workaround) is attached */
	__u32 regression;    /* the FIONREAD/epoll regression was detected on this kernel */
	__u32 nports;
	__u64 cgroup_id;
};

#endif
