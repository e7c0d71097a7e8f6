"""pingtrace's probe on the wire: an ICMP echo request (type 8) with code 1, whose payload
starts with a header, after sysak's PingTrace. The layout is pingtrace.h's, which the programs
build and read: ``struct wire_probe`` (the echo's 8-byte header, then magic, version, the count
of entries, the client run's session, the probe's seq), then that many ``struct wire_entry``
(a server's checkpoints: netns inode, ifindex, user id, checkpoint, ns), then zero padding up
to the probe's size. ``Layout`` reads those structs (through the engine's codecs, big-endian)
and the constants beside them from a loaded program's BTF, so C and Python cannot disagree;
what this module adds is the byte order and the rules a message must meet.

The echo reply (type 0) carries the payload back; a Linux kernel replies with the request's
code, so a reply is a probe too. Anything that is not a well-formed probe of a known version is
foreign: ``Layout.parse`` says why, the caller counts it and moves on.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import LoadError

ICMP_ECHO_REPLY, ICMP_ECHO_REQUEST = 0, 8
# A probe's payload size: the limits a user may ask for, known before a program is compiled (the
# CLI's default). The least is pingtrace.h's PINGTRACE_MIN_SIZE (Layout checks): its programs
# skip shorter packets.
MIN_SIZE = 144
MAX_SIZE = 65000


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


def _wire_codec(btf, name: str, needs: tuple[str, ...]):
    """The engine's codec of pingtrace.h's struct ``name``, big-endian as on the wire; LoadError
    unless the fields wire.py reads are there, and integers."""
    from ...engine.btftypes import Kind, codec  # not at the top: the CLI imports wire.py

    net = btf.in_byteorder("big")
    try:
        type_id = net.find(name, "struct")
    except KeyError as exc:
        raise LoadError(f"pingtrace's program has no struct {name} (pingtrace.h): {exc}") from None
    members = {m.name: m for m in net.type(type_id).members}
    for field in needs:
        if field not in members:
            raise LoadError(f"struct {name} has no field {field}, which wire.py reads")
        if net.kind(net.resolve(members[field].type_id)) not in (Kind.INT, Kind.ENUM):
            raise LoadError(f"struct {name}: field {field} is not an integer, which wire.py needs")
    return codec(net, type_id)


class Layout:
    """The probe as a loaded pingtrace program builds and reads it (its BTF): build requests,
    parse what comes back. One per loaded object."""

    def __init__(self, btf):
        self.probe = _wire_codec(btf, "wire_probe", ("type", "code", "checksum", "echo_id", "echo_seq",
                                                    "magic", "version", "entries", "session", "seq"))
        self.entry = _wire_codec(btf, "wire_entry", ("netns", "ifindex", "user_id", "point", "ts"))
        self._blank = dict(self.probe.zero())  # every field, so that a request packs in one call
        try:
            constants = btf.enum("pingtrace_wire", strip="PINGTRACE_")
            points = btf.enum("pingtrace_point", strip="PT_")
        except KeyError as exc:
            raise LoadError(f"pingtrace's program lacks its constants: {exc}") from None
        self.code, self.magic, self.version = constants["code"], constants["magic"], constants["version"]
        if constants["min_size"] != MIN_SIZE:
            raise LoadError(f"pingtrace.h's smallest probe is {constants['min_size']} bytes, "
                            f"wire.MIN_SIZE {MIN_SIZE}: they must agree")
        # checkpoint names in their enum's order: user_tx, dev_queue, ..., drop, egress
        self.points = tuple(sorted(points, key=points.get))
        if [points[p] for p in self.points] != list(range(len(points))):
            raise LoadError("enum pingtrace_point must number its checkpoints 0, 1, 2, ...")

    @property
    def header_size(self) -> int:
        """The payload's header: what follows the echo's own 8 bytes in struct wire_probe."""
        return self.probe.size - 8

    def point_name(self, point: int) -> str:
        return self.points[point] if 0 <= point < len(self.points) else str(point)

    def request(self, echo_id: int, session: int, seq: int, size: int = MIN_SIZE) -> bytes:
        """The ICMP message (header and payload of ``size`` bytes) of probe ``seq``."""
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise ValueError(f"probe size must be {MIN_SIZE}..{MAX_SIZE} bytes, got {size}")
        fields = dict(self._blank, type=ICMP_ECHO_REQUEST, code=self.code, echo_id=echo_id, echo_seq=seq & 0xFFFF,
                      magic=self.magic, version=self.version, session=session, seq=seq)
        padding = bytes(size - self.header_size)
        fields["checksum"] = checksum(self.probe.encode(fields) + padding)
        return self.probe.encode(fields) + padding

    def parse(self, message: bytes, with_ip_header: bool = True) -> Probe:
        """The probe in ``message`` (an IPv4 packet as a raw socket reads it, or an ICMP
        message). MalformedProbe if it is none of ours, or a damaged one."""
        if with_ip_header:
            if len(message) < 20 or message[0] >> 4 != 4:
                raise MalformedProbe("not an IPv4 packet")
            ihl = (message[0] & 0xF) * 4
            if message[9] != 1:
                raise MalformedProbe("not ICMP")
            message = message[ihl:]
        if len(message) < self.probe.size:
            raise MalformedProbe(f"too short for a probe ({len(message)} bytes)")
        p = self.probe.decode(message)
        if p["type"] not in (ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY) or p["code"] != self.code:
            raise MalformedProbe(f"ICMP type {p['type']} code {p['code']}, not a pingtrace echo")
        if p["magic"] != self.magic:
            raise MalformedProbe(f"magic {p['magic']:#06x}, not {self.magic:#06x}")
        if p["version"] != self.version:
            raise MalformedProbe(f"version {p['version']}, this pingtrace speaks {self.version}")
        if checksum(message):
            raise MalformedProbe("bad ICMP checksum")
        if p["seq"] & 0xFFFF != p["echo_seq"]:
            raise MalformedProbe(f"seq {p['seq']} does not match the echo's {p['echo_seq']}")
        count, start, step = p["entries"], self.probe.size, self.entry.size
        if len(message) < start + count * step:
            raise MalformedProbe(f"{count} entries announced, {(len(message) - start) // step} present")
        entries = tuple(self._entry(message, start + i * step) for i in range(count))
        return Probe(p["type"], p["echo_id"], p["session"], p["seq"], entries)

    def _entry(self, message: bytes, offset: int) -> Entry:
        e = self.entry.decode(message, offset)
        return Entry(e["netns"], e["ifindex"], e["user_id"], e["point"], e["ts"])


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
