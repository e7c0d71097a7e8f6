"""`ebpfkit xdp filter` end to end, against ground truth the tests make themselves.

Program logic: BPF_PROG_TEST_RUN on frames built with scapy (VLAN, QinQ, IPv6 extension
headers, fragments, every truncation). On a veth between two test namespaces: frames injected
on the far end (AF_PACKET), and what XDP let through seen by a packet socket on the near end
(it sees exactly what XDP passed) and by a UDP socket; both native and generic XDP; per-rule
counters against the packets sent per rule; rule changes while traffic flows; bad input;
detach and SIGKILL leave nothing attached.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ebpfkit.net import in_netns, xdp_attached
from helpers import ek, ek_json, force_receive_buffer, wait_for
from outputs import csv_tables, logged, table_sections

pytestmark = pytest.mark.integration

ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:aa")  # never let scapy look MACs up

XDP_DROP, XDP_PASS = 1, 2
PIN_ROOT = "/sys/fs/bpf/ebpfkit"


# --- helpers -------------------------------------------------------------------------------------

MARK = b"EKX|"


def payload(case: int, seq: int) -> bytes:
    return MARK + f"{case}|{seq}|".encode() + b"." * 24


class Wire:
    """Injects frames on the far end of the veth and records, by marker, the frames the near
    end received (a packet socket there sees exactly what XDP passed)."""

    def __init__(self, pair):
        self.pair = pair
        self.tx = in_netns(pair.b.netns, socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0)
        self.tx.bind((pair.b.ifname, 0))
        self.rx = in_netns(pair.a.netns, socket.socket, socket.AF_PACKET, socket.SOCK_RAW,
                           socket.htons(3))  # ETH_P_ALL
        self.rx.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE: never the bottleneck
        self.rx.bind((pair.a.ifname, 0))
        self.rx.settimeout(0.2)
        self.seen: dict[int, set] = {}
        self.lock = threading.Lock()
        self._stop = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while not self._stop:
            try:
                frame, addr = self.rx.recvfrom(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            i = frame.find(MARK)
            if i < 0:
                continue
            case, seq = frame[i + len(MARK):].split(b"|")[:2]
            with self.lock:
                self.seen.setdefault(int(case), set()).add(int(seq))

    def send(self, frame: bytes) -> None:
        self.tx.send(frame)

    def received(self, case: int) -> set:
        with self.lock:
            return set(self.seen.get(case, ()))

    def settle(self, sentinel_frame: bytes, case: int, timeout: float = 5.0) -> None:
        """Send an always-allowed frame and wait for it: what was sent before has been judged."""
        deadline = time.monotonic() + timeout
        n = 0
        while not self.received(case):
            assert time.monotonic() < deadline, "the sentinel frame never arrived"
            self.send(sentinel_frame)
            n += 1
            time.sleep(0.05)
        time.sleep(0.1)

    def close(self):
        self._stop = True
        self._reader.join(2)
        self.tx.close()
        self.rx.close()


@pytest.fixture
def wire(veth_pair):
    w = Wire(veth_pair)
    yield w
    w.close()


def _attached(pair) -> dict:
    return xdp_attached(pair.a.netns, pair.a.ifname)


def _no_pins_for(pair) -> bool:
    return not os.path.exists(f"{PIN_ROOT}/xdp/{pair.a.ifname}@{pair.a.netns}")


# --- program logic through BPF_PROG_TEST_RUN -------------------------------------------------------

RULES = [
    "src 192.0.2.0/25",                  # 1
    "src 2001:db8:bad::/48",             # 2
    "dst 198.51.100.77",                 # 3
    "proto udp dport 5353",              # 4
    "proto tcp sport 6666",              # 5
    "src 203.0.113.0/24 proto udp dport 9000",  # 6
    "proto icmp",                        # 7
    "dst 2001:db8:dead::/64 dport 443",  # 8 (tcp, udp, sctp, udplite)
]


def _cases():
    """(label, scapy packet, rule id that must match or 0)."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.inet6 import (IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
                                    IPv6ExtHdrRouting)
    from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
    from scapy.layers.sctp import SCTP

    E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    ok4, ok6 = "10.1.1.1", "2001:db8:1::1"
    return [
        ("src cidr low edge", E / IP(src="192.0.2.0", dst=ok4) / UDP(dport=1), 1),
        ("src cidr high edge", E / IP(src="192.0.2.127", dst=ok4) / UDP(dport=1), 1),
        ("src just above", E / IP(src="192.0.2.128", dst=ok4) / UDP(dport=1), 0),
        ("src just below", E / IP(src="192.0.1.255", dst=ok4) / UDP(dport=1), 0),
        ("vlan", E / Dot1Q(vlan=100) / IP(src="192.0.2.5", dst=ok4) / UDP(dport=1), 1),
        ("qinq", E / Dot1AD(vlan=7) / Dot1Q(vlan=100) / IP(src="192.0.2.6", dst=ok4) / UDP(dport=1), 1),
        ("vlan allowed", E / Dot1Q(vlan=100) / IP(src="192.0.3.6", dst=ok4) / UDP(dport=1), 0),
        ("v6 src", E / IPv6(src="2001:db8:bad:ffff::1", dst=ok6) / UDP(dport=1), 2),
        ("v6 src edge out", E / IPv6(src="2001:db8:bae::", dst=ok6) / UDP(dport=1), 0),
        ("dst /32", E / IP(src=ok4, dst="198.51.100.77") / TCP(dport=80), 3),
        ("dst next", E / IP(src=ok4, dst="198.51.100.78") / TCP(dport=80), 0),
        ("udp dport", E / IP(src=ok4, dst=ok4) / UDP(dport=5353), 4),
        ("udp dport v6", E / IPv6(src=ok6, dst=ok6) / UDP(dport=5353), 4),
        ("tcp 5353 is not udp", E / IP(src=ok4, dst=ok4) / TCP(dport=5353), 0),
        ("udp other port", E / IP(src=ok4, dst=ok4) / UDP(dport=5354), 0),
        ("v6 ext headers", E / IPv6(src=ok6, dst=ok6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting()
         / IPv6ExtHdrDestOpt() / UDP(dport=5353), 4),
        ("v6 first fragment", E / IPv6(src=ok6, dst=ok6) / IPv6ExtHdrFragment(m=1) / UDP(dport=5353), 4),
        ("v6 later fragment", E / IPv6(src=ok6, dst=ok6) / IPv6ExtHdrFragment(offset=8, nh=17)
         / (b"\x14\xe9\x14\xe9" + b"x" * 12), 0),
        ("v4 later fragment", E / IP(src=ok4, dst=ok4, frag=8, proto=17) / (b"\x14\xe9\x14\xe9" * 4), 0),
        ("tcp sport", E / IP(src=ok4, dst=ok4) / TCP(sport=6666, dport=1), 5),
        ("tcp dport is not sport", E / IP(src=ok4, dst=ok4) / TCP(sport=1, dport=6666), 0),
        ("cidr+port", E / IP(src="203.0.113.5", dst=ok4) / UDP(dport=9000), 6),
        ("cidr+other port", E / IP(src="203.0.113.5", dst=ok4) / UDP(dport=9001), 0),
        ("cidr+other proto", E / IP(src="203.0.113.5", dst=ok4) / TCP(dport=9000), 0),
        ("icmp", E / IP(src=ok4, dst=ok4) / ICMP(), 7),
        ("v6 dst + any-proto port (sctp)", E / IPv6(src=ok6, dst="2001:db8:dead::1") / SCTP(dport=443), 8),
        ("v6 dst, port mismatch", E / IPv6(src=ok6, dst="2001:db8:dead::1") / TCP(dport=444), 0),
        ("ip options", E / IP(src="192.0.2.9", dst=ok4, options=b"\x94\x04\x00\x00") / UDP(dport=1), 1),
    ]


@pytest.fixture(scope="module")
def loaded_filter():
    from ebpfkit.tools.xdp.filter import load_filter
    from ebpfkit.tools.xdp.rules import parse_rule

    obj, tables = load_filter([parse_rule(r) for r in RULES])
    yield obj, tables
    tables.close()
    obj.close()


def _reset(tables):
    tables.maps["totals"].clear()
    tables.maps["rule_stats"].clear()


def test_rules_match_by_test_run(loaded_filter):
    obj, tables = loaded_filter
    _reset(tables)
    prog = obj.programs["xdp_filter"]
    hits: dict[int, int] = {}
    for label, pkt, rule in _cases():
        res = prog.test_run(bytes(pkt))
        assert res.retval == (XDP_DROP if rule else XDP_PASS), f"{label}: retval {res.retval}"
        if rule:
            hits[rule] = hits.get(rule, 0) + 1
    counters = tables.rule_counters(range(1, len(RULES) + 1))
    assert {r: c[0] for r, c in counters.items() if c[0]} == hits
    totals = tables.totals()
    assert totals["dropped"][0] == totals["matched"][0] == sum(hits.values())
    assert totals["passed"][0] == len(_cases()) - sum(hits.values())


def test_truncated_and_malformed_frames_are_counted_not_trusted(loaded_filter):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
    from scapy.layers.l2 import Dot1Q, Ether

    obj, tables = loaded_filter
    _reset(tables)
    prog = obj.programs["xdp_filter"]
    E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    full = [bytes(E / Dot1Q(vlan=3) / IP(src="192.0.2.1", dst="10.0.0.1") / TCP(sport=6666)),
            bytes(E / IPv6(src="2001:db8:bad::1", dst="2001:db8::1") / IPv6ExtHdrDestOpt()
                  / TCP(sport=6666))]
    malformed = 0
    for frame in full:
        assert prog.test_run(frame).retval == XDP_DROP
        # every cut short of the whole frame (XDP test runs need the 14-byte Ethernet header)
        for n in range(14, len(frame)):
            res = prog.test_run(frame[:n])
            assert res.retval == XDP_PASS, f"frame cut at {n} bytes: {res.retval}"
            malformed += 1
    bad_ihl = bytearray(bytes(E / IP(src="192.0.2.1", dst="10.0.0.1") / TCP()))
    bad_ihl[14] = 0x43  # IHL 3 < 5
    assert prog.test_run(bytes(bad_ihl)).retval == XDP_PASS
    too_many_tags = bytes(E / Dot1Q() / Dot1Q() / Dot1Q() / IP(src="192.0.2.1") / TCP())
    assert prog.test_run(too_many_tags).retval == XDP_PASS
    totals = tables.totals()
    # 14 bytes is a bare Ethernet header of an IP frame: malformed too
    assert totals["malformed"][0] == malformed + 2
    assert totals["dropped"][0] == 2


def test_default_deny_and_dry_run_by_test_run():
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import ARP, Ether

    from ebpfkit.tools.xdp.filter import FilterConfig, load_filter
    from ebpfkit.tools.xdp.rules import parse_rule

    E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    allowed = bytes(E / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=53))
    other = bytes(E / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=54))
    arp = bytes(E / ARP())
    for dry in (False, True):
        obj, tables = load_filter([parse_rule("udp dport 53")], FilterConfig(default_deny=True, dry_run=dry))
        try:
            prog = obj.programs["xdp_filter"]
            assert prog.test_run(allowed).retval == XDP_PASS
            assert prog.test_run(other).retval == (XDP_PASS if dry else XDP_DROP)
            assert prog.test_run(arp).retval == XDP_PASS  # the link keeps working
            t = tables.totals()
            assert (t["would_drop"][0], t["dropped"][0]) == ((1, 0) if dry else (0, 1))
            assert t["control"][0] == 1 and tables.rule_counters([1])[1][0] == 1
        finally:
            tables.close()
            obj.close()


def test_atomic_change_by_test_run(loaded_filter):
    """A change that swaps one rule for another that also matches: the packet is dropped before,
    after, and by each set in between; ids of deleted rules are not reused."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ebpfkit.tools.xdp.rules import parse_rule

    from ebpfkit.tools.xdp.filter import RETIRED

    obj, tables = loaded_filter
    _reset(tables)
    prog = obj.programs["xdp_filter"]
    frame = bytes(Ether(**ETH) / IP(src="100.64.0.9", dst="10.0.0.1") / UDP(dport=7000))
    assert prog.test_run(frame).retval == XDP_PASS
    (x,) = tables.apply(add=[parse_rule("src 100.64.0.0/10")])
    seen = {x}
    for _ in range(3):
        (y,) = tables.apply(add=[parse_rule("udp dport 7000")], delete=[x])
        assert y not in seen
        assert prog.test_run(frame).retval == XDP_DROP
        assert tables.rules(0) == tables.rules(1)  # both sets in step after each change
        (x,) = tables.apply(add=[parse_rule("src 100.64.0.0/10")], delete=[y])
        assert prog.test_run(frame).retval == XDP_DROP
        seen |= {x, y}
    tables.apply(delete=[x])
    assert prog.test_run(frame).retval == XDP_PASS
    # each drop was counted on a rule since deleted: the totals keep them all
    totals = tables.totals()
    assert totals["matched"] == totals["dropped"] == (6, 6 * len(frame))
    assert totals["passed"] == (2, 2 * len(frame))
    assert tables.rule_counters([RETIRED])[RETIRED] == (6, 6 * len(frame))
    assert not any(c[0] for c in tables.rule_counters(seen).values())  # zeroed for reuse


# --- on a veth ----------------------------------------------------------------------------------

RULE_FILE = """\
default: allow
rules:
  - src: 192.0.2.0/25
  - src: 2001:db8:bad::/48
  - dst: 10.199.0.77
  - {proto: udp, dport: 5353, comment: mdns}
  - {src: 203.0.113.0/24, proto: udp, dport: 9000}
  - proto: icmp
"""


def _wire_cases(pair):
    """(case id, frame factory(seq), rule id or 0) sent across the veth."""
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
    from scapy.layers.l2 import Dot1Q, Ether

    E = lambda: Ether(src=pair.b.mac, dst=pair.a.mac)  # noqa: E731
    me, me6 = pair.a.address, "fd00:199::1"
    cases = [
        (1, lambda s: E() / IP(src="192.0.2.0", dst=me) / UDP(sport=1000, dport=4000), 1),
        (2, lambda s: E() / IP(src="192.0.2.127", dst=me) / UDP(sport=1000, dport=4000), 1),
        (3, lambda s: E() / IP(src="192.0.2.128", dst=me) / UDP(sport=1000, dport=4000), 0),
        (4, lambda s: E() / IP(src="192.0.1.255", dst=me) / UDP(sport=1000, dport=4000), 0),
        (5, lambda s: E() / Dot1Q(vlan=100) / IP(src="192.0.2.64", dst=me) / UDP(dport=4000), 1),
        (6, lambda s: E() / Dot1Q(vlan=100) / IP(src="192.0.2.200", dst=me) / UDP(dport=4000), 0),
        (7, lambda s: E() / IPv6(src="2001:db8:bad:1::9", dst=me6) / UDP(dport=4000), 2),
        (8, lambda s: E() / IPv6(src="2001:db8:bae::9", dst=me6) / UDP(dport=4000), 0),
        (9, lambda s: E() / IP(src="10.199.0.2", dst="10.199.0.77") / UDP(dport=4000), 3),
        (10, lambda s: E() / IP(src="10.199.0.2", dst=me) / UDP(dport=5353), 4),
        (11, lambda s: E() / IPv6(src="fd00:199::2", dst=me6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
         / UDP(dport=5353), 4),
        (12, lambda s: E() / IP(src="203.0.113.7", dst=me) / UDP(dport=9000), 5),
        (13, lambda s: E() / IP(src="203.0.113.7", dst=me) / UDP(dport=9001), 0),
        (14, lambda s: E() / IP(src="10.199.0.2", dst=me) / ICMP(), 6),
        (15, lambda s: E() / IP(src="10.199.0.2", dst=me) / UDP(dport=4000), 0),
    ]
    return [(c, (lambda s, f=f, c=c: bytes(f(s) / payload(c, s))), r) for c, f, r in cases]


SENTINEL = 99


def _sentinel(pair):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src=pair.b.mac, dst=pair.a.mac) / IP(src="10.199.0.2", dst=pair.a.address)
                 / UDP(dport=4001) / payload(SENTINEL, 0))


def stats_in_other_forms(capsys, where, log) -> dict[str, tuple[dict, dict]]:
    """`xdp filter stats` as CSV, as the table, and as the --log file kept each:
    {form: ({rule id: packets}, {counter: packets})}."""
    forms = {}
    rc, out, err = ek(capsys, "--log", log, "--format", "csv", "xdp", "filter", "stats", *where)
    assert rc == 0, err
    rules, totals = csv_tables(out)
    forms["csv"] = ({int(r["id"]): int(r["packets"]) for r in rules},
                    {t["counter"]: int(t["packets"]) for t in totals})
    rc, out, err = ek(capsys, "--log", log, "--no-color", "xdp", "filter", "stats", *where)
    assert rc == 0, err
    table = table_sections(out, ["rules", "totals"])  # id, rule..., packets, bytes, pps, bps
    forms["table"] = ({int(r[0]): int(r[-4]) for r in table["rules"]},
                      {t[0]: int(t[1]) for t in table["totals"]})
    for index, doc in enumerate(logged(log, "xdp.filter.stats")):
        forms[f"log {index}"] = ({r["id"]: r["packets"] for r in doc["rules"]},
                                 {t["counter"]: t["packets"] for t in doc["totals"]})
    assert len(forms) == 4
    return forms


def _filter_args(pair):
    return ["--iface", pair.a.ifname, "--netns", pair.a.netns]


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_veth_drops_exactly_the_blocked_packets(veth_pair, wire, capsys, tmp_path, mode):
    pair = veth_pair
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(RULE_FILE)
    where = _filter_args(pair)
    # a real socket too: allowed datagrams reach applications
    app = in_netns(pair.a.netns, socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    # room for the burst: a veth's native XDP path before 6.x builds each skb from a page
    # (truesize ~4.5 KB), and the default receive buffer then drops the last datagrams
    force_receive_buffer(app, 4 << 20)
    app.bind(("0.0.0.0", 4000))
    try:
        rc, out, err = ek(capsys, "xdp", "filter", "attach", *where, "--mode", mode, "-f", rule_file)
        assert rc == 0, err
        assert _attached(pair)["mode"] == mode
        listed = ek_json(capsys, "xdp", "filter", "stats", *where)
        assert [r["rule"] for r in listed["rules"]] == [
            "src 192.0.2.0/25", "src 2001:db8:bad::/48", "dst 10.199.0.77/32", "proto udp dport 5353",
            "src 203.0.113.0/24 proto udp dport 9000", "proto icmp"]

        n = 20
        cases = _wire_cases(pair)
        for seq in range(n):
            for _, build, _ in cases:
                wire.send(build(seq))
        wire.settle(_sentinel(pair), SENTINEL)

        for case, _, rule in cases:
            got = wire.received(case)
            assert got == (set() if rule else set(range(n))), f"case {case} (rule {rule}): {sorted(got)}"
        app.settimeout(0.5)
        delivered: dict[int, set] = {}
        try:
            while True:
                case, seq = app.recv(2048)[len(MARK):].split(b"|")[:2]
                delivered.setdefault(int(case), set()).add(int(seq))
        except socket.timeout:
            pass
        assert delivered.get(15) == set(range(n))  # an allowed datagram from a neighbour
        blocked = {case for case, _, rule in cases if rule}
        assert not blocked & set(delivered), "a blocked datagram reached the application"

        stats = ek_json(capsys, "xdp", "filter", "stats", *where)
        expected = {}
        for _, _, rule in cases:
            if rule:
                expected[rule] = expected.get(rule, 0) + n
        assert {r["id"]: r["packets"] for r in stats["rules"]} == {i: expected.get(i, 0) for i in range(1, 7)}
        totals = {t["counter"]: t["packets"] for t in stats["totals"]}
        assert totals["dropped"] == totals["matched"] == sum(expected.values())
        assert totals["would_drop"] == 0 and totals["malformed"] == 0
        assert stats["mode"] == mode and stats["default"] == "allow"
        for form, (rules, form_totals) in stats_in_other_forms(capsys, where, tmp_path / "stats.log").items():
            assert rules == {i: expected.get(i, 0) for i in range(1, 7)}, form
            truth = ("dropped", "matched", "would_drop", "malformed")  # "passed" has strays (IPv6 ND)
            assert {k: form_totals[k] for k in truth} == {k: totals[k] for k in truth}, form

        rc, _, err = ek(capsys, "xdp", "filter", "detach", *where)
        assert rc == 0, err
        assert _attached(pair) == {} and _no_pins_for(pair)
    finally:
        app.close()
        ek(capsys, "xdp", "filter", "detach", *where)


def test_dry_run_passes_everything_but_counts(veth_pair, wire, capsys, tmp_path):
    pair = veth_pair
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(RULE_FILE)
    where = _filter_args(pair)
    try:
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *where, "-f", rule_file, "--dry-run")
        assert rc == 0, err
        n = 10
        cases = _wire_cases(pair)
        for seq in range(n):
            for _, build, _ in cases:
                wire.send(build(seq))
        wire.settle(_sentinel(pair), SENTINEL)
        for case, _, _ in cases:
            assert wire.received(case) == set(range(n)), f"dry run dropped case {case}"
        stats = ek_json(capsys, "xdp", "filter", "stats", *where)
        totals = {t["counter"]: t["packets"] for t in stats["totals"]}
        blocked = n * sum(1 for *_, rule in cases if rule)
        assert totals["would_drop"] == totals["matched"] == blocked
        assert totals["dropped"] == 0
        assert stats["dry_run"] is True
    finally:
        ek(capsys, "xdp", "filter", "detach", *where)


def test_default_deny_allows_only_the_rules(veth_pair, wire, capsys):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pair = veth_pair
    where = _filter_args(pair)
    E = lambda: Ether(src=pair.b.mac, dst=pair.a.mac)  # noqa: E731
    try:
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *where, "--default", "deny",
                        "--dport", "udp:4001", "--src", "10.199.0.3/32")
        assert rc == 0, err
        for seq in range(10):
            wire.send(bytes(E() / IP(src="10.199.0.9", dst=pair.a.address) / UDP(dport=4000) / payload(1, seq)))
            wire.send(bytes(E() / IP(src="10.199.0.3", dst=pair.a.address) / UDP(dport=4000) / payload(2, seq)))
        wire.settle(_sentinel(pair), SENTINEL)  # the sentinel goes to udp 4001: allowed
        assert wire.received(1) == set() and wire.received(2) == set(range(10))
        stats = ek_json(capsys, "xdp", "filter", "stats", *where)
        hits = {r["rule"]: r["packets"] for r in stats["rules"]}
        assert hits["src 10.199.0.3/32"] == 10
        assert {t["counter"]: t["packets"] for t in stats["totals"]}["dropped"] >= 10
    finally:
        ek(capsys, "xdp", "filter", "detach", *where)


def test_rule_changes_under_traffic(veth_pair, wire, capsys):
    """Allowed traffic flows throughout and loses nothing; a probe that one of two rules always
    blocks is never seen while the rules are swapped for each other in single changes; a rule
    added from the CLI takes effect and its removal too."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ebpfkit.tools.xdp.filter import open_pinned
    from ebpfkit.tools.xdp.rules import parse_rule

    pair = veth_pair
    where = _filter_args(pair)
    E = Ether(src=pair.b.mac, dst=pair.a.mac)
    allowed = lambda s: bytes(E / IP(src="10.199.0.2", dst=pair.a.address) / UDP(dport=4000) / payload(1, s))  # noqa
    probe = lambda s: bytes(E / IP(src="203.0.113.9", dst=pair.a.address) / UDP(dport=7000) / payload(2, s))  # noqa
    victim = lambda s: bytes(E / IP(src="198.51.100.9", dst=pair.a.address) / UDP(dport=4000) / payload(3, s))  # noqa
    sent = {1: 0, 2: 0, 3: 0}
    stop = threading.Event()

    def traffic():
        s = 0
        while not stop.is_set():
            wire.send(allowed(s))
            wire.send(probe(s))
            wire.send(victim(s))
            s += 1
            sent.update({1: s, 2: s, 3: s})
            time.sleep(0.0005)

    try:
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *where, "--src", "203.0.113.0/24")
        assert rc == 0, err
        sender = threading.Thread(target=traffic)
        sender.start()
        try:
            time.sleep(0.3)
            with open_pinned(pair.a.ifname, pair.a.netns) as tables:
                x = 1
                for _ in range(15):
                    (y,) = tables.apply(add=[parse_rule("udp dport 7000")], delete=[x])
                    (x,) = tables.apply(add=[parse_rule("src 203.0.113.0/24")], delete=[y])
            before_block = len(wire.received(3))
            rc, _, err = ek(capsys, "xdp", "filter", "rules", "add", *where, "--src", "198.51.100.0/24")
            assert rc == 0, err
            time.sleep(0.3)
            blocked_at = len(wire.received(3))
            time.sleep(0.3)
            assert len(wire.received(3)) == blocked_at, "the added rule did not take effect"
            assert blocked_at >= before_block
            # live rates while traffic flows: two samples 0.3 s apart, one JSON object each,
            # against the rate the sender kept up meanwhile (an emulated machine's is a tenth)
            started, sent_before = time.monotonic(), sent[1]
            rc, out, err = ek(capsys, "--format", "json", "xdp", "filter", "stats", *where, "0.3", "2")
            offered = (sent[1] - sent_before) / (time.monotonic() - started)  # of each kind, per s
            assert rc == 0, err
            samples = [json.loads(line) for line in out.splitlines()]
            assert len(samples) == 2 and all(0.2 < s["interval"] < 1.0 for s in samples)
            rates = {t["counter"]: t for t in samples[-1]["totals"]}
            near = lambda pps, kinds: kinds * offered / 2 <= pps <= kinds * offered * 2  # noqa: E731
            # passed: the allowed ones; dropped: the probes and the victims, now blocked
            assert near(rates["passed"]["pps"], 1) and near(rates["dropped"]["pps"], 2), (rates, offered)
            assert rates["passed"]["bps"] >= 8 * 60 * rates["passed"]["pps"] * 0.9
            listed = samples[-1]
            victim_id = next(r["id"] for r in listed["rules"] if r["rule"] == "src 198.51.100.0/24")
            victim_pps = next(r for r in listed["rules"] if r["id"] == victim_id)["pps"]
            assert near(victim_pps, 1), (victim_pps, offered)
            rc, _, err = ek(capsys, "xdp", "filter", "rules", "del", *where, victim_id)
            assert rc == 0, err
            time.sleep(0.3)
            assert len(wire.received(3)) > blocked_at, "the deleted rule still drops"
        finally:
            stop.set()
            sender.join()
        wire.settle(_sentinel(pair), SENTINEL)
        assert wire.received(1) == set(range(sent[1])), "allowed packets were lost during changes"
        assert wire.received(2) == set(), "a probe passed: some change was half applied"
        stats = ek_json(capsys, "xdp", "filter", "stats", *where)
        totals = {t["counter"]: t["packets"] for t in stats["totals"]}
        assert totals["dropped"] == sent[2] + (sent[3] - len(wire.received(3)))
    finally:
        ek(capsys, "xdp", "filter", "detach", *where)


# --- bad input, detach, SIGKILL -----------------------------------------------------------------

def test_bad_input_is_a_clear_usage_error(veth_pair, capsys, tmp_path):
    pair = veth_pair
    where = _filter_args(pair)
    dup = tmp_path / "dup.yaml"
    dup.write_text("rules:\n  - src: 10.0.0.0/8\n  - src: 10.0.0.0/8\n")
    cases = [
        (["--iface", "nosuch0", "--netns", pair.a.netns, "--src", "10.0.0.0/8"], "no interface 'nosuch0'"),
        (["--iface", pair.a.ifname, "--netns", "ebpfkit-nosuch", "--src", "10.0.0.0/8"], "no network namespace"),
        ([*where, "--src", "10.0.0.1/8"], "host bits set"),
        ([*where, "--src", "10.0.0.300/32"], "bad source CIDR"),
        ([*where, "--src", "10.0.0.0/8", "--src", "10.1.0.0/16"], "overlaps"),
        ([*where, "--src", "2001:db8::/32", "--src", "2001:db8:1::/48"], "overlaps"),
        ([*where, "--dport", "53", "--dport", "udp:53"], "overlaps"),
        ([*where, "-f", dup], "duplicate rule"),
        ([*where, "--dport", "70000"], "1-65535"),
        ([*where, "-r", "src 10.0.0.0/8 dst 10.1.0.0/16"], "not both"),
        ([*where, "-r", "proto icmp dport 5"], "has no ports"),
    ]
    for args, message in cases:
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *args)
        assert rc == 2, f"{args}: exit {rc}, {err}"
        assert message in err and "Traceback" not in err, f"{args}: {err}"
    assert _attached(pair) == {} and not os.path.exists(PIN_ROOT + "/xdp")
    # and against the rules of an attached filter
    try:
        assert ek(capsys, "xdp", "filter", "attach", *where, "--src", "10.0.0.0/8")[0] == 0
        rc, _, err = ek(capsys, "xdp", "filter", "rules", "add", *where, "--src", "10.2.0.0/16")
        assert rc == 2 and "overlaps rule 1" in err
        rc, _, err = ek(capsys, "xdp", "filter", "rules", "add", *where, "--src", "10.0.0.0/8")
        assert rc == 2 and "duplicate" in err
        rc, _, err = ek(capsys, "xdp", "filter", "rules", "del", *where, "7")
        assert rc == 2 and "no rule with id 7" in err
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *where, "--src", "10.0.0.0/8")
        assert rc == 1 and "already attached" in err
    finally:
        ek(capsys, "xdp", "filter", "detach", *where)
    # a real process reports the same exit code
    proc = subprocess.run([sys.executable, "-m", "ebpfkit", "xdp", "filter", "attach", "--iface", "nosuch0",
                           "--src", "10.0.0.0/8"], capture_output=True, text=True)
    assert proc.returncode == 2 and "no interface 'nosuch0'" in proc.stderr


def _loaded_filters() -> set[int]:
    """Ids of the loaded programs named as the filter's."""
    from ebpfkit.engine import inventory

    return {p.id for p in inventory.programs() if p.name == "xdp_filter"}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_foreground_run_leaves_nothing_behind(veth_pair, wire, capsys, sig):
    """A foreground run pins nothing: however it dies, nothing of it stays in the kernel."""
    from ebpfkit.engine import inventory
    from ebpfkit.engine.pinned import program_maps

    pair = veth_pair
    where = _filter_args(pair)
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "xdp", "filter", "run", *where,
                             "--src", "192.0.2.0/25"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: _attached(pair) or proc.poll() is not None, 30), "run never attached"
        assert _attached(pair), proc.stderr.read().decode()
        prog = _attached(pair)["prog_id"]
        assert prog in _loaded_filters()
        maps = program_maps(prog)
        map_ids = {m.id for m in maps.values()}
        for m in maps.values():
            m.close()
        assert len(map_ids) >= 17 and _no_pins_for(pair), "a foreground run pinned"
        # it filters: of two sources, the blocked one's frames never arrive
        (_, blocked, _), _, (_, allowed, _) = _wire_cases(pair)[1:4]
        for seq in range(10):
            wire.send(blocked(seq))
            wire.send(allowed(seq))
        wire.settle(_sentinel(pair), SENTINEL)
        assert wire.received(2) == set() and wire.received(4) == set(range(10))
        # and other commands reach its maps through the program the interface runs
        stats = ek_json(capsys, "xdp", "filter", "stats", *where)
        assert [(r["rule"], r["packets"]) for r in stats["rules"]] == [("src 192.0.2.0/25", 10)]
        assert ek(capsys, "xdp", "filter", "rules", "add", *where, "--src", "198.51.100.0/24")[0] == 0
        assert len(ek_json(capsys, "xdp", "filter", "stats", *where)["rules"]) == 2
        proc.send_signal(sig)
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert wait_for(lambda: _attached(pair) == {}, 5), "the program stayed attached"
    # the kernel frees the program and its maps in a worker after the last fd closed
    assert wait_for(lambda: prog not in _loaded_filters(), 10), "the run's program is still loaded"
    assert wait_for(lambda: not any(inventory.map(i) for i in map_ids), 10), "the run's maps are still there"
    assert _no_pins_for(pair), "pins were left"
    rc, _, err = ek(capsys, "xdp", "filter", "detach", *where)
    assert rc == 0 and "nothing was attached" in err


# --- from Python: the sessions ------------------------------------------------------------------

def _udp_from(pair, src: str, case: int):
    """Frames from ``src`` across the veth, numbered by seq and marked ``case``."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return lambda seq: bytes(Ether(src=pair.b.mac, dst=pair.a.mac) / IP(src=src, dst=pair.a.address)
                             / UDP(sport=1000, dport=4000) / payload(case, seq))


def _counted(doc) -> dict[str, tuple[int, int]]:
    return {r["rule"]: (r["packets"], r["bytes"]) for r in doc["rules"]}


def test_filter_session_counts_exactly_the_packets_sent_and_detaches(veth_pair, wire):
    """open_filter() attaches (pinning nothing), sample() counts per rule exactly what the peer
    sent, rules change live through .tables, and close() leaves nothing attached or loaded."""
    from ebpfkit.tools import xdp

    pair = veth_pair
    blocked, other, allowed = (_udp_from(pair, src, case) for src, case in
                               (("192.0.2.9", 1), ("198.51.100.9", 2), ("10.199.0.2", 3)))
    n, m = 37, 11
    with xdp.open_filter(iface=pair.a.ifname, netns=pair.a.netns, rules=["src 192.0.2.0/24"],
                         mode="native") as session:
        prog = session.prog_id
        assert (_attached(pair)["prog_id"], _attached(pair)["mode"]) == (prog, "native")
        assert _no_pins_for(pair), "a session pinned"
        assert _counted(session.sample()) == {"src 192.0.2.0/24": (0, 0)}
        for seq in range(n):
            wire.send(blocked(seq))
            wire.send(allowed(seq))
        wire.settle(_sentinel(pair), SENTINEL)
        doc = session.sample()
        assert wire.received(1) == set() and wire.received(3) == set(range(n))
        sent = sum(len(blocked(s)) for s in range(n))
        assert _counted(doc) == {"src 192.0.2.0/24": (n, sent)}
        totals = {t["counter"]: t["packets"] for t in doc["totals"]}
        assert totals["dropped"] == totals["matched"] == n and totals["malformed"] == 0
        assert (doc["iface"], doc["netns"], doc["mode"], doc["default"]) == (pair.a.ifname, pair.a.netns,
                                                                             "native", "allow")
        # a rule added while it runs drops from then on, and is counted on its own
        (added,) = session.tables.apply(add=[xdp.parse_rule("src 198.51.100.0/24")])
        for seq in range(m):
            wire.send(other(seq))
        wire.settle(_sentinel(pair), SENTINEL)
        assert wire.received(2) == set()
        later = session.sample()
        assert _counted(later) == {"src 192.0.2.0/24": (n, sent),
                                   "src 198.51.100.0/24": (m, sum(len(other(s)) for s in range(m)))}
        assert next(r["id"] for r in later["rules"] if r["rule"] == "src 198.51.100.0/24") == added
        assert later["interval"] > 0
    assert _attached(pair) == {}, "still attached after close()"
    assert _no_pins_for(pair)
    assert wait_for(lambda: prog not in _loaded_filters(), 10), "the session's program is still loaded"


def test_attached_filter_reads_the_counters_of_a_cli_attach(veth_pair, wire, capsys):
    from ebpfkit.tools import xdp
    from ebpfkit.tools.xdp.pins import NotAttachedError

    pair = veth_pair
    where = _filter_args(pair)
    with pytest.raises(NotAttachedError, match=f"no ebpfkit XDP filter is attached to {pair.a.ifname} "):
        xdp.attached_filter(pair.a.ifname, pair.a.netns)
    by_src, by_port = _udp_from(pair, "192.0.2.9", 1), _udp_from(pair, "10.199.0.2", 2)
    try:
        rc, _, err = ek(capsys, "xdp", "filter", "attach", *where, "--src", "192.0.2.0/24", "--dport", "udp:4000")
        assert rc == 0, err
        prog = _attached(pair)["prog_id"]
        for seq in range(13):
            wire.send(by_src(seq))
        for seq in range(29):
            wire.send(by_port(seq))
        wire.settle(_sentinel(pair), SENTINEL)  # udp 4001: no rule
        with xdp.attached_filter(pair.a.ifname, pair.a.netns) as session:
            doc = session.sample()
            assert session.prog_id is None  # it attached nothing
        assert {r: c[0] for r, c in _counted(doc).items()} == {"src 192.0.2.0/24": 13, "proto udp dport 4000": 29}
        assert (doc["iface"], doc["netns"]) == (pair.a.ifname, pair.a.netns)
        assert _attached(pair)["prog_id"] == prog, "closing the reader detached the program"
        assert _counted(ek_json(capsys, "xdp", "filter", "stats", *where)) == _counted(doc)  # what the CLI reads
    finally:
        ek(capsys, "xdp", "filter", "detach", *where)
    assert _attached(pair) == {} and _no_pins_for(pair)
