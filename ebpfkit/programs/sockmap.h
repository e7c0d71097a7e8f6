/* Shared by sockmap.bpf.c and, through BTF, by ebpfkit/sockmap/ (Python). */
#ifndef __SOCKMAP_H
#define __SOCKMAP_H

/* One end of a TCP connection. IPv4 (also IPv4-mapped IPv6 sockets, so a client on
 * AF_INET and a server accepting on "::" produce matching keys) uses addr[0] only.
 * Addresses in network byte order, ports in host byte order. */
struct sockmap_key {
	__u32 family; /* AF_INET or AF_INET6 */
	__u32 local_addr[4];
	__u32 remote_addr[4];
	__u32 local_port;
	__u32 remote_port;
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
