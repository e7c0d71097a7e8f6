"""The probe's wire format, as the program's BTF lays it out: what a request carries, and every
way a message can fail to be one of our probes (each named, never a crash)."""

from __future__ import annotations

import struct

import pytest

import ebpfkit
from ebpfkit.tools.pingtrace import session, wire
from ebpfkit.tools.pingtrace.stats import StageStats, percentile


def ipv4(icmp: bytes, protocol: int = 1) -> bytes:
    """A 20-byte IPv4 header (checksum left 0: a raw socket hands us what the kernel checked)."""
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), 0, 0, 64, protocol, 0,
                       bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + icmp


@pytest.fixture(scope="module")
def layout():
    """The layout of the program pingtrace loads (compiled, not loaded: its BTF is enough)."""
    return wire.Layout(ebpfkit.compile(session.PROGRAM).btf)


def reply_of(request: bytes) -> bytes:
    """What a Linux kernel answers: type 0, the request's code and payload, a new checksum."""
    body = bytes([wire.ICMP_ECHO_REPLY]) + request[1:2] + b"\0\0" + request[4:]
    return body[:2] + struct.pack("!H", wire.checksum(body)) + body[4:]


def test_a_request_is_an_echo_with_code_1_magic_and_a_valid_checksum(layout):
    message = layout.request(echo_id=0x1234, session=0xCAFEF00D, seq=70_000, size=200)
    assert len(message) == 8 + 200
    assert message[0] == 8 and message[1] == 1
    assert wire.checksum(message) == 0
    assert struct.unpack_from("!HH", message, 4) == (0x1234, 70_000 & 0xFFFF)
    assert struct.unpack_from("!HBBII", message, 8) == (0x7ACE, 1, 0, 0xCAFEF00D, 70_000)
    assert message[24:] == bytes(200 - 16)  # a 16-byte header


def test_the_kernels_reply_parses_back_to_the_same_probe(layout):
    probe = layout.parse(ipv4(reply_of(layout.request(7, 42, 9))))
    assert probe == wire.Probe(wire.ICMP_ECHO_REPLY, 7, 42, 9, ())


def test_entries_a_server_appended_are_read(layout):
    request = bytearray(layout.request(7, 42, 9))
    entry = struct.pack("!IIIIQ", 4026531840, 3, 5, 6, 123456789)  # netns, ifindex, user, point, ns
    request[8 + 3] = 1  # one entry
    request[24:24 + len(entry)] = entry
    message = reply_of(bytes(request))
    assert layout.parse(message, with_ip_header=False).entries == (wire.Entry(4026531840, 3, 5, 6, 123456789),)
    assert layout.points[6] == "receive"


@pytest.mark.parametrize("mangle, why", [
    (lambda m: ipv4(m, protocol=17), "not ICMP"),
    (lambda m: b"\x60" + ipv4(m)[1:], "not an IPv4 packet"),
    (lambda m: ipv4(m[:20]), "too short"),
    (lambda m: ipv4(m[:1] + b"\0" + m[2:]), "code 0, not a pingtrace echo"),
    (lambda m: ipv4(b"\x03" + m[1:]), "ICMP type 3"),
    (lambda m: ipv4(m[:8] + b"\x7a\xcf" + m[10:]), "magic 0x7acf"),
    (lambda m: ipv4(m[:10] + b"\x02" + m[11:]), "version 2, this pingtrace speaks 1"),
    (lambda m: ipv4(m[:11] + b"\x09" + m[12:]), "9 entries announced"),
    (lambda m: ipv4(m[:-1] + bytes([m[-1] ^ 0xFF])), "bad ICMP checksum"),
    (lambda m: ipv4(m[:6] + b"\0\x05" + m[8:]), "does not match the echo's 5"),
])
def test_what_is_not_a_well_formed_probe_says_why(layout, mangle, why):
    message = layout.request(7, 42, 9)
    mangled = mangle(message)
    if why not in ("bad ICMP checksum", "not ICMP", "not an IPv4 packet", "too short"):
        icmp = bytearray(mangled[20:])  # a valid checksum: only the one defect is left
        icmp[2:4] = b"\0\0"
        icmp[2:4] = struct.pack("!H", wire.checksum(bytes(icmp)))
        mangled = mangled[:20] + bytes(icmp)
    with pytest.raises(wire.MalformedProbe, match=why):
        layout.parse(mangled)


@pytest.mark.parametrize("size", [wire.MIN_SIZE - 1, wire.MAX_SIZE + 1])
def test_a_probe_size_out_of_range_is_refused(layout, size):
    with pytest.raises(ValueError, match="probe size"):
        layout.request(1, 1, 1, size)


def test_percentiles_are_nearest_rank():
    values = list(range(1, 101))
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)) == (50, 99, 100)
    assert percentile([7.0], 0.99) == 7.0


class _Stage:
    def __init__(self, name, us):
        self.name, self.us = name, us


class _Probe:
    def __init__(self, rtt, stages):
        self.rtt_us, self.lost = rtt, rtt is None
        self.stages = [_Stage(n, u) for n, u in stages]


def test_stage_statistics_keep_path_order_and_count_lost_probes():
    stats = StageStats(window=3)
    for rtt, a, b in [(30, 10, 20), (40, 10, 30), (50, 20, 30), (60, 25, 35)]:
        stats.add(_Probe(rtt, [("a", a), ("b", b)]))
    stats.add(_Probe(None, []))
    rows = stats.rows()
    assert [r["stage"] for r in rows] == ["round trip", "a", "b"]
    assert (stats.sent, stats.lost) == (5, 1)
    assert rows[0]["count"] == 3 and rows[0]["p50_us"] == 50  # the window: the last three
    assert rows[0]["max_us"] == 60 and rows[1]["max_us"] == 25
