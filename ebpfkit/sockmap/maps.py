"""Reading sockmap's maps through the engine's FdMap, the same for a live object and for
pins another process left: counters (per-CPU array), the sockets in the SOCKHASH, the
ports, the info record. Layouts follow ebpfkit/programs/sockmap.h."""

from __future__ import annotations

import socket
import struct

from ..engine.pinned import FdMap

STATS = ("sockets_added", "add_failed", "msgs_redirected", "bytes_redirected",
         "msgs_fallback", "bytes_fallback")
KEY = struct.Struct("=I16s16sII")          # struct sockmap_key
INFO = struct.Struct("=QIIIIQ")            # struct sockmap_info
INFO_FIELDS = ("enabled_at", "ipv6", "skb_verdict", "regression", "nports", "cgroup_id")


ZERO = struct.pack("=I", 0)  # the key of the one-element arrays


def read_stats(m: FdMap) -> dict[str, int]:
    """The per-CPU struct sockmap_stats, summed over CPUs."""
    raw = m.lookup(ZERO)
    per_cpu = [struct.unpack(f"={len(STATS)}Q", v) for v in m.per_cpu_values(raw)] if raw else []
    return {name: sum(values[i] for values in per_cpu) for i, name in enumerate(STATS)}


def decode_key(raw: bytes) -> dict:
    family, local, remote, lport, rport = KEY.unpack(raw[:KEY.size])
    if family == socket.AF_INET:
        local, remote, fam = socket.inet_ntop(family, local[:4]), socket.inet_ntop(family, remote[:4]), "ipv4"
    else:
        local, remote, fam = socket.inet_ntop(family, local), socket.inet_ntop(family, remote), "ipv6"
    return {"family": fam, "local": local, "local_port": lport, "remote": remote, "remote_port": rport}


def encode_key(family: int, local: str, local_port: int, remote: str, remote_port: int) -> bytes:
    """The key sockops stores for a socket (IPv4-mapped IPv6 addresses are keyed as IPv4)."""
    def addr(a: str) -> tuple[int, bytes]:
        if family == socket.AF_INET6 and a.startswith("::ffff:") and "." in a:
            return socket.AF_INET, socket.inet_pton(socket.AF_INET, a[7:]).ljust(16, b"\0")
        packed = socket.inet_pton(family, a)
        return family, packed.ljust(16, b"\0")
    fam, lraw = addr(local)
    _, rraw = addr(remote)
    return KEY.pack(fam, lraw, rraw, local_port, remote_port)


def key_of(sock: socket.socket) -> bytes:
    """The key sockops stores for a connected socket."""
    local, remote = sock.getsockname(), sock.getpeername()
    return encode_key(sock.family, local[0], local[1], remote[0], remote[1])


def read_sockets(m: FdMap) -> list[dict]:
    return [decode_key(raw) for raw in m.iter_keys()]


def count_sockets(m: FdMap) -> int:
    return sum(1 for _ in m.iter_keys())


def raw_keys(m: FdMap) -> set[bytes]:
    return set(m.iter_keys())


def read_ports(m: FdMap) -> list[int]:
    return sorted(struct.unpack("=H", raw)[0] for raw in m.iter_keys())


def write_ports(m: FdMap, ports) -> None:
    for port in ports:
        m.update(struct.pack("=H", port), b"\x01")


def read_info(m: FdMap) -> dict:
    raw = m.lookup(ZERO)
    return dict(zip(INFO_FIELDS, INFO.unpack(raw))) if raw else {}


def write_info(m: FdMap, **fields) -> None:
    m.update(ZERO, INFO.pack(*(int(fields.get(name, 0)) for name in INFO_FIELDS)))
