"""Reading sockmap's maps through the engine's FdMap, the same for a live object and for
pins another process left: counters (per-CPU array), the sockets in the SOCKHASH, the
ports, the info record. Layouts follow sockmap.h."""

from __future__ import annotations

import socket
import struct

from ...engine.pinned import FdMap

STATS = ("sockets_added", "add_failed", "msgs_redirected", "bytes_redirected",
         "msgs_fallback", "bytes_fallback")
KEY4 = struct.Struct("=4s4sHH")            # struct sockmap_key4 (map sock_hash)
KEY6 = struct.Struct("=16s16sHH")          # struct sockmap_key6 (map sock_hash6)
SOCK_MAPS = ("sock_hash", "sock_hash6")
INFO = struct.Struct("=QIIIIQ")            # struct sockmap_info
INFO_FIELDS = ("enabled_at", "ipv6", "skb_verdict", "regression", "nports", "cgroup_id")


ZERO = struct.pack("=I", 0)  # the key of the one-element arrays


def read_stats(m: FdMap) -> dict[str, int]:
    """The per-CPU struct sockmap_stats, summed over CPUs."""
    raw = m.lookup(ZERO)
    per_cpu = [struct.unpack(f"={len(STATS)}Q", v) for v in m.per_cpu_values(raw)] if raw else []
    return {name: sum(values[i] for values in per_cpu) for i, name in enumerate(STATS)}


def decode_key(raw: bytes) -> dict:
    """A key of either map, told apart by its size."""
    if len(raw) == KEY4.size:
        family, (local, remote, lport, rport) = socket.AF_INET, KEY4.unpack(raw)
    else:
        family, (local, remote, lport, rport) = socket.AF_INET6, KEY6.unpack(raw[:KEY6.size])
    return {"family": "ipv4" if family == socket.AF_INET else "ipv6",
            "local": socket.inet_ntop(family, local), "local_port": lport,
            "remote": socket.inet_ntop(family, remote), "remote_port": rport}


def encode_key(family: int, local: str, local_port: int, remote: str, remote_port: int) -> bytes:
    """The key sockops stores for a socket (IPv4-mapped IPv6 addresses are keyed as IPv4)."""
    def mapped(a: str) -> bool:
        return a.startswith("::ffff:") and "." in a

    if family == socket.AF_INET6 and mapped(local) and mapped(remote):
        family, local, remote = socket.AF_INET, local[7:], remote[7:]
    layout = KEY4 if family == socket.AF_INET else KEY6
    return layout.pack(socket.inet_pton(family, local), socket.inet_pton(family, remote), local_port, remote_port)


def key_of(sock: socket.socket) -> bytes:
    """The key sockops stores for a connected socket."""
    local, remote = sock.getsockname(), sock.getpeername()
    return encode_key(sock.family, local[0], local[1], remote[0], remote[1])


def read_sockets(*maps: FdMap) -> list[dict]:
    return [decode_key(raw) for m in maps for raw in m.iter_keys()]


def count_sockets(*maps: FdMap) -> int:
    return sum(1 for m in maps for _ in m.iter_keys())


def raw_keys(*maps: FdMap) -> set[bytes]:
    return {raw for m in maps for raw in m.iter_keys()}


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
