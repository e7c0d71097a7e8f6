"""Networking hooks end to end, each checked against ground truth the test made itself:
packets it built (BPF_PROG_TEST_RUN), datagrams it sent across a veth between two namespaces
it created, and loopback connections it opened from inside a child cgroup it created."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading

import pytest

import ebpfkit
from ebpfkit.net import xdp_attached
from helpers import wait_for

pytestmark = pytest.mark.integration

XDP_DROP, XDP_PASS = 1, 2
TC_ACT_OK, TC_ACT_SHOT = 0, 2

HEADERS = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_IP 0x0800
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2

/* The UDP destination port (host order) of an Ethernet/IPv4/UDP frame, or -1. */
static __always_inline int udp_dport(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp;

	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	if (ip->ihl < 5 || ip->protocol != IPPROTO_UDP)
		return -1;
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return -1;
	return bpf_ntohs(udp->dest);
}

static __always_inline void bump(void *map, __u32 slot, __u64 by)
{
	__u64 *v = bpf_map_lookup_elem(map, &slot);

	if (v)
		__sync_fetch_and_add(v, by);
}

char LICENSE[] SEC("license") = "GPL";
"""

# Drops UDP to port 9999, passes the rest; counts each verdict (by XDP action / tc code).
FILTER_SRC = HEADERS + r"""
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} verdicts SEC(".maps");

SEC("xdp")
int xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 action = udp_dport(data, data_end) == 9999 ? XDP_DROP : XDP_PASS;

	bump(&verdicts, action, 1);
	return action;
}

SEC("tc")
int tc_filter(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	__u32 action = udp_dport(data, data_end) == 9999 ? TC_ACT_SHOT : TC_ACT_OK;

	bump(&verdicts, action, 1);
	return action;
}
"""

# Counts (and with drop=1 drops) UDP datagrams to one port: slot 0 packets, slot 1 bytes.
COUNT_SRC = HEADERS + r"""
const volatile __u16 port = 0;
const volatile __u8 drop = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("xdp")
int xdp_count(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;

	if (udp_dport(data, data_end) != port)
		return XDP_PASS;
	bump(&counts, 0, 1);
	bump(&counts, 1, data_end - data);
	return drop ? XDP_DROP : XDP_PASS;
}

SEC("tc")
int tc_count(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;

	if (udp_dport(data, data_end) != port)
		return TC_ACT_OK;
	bump(&counts, 0, 1);
	bump(&counts, 1, skb->len);
	return drop ? TC_ACT_SHOT : TC_ACT_OK;
}
"""

TX_SRC = HEADERS + r"""
SEC("xdp") int xdp_tx(struct xdp_md *ctx) { return XDP_TX; }
"""

SOCKMAP_SRC = HEADERS + r"""
#define AF_INET 2

struct sock_key {
	__u32 sip;   /* local address, network order */
	__u32 dip;   /* remote address, network order */
	__u32 sport; /* local port, host order */
	__u32 dport; /* remote port, host order */
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 64);
	__type(key, struct sock_key);
	__type(value, __u64);
} sock_hash SEC(".maps");

/* 0: sockets added, 1: bytes redirected, 2: messages redirected, 3: redirect misses */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

SEC("sockops")
int add_established(struct bpf_sock_ops *skops)
{
	struct sock_key key = {};

	if (skops->family != AF_INET)
		return 1;
	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	key.sip = skops->local_ip4;
	key.dip = skops->remote_ip4;
	key.sport = skops->local_port;
	key.dport = bpf_ntohl(skops->remote_port); /* the port sits in the upper 16 bits */
	if (bpf_sock_hash_update(skops, &sock_hash, &key, BPF_NOEXIST) == 0)
		bump(&stats, 0, 1);
	return 1;
}

SEC("sk_msg")
int redirect_to_peer(struct sk_msg_md *msg)
{
	/* the peer socket's key: its local side is our remote side */
	struct sock_key peer = {
		.sip = msg->remote_ip4,
		.dip = msg->local_ip4,
		.sport = bpf_ntohl(msg->remote_port),
		.dport = msg->local_port,
	};
	long verdict = bpf_msg_redirect_hash(msg, &sock_hash, &peer, BPF_F_INGRESS);

	if (verdict == SK_PASS) {
		bump(&stats, 1, msg->size);
		bump(&stats, 2, 1);
	} else {
		bump(&stats, 3, 1);
	}
	return verdict;
}
"""

EGRESS_SRC = HEADERS + r"""
const volatile __u16 port = 0;

/* 0: datagrams, 1: UDP payload bytes */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} egress SEC(".maps");

SEC("cgroup_skb/egress")
int count_egress(struct __sk_buff *skb)
{
	struct iphdr ip;
	struct udphdr udp;

	/* cgroup_skb data starts at the IP header */
	if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)) || ip.version != 4 || ip.protocol != IPPROTO_UDP)
		return 1;
	if (bpf_skb_load_bytes(skb, ip.ihl * 4, &udp, sizeof(udp)) || udp.dest != bpf_htons(port))
		return 1;
	bump(&egress, 0, 1);
	bump(&egress, 1, bpf_ntohs(udp.len) - sizeof(udp));
	return 1; /* allow */
}
"""


def _frames():
    """(label, frame bytes, expected to hit port 9999 over IPv4 UDP) - built with scapy."""
    from scapy.layers.inet import IP, TCP, UDP, IPOption_Router_Alert
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import ARP, Ether

    eth = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    ip = dict(src="192.0.2.1", dst="192.0.2.2")
    return [
        ("udp/9999", bytes(Ether(**eth) / IP(**ip) / UDP(sport=1234, dport=9999) / (b"x" * 32)), True),
        ("udp/9999 ip options", bytes(Ether(**eth) / IP(options=[IPOption_Router_Alert()], **ip)
                                      / UDP(sport=1, dport=9999) / b"opt"), True),
        ("udp/53", bytes(Ether(**eth) / IP(**ip) / UDP(sport=1234, dport=53) / b"dns?"), False),
        ("udp/9998", bytes(Ether(**eth) / IP(**ip) / UDP(dport=9998)), False),
        ("tcp/9999", bytes(Ether(**eth) / IP(**ip) / TCP(sport=1234, dport=9999)), False),
        ("arp", bytes(Ether(src=eth["src"], dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="192.0.2.1", pdst="192.0.2.2")),
         False),
        ("ipv6 udp/9999", bytes(Ether(**eth) / IPv6(src="2001:db8::1", dst="2001:db8::2")
                                / UDP(dport=9999)), False),
        ("truncated udp/9999", bytes(Ether(**eth) / IP(**ip) / UDP(dport=9999))[:14 + 20 + 4], False),
    ]


@pytest.fixture(scope="module")
def filter_obj():
    with ebpfkit.compile(text=FILTER_SRC, name="net_filter.bpf.c").load() as obj:
        yield obj


def _reset(m, slots):
    for i in range(slots):
        m[i] = 0


@pytest.mark.parametrize("prog, drop, passed", [("xdp_filter", XDP_DROP, XDP_PASS),
                                                ("tc_filter", TC_ACT_SHOT, TC_ACT_OK)])
def test_filter_by_test_run(filter_obj, prog, drop, passed):
    verdicts = filter_obj.maps["verdicts"]
    _reset(verdicts, 8)
    program = filter_obj.programs[prog]
    expected = {drop: 0, passed: 0}
    for label, frame, hits in _frames():
        want = drop if hits else passed
        result = program.test_run(frame)
        assert result.retval == want, f"{prog} on {label}: retval {result.retval}, expected {want}"
        expected[want] += 1
    # repeat runs the program that many times on the same frame
    program.test_run(_frames()[0][1], repeat=5)
    expected[drop] += 5
    got = {action: verdicts[action] for action in range(8)}
    assert got == {a: expected.get(a, 0) for a in range(8)}


def test_run_time_stats_count_runs_only_while_on(filter_obj):
    """engine.run_time_stats() / run_time(): the kernel counts each run of a program, and its
    time, while they hold the statistics on, and stops after (unless the sysctl holds them
    on anyway)."""
    from ebpfkit.engine import run_time, run_time_stats

    program = filter_obj.programs["xdp_filter"]
    frame = _frames()[0][1]
    with run_time_stats():
        before = program.info()
        program.test_run(frame, repeat=50)
        during = program.info()
    assert during.run_cnt - before.run_cnt == 50 and during.run_time_ns > before.run_time_ns
    ns, runs = run_time([program], lambda: program.test_run(frame, repeat=30))
    assert runs == 30 and ns > 0
    during = program.info()
    program.test_run(frame, repeat=50)
    with open("/proc/sys/kernel/bpf_stats_enabled") as f:
        still_on = f.read().strip() == "1"
    assert program.info().run_cnt - during.run_cnt == (50 if still_on else 0)


# --- real hooks on a veth between two test namespaces -------------------------------------

def _udp_socket(ns, address):
    sock = ns.run(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 0))
    return sock


def _recv_all(sock, count, timeout=5.0):
    sock.settimeout(timeout)
    return [sock.recv(65535) for _ in range(count)]


def _nothing_waiting(sock) -> bool:
    sock.setblocking(False)
    try:
        sock.recv(65535)
        return False
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)


def _ip_link_xdp(ns, dev) -> str | None:
    """The XDP word of `ip -n NS link show dev DEV` (xdp, xdpgeneric, ...): an independent view."""
    out = subprocess.run(["ip", "-n", ns, "link", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout
    flags = out.splitlines()[0].split()
    return next((w for w in flags if w in ("xdp", "xdpgeneric", "xdpoffload", "xdpmulti")), None)


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_xdp_on_veth_counts_then_drops(veth_pair, netns, peer_netns, mode):
    a, b = veth_pair.a, veth_pair.b
    receiver = _udp_socket(netns, a.address)
    sentinel = _udp_socket(netns, a.address)  # a second flow the program leaves alone
    sender = _udp_socket(peer_netns, b.address)
    port = receiver.getsockname()[1]
    n = 25
    try:
        for drop in (0, 1):
            spec = ebpfkit.compile(text=COUNT_SRC, name="net_count.bpf.c")
            spec.rodata.update({"port": port, "drop": drop})
            spec.programs["tc_count"].autoload = False
            with spec.load() as obj:
                counts = obj.maps["counts"]
                link = netns.run(obj.programs["xdp_count"].attach_xdp, a.ifindex, mode)
                info = xdp_attached(netns.name, a.ifname)
                assert info == {"mode": mode, "prog_id": obj.programs["xdp_count"].info().id}
                assert _ip_link_xdp(netns.name, a.ifname) == ("xdpgeneric" if mode == "generic" else "xdp")

                payloads = [f"{mode}-{drop}-{i}".encode() * (i + 1) for i in range(n)]
                for p in payloads:
                    sender.sendto(p, (a.address, port))
                sender.sendto(b"sentinel", sentinel.getsockname())
                # the sentinel arrives after every datagram before it went through XDP
                assert _recv_all(sentinel, 1) == [b"sentinel"]
                assert counts[0] == n
                assert counts[1] == sum(14 + 20 + 8 + len(p) for p in payloads)
                if drop:
                    assert _nothing_waiting(receiver), "XDP_DROP let a datagram through"
                else:
                    assert _recv_all(receiver, n) == payloads

                if drop:
                    continue  # leave this link to the object's close()
                link.close()
                assert xdp_attached(netns.name, a.ifname) == {}
                assert _ip_link_xdp(netns.name, a.ifname) is None
                sender.sendto(b"after", (a.address, port))
                assert _recv_all(receiver, 1) == [b"after"]
                assert counts[0] == n  # detached: no longer counted
            assert xdp_attached(netns.name, a.ifname) == {}, "closing the object left XDP attached"
            assert _ip_link_xdp(netns.name, a.ifname) is None
    finally:
        for s in (receiver, sentinel, sender):
            s.close()


def test_xdp_live_frames_go_out_of_the_veth(veth_pair, netns, peer_netns):
    """test_run with BPF_F_TEST_XDP_LIVE_FRAMES carries XDP_TX out: each frame leaves end b
    and is counted by a program on end a (native XDP there also gives a the NAPI that veth
    needs to take XDP frames)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ebpfkit.engine import features
    from ebpfkit.engine.constants import BPF_F_TEST_XDP_LIVE_FRAMES
    from ebpfkit.errors import NotSupportedError

    a, b = veth_pair.a, veth_pair.b
    port, n = 9777, 1000
    frame = bytes(Ether(src=b.mac, dst=a.mac) / IP(src=b.address, dst=a.address)
                  / UDP(sport=1234, dport=port) / (b"x" * 18))
    spec = ebpfkit.compile(text=COUNT_SRC, name="net_count.bpf.c")
    spec.rodata.update({"port": port, "drop": 1})
    spec.programs["tc_count"].autoload = False
    with spec.load() as counter, ebpfkit.compile(text=TX_SRC, name="net_tx.bpf.c").load() as gen:
        netns.run(counter.programs["xdp_count"].attach_xdp, a.ifindex, "native")
        # struct xdp_md: data, data_end, data_meta, ingress_ifindex (the frames go out of it)
        ctx = struct.pack("IIIIII", 0, len(frame), 0, b.ifindex, 0, 0)
        if not features.probe("xdp_live_frames").supported:  # this kernel refuses it: said plainly
            with pytest.raises(NotSupportedError, match="cannot send live frames here"):
                peer_netns.run(gen.programs["xdp_tx"].test_run, frame, ctx, repeat=n,
                               flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=64)
            return
        result = peer_netns.run(gen.programs["xdp_tx"].test_run, frame, ctx, repeat=n,
                                flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=64)
        assert result.data == b""  # the frames went out, none came back
        counts = counter.maps["counts"]
        assert wait_for(lambda: counts[0] == n, 5), f"{counts[0]} of {n} frames arrived"
        assert counts[1] == n * len(frame)


def test_tc_ingress_on_veth_counts(veth_pair, netns, peer_netns):
    a, b = veth_pair.a, veth_pair.b
    receiver = _udp_socket(netns, a.address)
    sender = _udp_socket(peer_netns, b.address)
    port = receiver.getsockname()[1]
    n = 30
    try:
        spec = ebpfkit.compile(text=COUNT_SRC, name="net_count.bpf.c")
        spec.rodata["port"] = port
        spec.programs["xdp_count"].autoload = False
        with spec.load() as obj:
            counts = obj.maps["counts"]
            link = netns.run(obj.programs["tc_count"].attach_tc, a.ifindex, "ingress")
            payloads = [os.urandom(10 + i) for i in range(n)]
            for p in payloads:
                sender.sendto(p, (a.address, port))
            assert _recv_all(receiver, n) == payloads
            assert counts[0] == n
            assert counts[1] == sum(14 + 20 + 8 + len(p) for p in payloads)  # skb->len at ingress
            link.close()
            sender.sendto(b"after", (a.address, port))
            assert _recv_all(receiver, 1) == [b"after"]
            assert counts[0] == n  # detached: no longer counted
    finally:
        receiver.close()
        sender.close()


# --- cgroup hooks on a child cgroup, loopback traffic ---------------------------------------

def _key_of(sock) -> dict:
    """The sock_key the sockops program builds for ``sock``."""
    (lip, lport), (rip, rport) = sock.getsockname(), sock.getpeername()
    as_u32 = lambda ip: int.from_bytes(socket.inet_aton(ip), "little")  # noqa: E731 (raw NBO bytes)
    return {"sip": as_u32(lip), "dip": as_u32(rip), "sport": lport, "dport": rport}


def test_sockops_sk_msg_redirect_in_child_cgroup(child_cgroup):
    spec = ebpfkit.compile(text=SOCKMAP_SRC, name="net_sockmap.bpf.c")
    k = 300_000
    data = os.urandom(k)
    socks = []
    with spec.load() as obj:
        stats, sock_hash = obj.maps["stats"], obj.maps["sock_hash"]
        obj.programs["add_established"].attach_cgroup(child_cgroup.path)
        obj.programs["redirect_to_peer"].attach_sockmap(sock_hash)
        try:
            with child_cgroup.entered():  # the sockets must be born in the cgroup
                listener = socket.create_server(("127.0.0.1", 0))
                socks.append(listener)
                client = socket.create_connection(listener.getsockname(), timeout=10)
                socks.append(client)
                server, _ = listener.accept()
                socks.append(server)
                server.settimeout(10)

                assert wait_for(lambda: stats[0] == 2), f"sockops added {stats[0]} sockets, expected 2"
                keys = {tuple(key.values()) for key in sock_hash}
                assert keys == {tuple(_key_of(s).values()) for s in (client, server)}

                received = bytearray()

                def receive():
                    while len(received) < k:
                        chunk = server.recv(65536)
                        if not chunk:
                            break
                        received.extend(chunk)

                reader = threading.Thread(target=receive)
                reader.start()
                client.sendall(data)
                reader.join(15)
                assert not reader.is_alive(), f"only {len(received)} of {k} bytes arrived"
            assert bytes(received) == data
            assert stats[1] == k, f"sk_msg counted {stats[1]} bytes, sent {k}"
            assert stats[2] >= 1 and stats[3] == 0
        finally:
            for s in reversed(socks):
                s.close()


def test_cgroup_skb_egress_counts_udp_bytes(child_cgroup):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    outsider = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # made outside the cgroup
    sizes = [0, 1, 100, 1400, 5000, 60000]
    try:
        spec = ebpfkit.compile(text=EGRESS_SRC, name="net_egress.bpf.c")
        spec.rodata["port"] = receiver.getsockname()[1]
        with spec.load() as obj:
            egress = obj.maps["egress"]
            obj.programs["count_egress"].attach_cgroup(child_cgroup.path)
            payloads = [os.urandom(s) for s in sizes]
            with child_cgroup.entered():
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as inside:
                    for p in payloads:
                        inside.sendto(p, receiver.getsockname())
            for _ in range(3):
                outsider.sendto(b"not counted", receiver.getsockname())
            got = _recv_all(receiver, len(sizes) + 3)
            assert got == payloads + [b"not counted"] * 3
            assert egress[0] == len(sizes)
            assert egress[1] == sum(sizes)
    finally:
        receiver.close()
        outsider.close()
