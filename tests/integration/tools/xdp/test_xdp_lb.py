"""`ebpfkit xdp lb` end to end: a client namespace opens real TCP connections to a VIP; the
load balancer's XDP program (in its own namespace) forwards them at L2 to backends (each in
its own namespace, VIP on loopback) that answer the client directly.

    client ── sc ┐
    lb (XDP) ── sl ├ br0 (switch netns)
    backend i ── sbi ┘

Also BPF_PROG_TEST_RUN of the program against the Python model (Maglev table + flow hash),
XDP_REDIRECT through the devmap to a backend behind another interface, and bad input.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import sys
import fcntl
import ipaddress
import json
import socket
import struct
import subprocess
import threading
import time

import pytest

import ebpfkit
from ebpfkit.net import NetNS, in_netns, xdp_attached
from helpers import ek, ek_json, wait_for
from outputs import csv_tables, logged, table_sections

pytestmark = pytest.mark.integration

ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:aa")  # never let scapy look MACs up

XDP_DROP, XDP_PASS, XDP_TX = 1, 2, 3
VIP, PORT = "10.210.0.100", 8080
CLIENT_IP, LB_IP = "10.210.0.2", "10.210.0.1"
BACKENDS = [f"10.210.0.{11 + i}" for i in range(4)]
PASS_SRC = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
SEC("xdp") int xdp_pass(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "GPL";
"""


def stats_in_every_form(capsys, where, log) -> dict[str, tuple[dict, dict]]:
    """`xdp lb stats` as JSON, CSV, the table, and as the --log file kept each:
    {form: ({backend: packets}, {counter: packets})}."""
    forms = {}
    for fmt in ("json", "csv", "table"):
        rc, out, err = ek(capsys, "--log", log, "--no-color", "--format", fmt, "xdp", "lb", "stats", *where)
        assert rc == 0, err
        if fmt == "json":
            doc = json.loads(out)
            forms[fmt] = ({r["backend"]: r["packets"] for r in doc["backends"]},
                          {t["counter"]: t["packets"] for t in doc["totals"]})
        elif fmt == "csv":
            backends, totals = csv_tables(out)
            forms[fmt] = ({r["backend"]: int(r["packets"]) for r in backends},
                          {t["counter"]: int(t["packets"]) for t in totals})
        else:  # slot, backend, weight, packets, ...; counter, packets, ...
            table = table_sections(out, ["backends", "totals"])
            forms[fmt] = ({r[1]: int(r[3]) for r in table["backends"]}, {t[0]: int(t[1]) for t in table["totals"]})
    for index, doc in enumerate(logged(log, "xdp.lb.stats")):
        forms[f"log {index}"] = ({r["backend"]: r["packets"] for r in doc["backends"]},
                                 {t["counter"]: t["packets"] for t in doc["totals"]})
    assert len(forms) == 6
    return forms


# --- BPF_PROG_TEST_RUN --------------------------------------------------------------------------

def _model_backend(names_table, src, dst, sport, dport, proto=6):
    from ebpfkit.tools.xdp.lb import flow_hash

    return names_table[flow_hash(src, dst, sport, dport, proto) % len(names_table)]


def _fake_backends(addrs, ifindex=1):
    from ebpfkit.tools.xdp.lb import Backend

    return [Backend(ipaddress.ip_address(a), 1, f"02:00:00:00:01:{i:02x}", "02:00:00:00:00:aa", ifindex)
            for i, a in enumerate(addrs)]


def test_program_follows_the_maglev_model():
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether

    from ebpfkit.tools.xdp import maglev
    from ebpfkit.tools.xdp.lb import load_lb, parse_vip

    backends = _fake_backends(["192.0.2.11", "192.0.2.12", "192.0.2.13"])
    # test runs come in on loopback (ifindex 1): backends "behind" it are reached by XDP_TX
    obj, tables = load_lb(parse_vip(f"{VIP}:{PORT}/tcp"), backends, table_size=4099, xdp_ifindex=1)
    try:
        prog = obj.programs["xdp_lb"]
        model = maglev.build_table([b.name for b in backends], 4099)
        slot_names = {b.slot: b.name for b in tables.backends()}
        assert [slot_names[s] for s in tables.table()] == model
        mac_of = {b.name: b.dmac for b in backends}
        E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:aa")
        for sport in range(20000, 20300):
            for vlan in ((), (Dot1Q(vlan=5),)):
                pkt = E
                for v in vlan:
                    pkt = pkt / v
                frame = bytes(pkt / IP(src="10.0.0.2", dst=VIP) / TCP(sport=sport, dport=PORT))
                res = prog.test_run(frame)
                want = _model_backend(model, "10.0.0.2", VIP, sport, PORT)
                assert res.retval == XDP_TX
                assert res.data[:6].hex(":") == mac_of[want] and res.data[6:12].hex(":") == "02:00:00:00:00:aa"
                assert res.data[12:] == frame[12:], "only the MACs may change"
        # not for the VIP: passed untouched
        for other in (IP(src="10.0.0.2", dst=VIP) / TCP(dport=PORT + 1), IP(src="10.0.0.2", dst=VIP) / UDP(dport=PORT),
                      IP(src="10.0.0.2", dst="10.210.0.101") / TCP(dport=PORT),
                      IPv6(src="2001:db8::2", dst="2001:db8::100") / TCP(dport=PORT)):
            frame = bytes(E / other)
            res = prog.test_run(frame)
            assert res.retval == XDP_PASS and res.data == frame
        totals = tables.totals()
        assert totals["forwarded"][0] == totals["tx"][0] == 600
        assert totals["flow_miss"][0] == 300 and totals["flow_hit"][0] == 300  # VLAN copy: same 5-tuple
        assert totals["passed"][0] == 4
        assert sum(p for p, _ in tables.backend_counters().values()) == 600
    finally:
        tables.close()
        obj.close()


def test_ipv6_udp_vip_and_weights():
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
    from scapy.layers.l2 import Ether

    from ebpfkit.tools.xdp.lb import Backend, load_lb, parse_vip

    backends = [Backend(ipaddress.ip_address("2001:db8::11"), 1, "02:00:00:00:01:01", "02:00:00:00:00:aa", 1),
                Backend(ipaddress.ip_address("2001:db8::12"), 3, "02:00:00:00:01:02", "02:00:00:00:00:aa", 1)]
    obj, tables = load_lb(parse_vip("[2001:db8::100]:53/udp"), backends, table_size=4099, xdp_ifindex=1)
    try:
        prog = obj.programs["xdp_lb"]
        got = collections.Counter()
        for sport in range(10000, 12000):
            ext = (IPv6ExtHdrDestOpt(),) if sport % 2 else ()
            pkt = Ether(**ETH) / IPv6(src="2001:db8::2", dst="2001:db8::100")
            for e in ext:
                pkt = pkt / e
            res = prog.test_run(bytes(pkt / UDP(sport=sport, dport=53)))
            assert res.retval == XDP_TX
            got[res.data[:6].hex(":")] += 1
        assert 2.4 < got["02:00:00:00:01:02"] / got["02:00:00:00:01:01"] < 3.7  # weights 3:1
        owned = collections.Counter(tables.table())
        assert abs(owned[1] / owned[0] - 3) < 0.01
        other = bytes(Ether(**ETH) / IPv6(src="2001:db8::2", dst="2001:db8::100") / UDP(sport=1, dport=54))
        assert prog.test_run(other).retval == XDP_PASS
    finally:
        tables.close()
        obj.close()


def test_flow_cache_keeps_flows_and_removal_moves_only_its_own():
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from ebpfkit.tools.xdp.lb import load_lb, parse_vip

    backends = _fake_backends([f"192.0.2.{i}" for i in range(11, 16)])
    obj, tables = load_lb(parse_vip(f"{VIP}:{PORT}"), backends, xdp_ifindex=1)
    try:
        prog = obj.programs["xdp_lb"]

        def backend_of(sport):
            frame = bytes(Ether(**ETH) / IP(src="10.0.0.2", dst=VIP) / TCP(sport=sport, dport=PORT))
            res = prog.test_run(frame)
            assert res.retval == XDP_TX
            return res.data[:6].hex(":")

        before = {s: backend_of(s) for s in range(30000, 31000)}
        assert {s: backend_of(s) for s in before} == before  # the same 5-tuple, the same backend
        gone = backends[2]
        tables.change(delete=[gone.name], xdp_ifindex=1)
        after = {s: backend_of(s) for s in before}
        moved = {s for s in before if after[s] != before[s]}
        assert moved == {s for s in before if before[s] == gone.dmac}, "only the removed backend's flows move"
        assert gone.dmac not in after.values()
        # a new backend takes new flows; cached flows stay where they are
        new = _fake_backends(["192.0.2.99"])[0]
        new = type(new)(new.addr, 1, "02:00:00:00:01:99", new.smac, 1)
        tables.change(add=[new], xdp_ifindex=1)
        assert {s: backend_of(s) for s in before} == after
        fresh = collections.Counter(backend_of(s) for s in range(40000, 42000))
        assert fresh["02:00:00:00:01:99"] > 2000 / 5 * 0.7
    finally:
        tables.close()
        obj.close()


# --- the DSR topology ----------------------------------------------------------------------------

def _ipr(ns):
    from pyroute2 import IPRoute

    return IPRoute(netns=ns.name, flags=0)


def _sysctl(ns, *settings):
    subprocess.run(["ip", "netns", "exec", ns.name, "sysctl", "-qw", *settings], check=True)


def _veth_to_switch(ns, switch, name, port, address=None):
    """A veth from ``ns`` (``name``, with ``address``) to a port of the switch's bridge."""
    with _ipr(ns) as ipr:
        ipr.link("add", ifname=name, kind="veth", peer=port)
        ipr.link("set", index=ipr.link_lookup(ifname=port)[0], net_ns_fd=switch.name)
        idx = ipr.link_lookup(ifname=name)[0]
        if address:
            iface = ipaddress.ip_interface(address)
            ipr.addr("add", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen)
        ipr.link("set", index=idx, state="up")
    with _ipr(switch) as ipr:
        idx = ipr.link_lookup(ifname=port)[0]
        ipr.link("set", index=idx, master=ipr.link_lookup(ifname="br0")[0], state="up")


def _no_tx_checksum_offload(ns, ifname):
    """`ethtool -K IF tx off`: a frame XDP_TX'd out of a veth becomes a new skb without its
    checksum-offload state, so a sender on the same host must put the full checksum in it
    (a real NIC delivers complete checksums anyway)."""
    def work():
        value = ctypes.create_string_buffer(struct.pack("II", 0x17, 0))  # ETHTOOL_STXCSUM, off
        ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(value)).ljust(40, b"\0")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), 0x8946, ifreq)  # SIOCETHTOOL

    in_netns(ns.name, work)


class Server:
    """A tiny TCP server in a backend namespace: answers each connection with its name."""

    def __init__(self, ns, name):
        self.name = name
        self.sock = in_netns(ns.name, socket.create_server, (VIP, PORT), backlog=1024)
        self.sock.settimeout(0.2)
        self.served = 0
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(self.name.encode())
                self.served += 1
            # the server closes first: TIME_WAIT stays here, so clients may reuse their ports

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def dsr_lab():
    """The topology above; yields a dict of namespaces and servers. Removing the namespaces
    removes every veth and the bridge."""
    made = []
    servers = []
    links = []
    try:
        switch, client, lb = (NetNS(p).create() for p in ("lbswitch", "lbclient", "lbnode"))
        made += [switch, client, lb]
        backends = [NetNS(f"lbback{i}").create() for i in range(len(BACKENDS))]
        made += backends
        with _ipr(switch) as ipr:
            ipr.link("add", ifname="br0", kind="bridge")
            ipr.link("set", index=ipr.link_lookup(ifname="br0")[0], state="up")
        _veth_to_switch(client, switch, "c0", "sc", f"{CLIENT_IP}/24")
        _no_tx_checksum_offload(client, "c0")
        _veth_to_switch(lb, switch, "l0", "sl", f"{LB_IP}/24")
        for i, (ns, addr) in enumerate(zip(backends, BACKENDS)):
            _veth_to_switch(ns, switch, "b0", f"sb{i}", f"{addr}/24")
            with _ipr(ns) as ipr:
                ipr.addr("add", index=ipr.link_lookup(ifname="lo")[0], address=VIP, prefixlen=32)
            # the VIP is for local delivery only: never answer ARP for it
            _sysctl(ns, "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
            servers.append(Server(ns, addr))
        with _ipr(client) as ipr:
            ipr.route("add", dst=f"{VIP}/32", gateway=LB_IP)
        # XDP_TX on a veth hands the frame to its peer, which takes XDP frames only with
        # NAPI on: a pass-through XDP program on the bridge port does that
        obj = ebpfkit.compile(text=PASS_SRC, name="xdp_pass.bpf.c").load()
        links.append(obj)
        with _ipr(switch) as ipr:
            sl = ipr.link_lookup(ifname="sl")[0]
        in_netns(switch.name, obj.programs["xdp_pass"].attach_xdp, sl, "native")
        yield {"switch": switch, "client": client, "lb": lb, "backends": backends, "servers": servers}
    finally:
        for s in servers:
            s.close()
        for o in links:
            o.close()
        for ns in reversed(made):
            ns.close()


def _connect(lab, sport=0, attempts=20):
    """One connection from the client to the VIP: the backend's answer."""
    for attempt in range(attempts):
        s = in_netns(lab["client"].name, socket.socket, socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            if sport:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((CLIENT_IP, sport))
            s.connect((VIP, PORT))
            port = s.getsockname()[1]
            data = b""
            while chunk := s.recv(64):
                data += chunk
            return port, data.decode()
        except OSError as exc:
            # the previous connection on this port may still be closing (LAST_ACK)
            if not sport or exc.errno not in (98, 99) or attempt == attempts - 1:
                raise
            time.sleep(0.05)
        finally:
            s.close()


def _lb_args(lab):
    return ["--iface", "l0", "--netns", lab["lb"].name]


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_dsr_connections_spread_stick_and_survive_backend_removal(dsr_lab, capsys, tmp_path, mode):
    lab = dsr_lab
    where = _lb_args(lab)
    backend_args = [a for b in BACKENDS for a in ("--backend", b)]
    try:
        rc, out, err = ek(capsys, "xdp", "lb", "attach", *where, "--mode", mode,
                          "--vip", f"{VIP}:{PORT}/tcp", *backend_args)
        assert rc == 0, err
        assert xdp_attached(lab["lb"].name, "l0")["mode"] == mode

        n = 1200
        results = [_connect(lab) for _ in range(n)]  # every connection completes
        placed: dict[int, str] = {}
        for port, backend in results:  # ephemeral ports come round again: same 5-tuple
            assert placed.setdefault(port, backend) == backend, "the same 5-tuple changed backend"
        share = collections.Counter(backend for _, backend in results)
        assert set(share) == set(BACKENDS)
        for b in BACKENDS:
            assert abs(share[b] - n / len(BACKENDS)) <= 0.2 * n / len(BACKENDS), share
        # the LB saw every client packet; the answers went around it
        for form, (per_backend, totals) in stats_in_every_form(capsys, where, tmp_path / "stats.log").items():
            assert sum(per_backend.values()) == totals["forwarded"], form
            for b in BACKENDS:
                assert per_backend[b] >= 3 * share[b], form  # SYN, ACK, FIN(+ACK) per connection
            assert totals["no_backend"] == 0, form

        sample = sorted(placed)[:: max(1, n // 200)]
        again = {p: _connect(lab, p)[1] for p in sample}
        assert again == {p: placed[p] for p in sample}, "the same 5-tuple changed backend"

        gone = BACKENDS[1]
        rc, _, err = ek(capsys, "xdp", "lb", "backend", "del", *where, gone)
        assert rc == 0, err
        after = {p: _connect(lab, p)[1] for p in sample}
        moved = {p for p in sample if after[p] != placed[p]}
        assert moved == {p for p in sample if placed[p] == gone}, "only the removed backend's flows move"
        assert gone not in after.values()
        listed = ek_json(capsys, "xdp", "lb", "stats", *where)
        assert sorted(r["backend"] for r in listed["backends"]) == sorted(set(BACKENDS) - {gone})

        rc, _, err = ek(capsys, "xdp", "lb", "backend", "add", *where, gone)
        assert rc == 0, err
        fresh = collections.Counter(_connect(lab)[1] for _ in range(200))
        assert fresh[gone] > 0, "a re-added backend gets new flows"

        rc, _, err = ek(capsys, "xdp", "lb", "detach", *where)
        assert rc == 0, err
        assert xdp_attached(lab["lb"].name, "l0") == {}
    finally:
        ek(capsys, "xdp", "lb", "detach", *where)


def test_redirect_through_devmap_to_another_interface(capsys):
    """A backend behind a second interface of the load balancer is reached by XDP_REDIRECT;
    its answers are routed back by the load balancer's namespace."""
    made, objs = [], []
    try:
        client, lb, back = (NetNS(p).create() for p in ("rdclient", "rdlb", "rdback"))
        made += [client, lb, back]
        from ebpfkit.net import create_veth

        create_veth(client, lb, names=("c0", "l0"), addresses=("10.211.0.2/24", "10.211.0.1/24"))
        pair = create_veth(lb, back, names=("l1", "b0"), addresses=("10.212.0.1/24", "10.212.0.11/24"))
        _no_tx_checksum_offload(client, "c0")
        with _ipr(client) as ipr:
            ipr.route("add", dst=f"{VIP}/32", gateway="10.211.0.1")
        with _ipr(back) as ipr:
            ipr.addr("add", index=ipr.link_lookup(ifname="lo")[0], address=VIP, prefixlen=32)
            ipr.route("add", dst="default", gateway="10.212.0.1")
        _sysctl(lb, "net.ipv4.ip_forward=1")
        _sysctl(back, "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2")
        server = Server(back, "redirected")
        # redirected XDP frames are taken by a veth whose peer has NAPI: an XDP program there
        obj = ebpfkit.compile(text=PASS_SRC, name="xdp_pass.bpf.c").load()
        objs.append(obj)
        in_netns(back.name, obj.programs["xdp_pass"].attach_xdp, pair.b.ifindex, "native")
        where = ["--iface", "l0", "--netns", lb.name]
        rc, _, err = ek(capsys, "xdp", "lb", "attach", *where, "--mode", "native",
                        "--vip", f"{VIP}:{PORT}", "--backend", "10.212.0.11")
        assert rc == 0, err
        try:
            for _ in range(20):
                s = in_netns(client.name, socket.create_connection, (VIP, PORT), 5)
                with s:
                    assert s.recv(64) == b"redirected"
            totals = {t["counter"]: t["packets"] for t in ek_json(capsys, "xdp", "lb", "stats", *where)["totals"]}
            assert totals["redirect"] >= 60 and totals["tx"] == 0
        finally:
            ek(capsys, "xdp", "lb", "detach", *where)
            server.close()
    finally:
        for o in objs:
            o.close()
        for ns in reversed(made):
            ns.close()


def test_bad_input_is_a_clear_usage_error(veth_pair, capsys):
    where = ["--iface", veth_pair.a.ifname, "--netns", veth_pair.a.netns]
    cases = [
        ([*where, "--vip", f"{VIP}:{PORT}"], "has no backends"),
        ([*where, "--vip", "10.210.0.300:80", "--backend", "10.199.0.2"], "bad VIP"),
        ([*where, "--vip", "10.210.0.100", "--backend", "10.199.0.2"], "bad VIP"),
        ([*where, "--vip", "10.210.0.100:80/icmp", "--backend", "10.199.0.2"], "tcp, udp or sctp"),
        ([*where, "--vip", f"{VIP}:{PORT}", "--backend", "not-an-ip"], "bad backend"),
        ([*where, "--vip", f"{VIP}:{PORT}", "--backend", "10.199.0.2", "--backend", "10.199.0.2"],
         "given twice"),
        ([*where, "--vip", f"{VIP}:{PORT}", "--backend", "10.199.0.2", "--table-size", "65536"], "not prime"),
        ([*where, "--vip", f"{VIP}:{PORT}", "--backend", "192.0.2.1"], "not reachable"),
        (["--iface", "nosuch0", "--netns", veth_pair.a.netns, "--vip", f"{VIP}:{PORT}", "--backend", "10.199.0.2"],
         "no interface"),
    ]
    for args, message in cases:
        rc, _, err = ek(capsys, "xdp", "lb", "attach", *args)
        assert rc == 2, f"{args}: exit {rc}: {err}"
        assert message in err and "Traceback" not in err, f"{args}: {err}"
    assert xdp_attached(veth_pair.a.netns, veth_pair.a.ifname) == {}
    try:
        rc, _, err = ek(capsys, "xdp", "lb", "attach", *where, "--vip", f"{VIP}:{PORT}", "--backend", "10.199.0.2")
        assert rc == 0, err
        rc, _, err = ek(capsys, "xdp", "lb", "backend", "del", *where, "10.199.0.2")
        assert rc == 2 and "at least one backend" in err
        rc, _, err = ek(capsys, "xdp", "lb", "backend", "add", *where, "10.199.0.2")
        assert rc == 2 and "already a backend" in err
        rc, _, err = ek(capsys, "xdp", "filter", "rules", "list", *where)
        assert rc == 1 and "not an ebpfkit XDP filter" in err
    finally:
        ek(capsys, "xdp", "lb", "detach", *where)
    assert xdp_attached(veth_pair.a.netns, veth_pair.a.ifname) == {}


def test_foreground_run_killed_leaves_nothing_attached(veth_pair, capsys):
    where = ["--iface", veth_pair.a.ifname, "--netns", veth_pair.a.netns]
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "xdp", "lb", "run", *where, "--vip", f"{VIP}:{PORT}",
                             "--backend", veth_pair.b.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    attached = lambda: xdp_attached(veth_pair.a.netns, veth_pair.a.ifname)  # noqa: E731
    try:
        wait_for(lambda: attached() or proc.poll() is not None, 30)
        assert attached(), proc.stderr.read().decode() if proc.poll() is not None else "never attached"
        pins = f"/sys/fs/bpf/ebpfkit/xdp/{veth_pair.a.ifname}@{veth_pair.a.netns}"
        assert not os.path.exists(pins), "a foreground run pinned"
        listed = ek_json(capsys, "xdp", "lb", "stats", *where)  # found through the attached program
        assert [b["backend"] for b in listed["backends"]] == [veth_pair.b.address]
        proc.send_signal(signal.SIGKILL)
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    wait_for(lambda: not attached(), 5)
    assert attached() == {}, "the kernel kept the program of a killed foreground run"
    assert not os.path.exists(pins)
    rc, _, err = ek(capsys, "xdp", "lb", "detach", *where)
    assert rc == 0 and "nothing was attached" in err


# --- from Python: the session -------------------------------------------------------------------

MARK = b"EKLB|"


def _frames_back(sock, want: int, timeout: float = 5.0) -> collections.Counter:
    """Destination MAC -> how many marked frames came back out of the load balancer."""
    seen: collections.Counter = collections.Counter()
    deadline = time.monotonic() + timeout
    sock.settimeout(0.2)
    while sum(seen.values()) < want and time.monotonic() < deadline:
        try:
            frame, addr = sock.recvfrom(65535)
        except socket.timeout:
            continue
        if addr[2] != socket.PACKET_OUTGOING and MARK in frame:
            seen[frame[:6].hex(":")] += 1
    return seen


def test_lb_session_spreads_exactly_the_packets_sent_and_detaches(veth_pair):
    """open_lb() attaches (pinning nothing); every frame the peer sends to the VIP comes back
    out towards the backend the Maglev model picks, sample() counts exactly those per backend,
    attached_lb() reads the same through the program, and close() leaves nothing attached."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from ebpfkit.tools import xdp
    from ebpfkit.tools.xdp import maglev
    from ebpfkit.tools.xdp.pins import NotAttachedError

    pair = veth_pair
    fake_mac = "02:00:00:00:00:33"
    macs = {pair.b.address: pair.b.mac.lower(), "10.199.0.3": fake_mac}  # .3: no host, MAC given
    model = maglev.build_table(list(macs), 4099)
    n = 60
    frames = [bytes(Ether(src=pair.b.mac, dst=pair.a.mac) / IP(src=pair.b.address, dst=VIP)
                    / TCP(sport=30000 + i, dport=PORT, flags="S") / MARK) for i in range(n)]
    expected = collections.Counter(_model_backend(model, pair.b.address, VIP, 30000 + i, PORT) for i in range(n))
    assert len(expected) == 2, "the model sends every flow to one backend: pick other ports"
    rx = in_netns(pair.b.netns, socket.socket, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    tx = in_netns(pair.b.netns, socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        rx.bind((pair.b.ifname, 0))
        tx.bind((pair.b.ifname, 0))
        with xdp.open_lb(iface=pair.a.ifname, netns=pair.a.netns, vip=f"{VIP}:{PORT}/tcp",
                         backends=[pair.b.address, f"10.199.0.3,mac={fake_mac}"], table_size=4099,
                         mode="generic") as session:
            prog = session.prog_id
            assert xdp_attached(pair.a.netns, pair.a.ifname)["prog_id"] == prog
            assert not os.path.exists(f"/sys/fs/bpf/ebpfkit/xdp/{pair.a.ifname}@{pair.a.netns}"), "a session pinned"
            for frame in frames:
                tx.send(frame)
            back = _frames_back(rx, n)
            assert back == collections.Counter({macs[b]: k for b, k in expected.items()})
            doc = session.sample()
            counted = {b["backend"]: b["packets"] for b in doc["backends"]}
            assert counted == {b: expected.get(b, 0) for b in macs}
            assert sum(counted.values()) == n
            assert sum(b["bytes"] for b in doc["backends"]) == sum(map(len, frames))
            totals = {t["counter"]: t["packets"] for t in doc["totals"]}
            assert totals["forwarded"] == totals["tx"] == n
            assert (doc["vip"], doc["table_size"], doc["mode"]) == (f"{VIP}:{PORT}/tcp", 4099, "generic")
            with xdp.attached_lb(pair.a.ifname, pair.a.netns) as reader:  # found through the program
                assert {b["backend"]: b["packets"] for b in reader.sample()["backends"]} == counted
            assert xdp_attached(pair.a.netns, pair.a.ifname)["prog_id"] == prog
    finally:
        rx.close()
        tx.close()
    assert xdp_attached(pair.a.netns, pair.a.ifname) == {}, "still attached after close()"
    assert not os.path.exists(f"/sys/fs/bpf/ebpfkit/xdp/{pair.a.ifname}@{pair.a.netns}")
    with pytest.raises(NotAttachedError, match="no ebpfkit XDP load balancer is attached"):
        xdp.attached_lb(pair.a.ifname, pair.a.netns)
