"""pingtrace's probe on the wire: an ICMP echo request (type 8) with code 1, whose payload
starts with a header, after sysak's PingTrace:

    offset  size  field
    0       2     magic 0x7ace
    2       1     version (1)
    3       1     entries: how many 24-byte checkpoint entries follow the header
    4       4     session: the client run that sent it (a random nonzero number)
    8       4     seq: the probe's number in that run (the echo's 16-bit seq is its low half)
    12      4     reserved (0)
    16      24*n  entries {netns inode u32, ifindex u32, user id u32, checkpoint u32, ns u64}
    ...           zero padding up to the probe's size

All big-endian. The echo reply (type 0) carries the payload back; a Linux kernel replies with
the request's code, so a reply is a probe too. Anything that is not a well-formed probe of a
known version is foreign: ``parse`` says why, the caller counts it and moves on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ICMP_ECHO_REPLY, ICMP_ECHO_REQUEST = 0, 8
CODE = 1
MAGIC = 0x7ACE
VERSION = 1
ICMP = struct.Struct("!BBHHH")      # type, code, checksum, echo id, echo seq
HEADER = struct.Struct("!HBBIII")   # magic, version, entries, session, seq, reserved
ENTRY = struct.Struct("!IIIIQ")     # netns, ifindex, user id, checkpoint, ns
MIN_SIZE = 144                      # ICMP payload bytes: the header and five entries, rounded up
                                    # (pingtrace.h's PINGTRACE_MIN_SIZE: its programs skip shorter packets)
MAX_SIZE = 65000

# Checkpoints (pingtrace.h's enum pingtrace_point), in the order a probe meets them on a host.
POINTS = ("user_tx", "dev_queue", "qdisc_enqueue", "qdisc_dequeue", "xmit", "netif_rx", "receive",
          "wakeup", "user_copy", "user_rx", "drop", "egress")


# pingtrace.h's structs of the same layout: (struct, this module's formats in order, field names)
C_LAYOUTS = (("wire_probe", (ICMP, HEADER), ("type", "code", "checksum", "echo_id", "echo_seq", "magic",
                                             "version", "entries", "session", "seq", "reserved")),
             ("wire_entry", (ENTRY,), ("netns", "ifindex", "user_id", "point", "ts")))


def layout_mismatches(btf) -> list[str]:
    """Where the formats above and the program's structs (its BTF) disagree: nothing, or what
    differs, so a change on one side alone fails at load, not as garbage on the wire."""
    found = []
    for name, formats, fields in C_LAYOUTS:
        codes = "".join(f.format[1:] for f in formats)
        offsets = [struct.calcsize("!" + codes[:i]) for i in range(len(codes))]
        t = btf.type(btf.find(name, "struct"))
        members = [(m.name, m.bit_offset // 8) for m in t.members]
        expected = list(zip(fields, offsets))
        if members != expected or t.size != struct.calcsize("!" + codes):
            found.append(f"struct {name}: the program has {members} ({t.size} bytes), wire.py "
                         f"{expected} ({struct.calcsize('!' + codes)} bytes)")
    return found


class MalformedProbe(ValueError):
    """Not a pingtrace probe this version understands (the message says what is wrong)."""


@dataclass(frozen=True)
class Entry:
    netns: int
    ifindex: int
    user_id: int
    point: int
    ns: int


@dataclass(frozen=True)
class Probe:
    icmp_type: int
    echo_id: int
    session: int
    seq: int
    entries: tuple[Entry, ...] = ()


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def request(echo_id: int, session: int, seq: int, size: int = MIN_SIZE) -> bytes:
    """The ICMP message (header and payload of ``size`` bytes) of probe ``seq``."""
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(f"probe size must be {MIN_SIZE}..{MAX_SIZE} bytes, got {size}")
    payload = HEADER.pack(MAGIC, VERSION, 0, session, seq, 0).ljust(size, b"\0")
    body = ICMP.pack(ICMP_ECHO_REQUEST, CODE, 0, echo_id, seq & 0xFFFF) + payload
    return body[:2] + struct.pack("!H", checksum(body)) + body[4:]


def parse(message: bytes, with_ip_header: bool = True) -> Probe:
    """The probe in ``message`` (an IPv4 packet as a raw socket reads it, or an ICMP message).
    MalformedProbe if it is none of ours, or a damaged one."""
    if with_ip_header:
        if len(message) < 20 or message[0] >> 4 != 4:
            raise MalformedProbe("not an IPv4 packet")
        ihl = (message[0] & 0xF) * 4
        if message[9] != 1:
            raise MalformedProbe("not ICMP")
        message = message[ihl:]
    if len(message) < ICMP.size + HEADER.size:
        raise MalformedProbe(f"too short for a probe ({len(message)} bytes)")
    icmp_type, code, _, echo_id, echo_seq = ICMP.unpack_from(message)
    if icmp_type not in (ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY) or code != CODE:
        raise MalformedProbe(f"ICMP type {icmp_type} code {code}, not a pingtrace echo")
    magic, version, count, session, seq, _ = HEADER.unpack_from(message, ICMP.size)
    if magic != MAGIC:
        raise MalformedProbe(f"magic {magic:#06x}, not {MAGIC:#06x}")
    if version != VERSION:
        raise MalformedProbe(f"version {version}, this pingtrace speaks {VERSION}")
    if checksum(message):
        raise MalformedProbe("bad ICMP checksum")
    if seq & 0xFFFF != echo_seq:
        raise MalformedProbe(f"seq {seq} does not match the echo's {echo_seq}")
    start = ICMP.size + HEADER.size
    if len(message) < start + count * ENTRY.size:
        raise MalformedProbe(f"{count} entries announced, {(len(message) - start) // ENTRY.size} present")
    entries = tuple(Entry(*ENTRY.unpack_from(message, start + i * ENTRY.size)) for i in range(count))
    return Probe(icmp_type, echo_id, session, seq, entries)
