"""Reading sockmap's maps, typed through the object's BTF, the same for a live object and for
pins another process left: counters (per-CPU array, named by sockmap.h's enum sockmap_stat),
the sockets in the SOCKHASHes, the ports, the info record.

The kernel keeps no BTF with a SOCKHASH, so its keys are read with the object's struct
sockmap_key4/sockmap_key6 from the BTF of its other maps (``btf``)."""

from __future__ import annotations

import socket
import sys

from ...engine.btftypes import codec

SOCK_MAPS = ("sock_hash", "sock_hash6")


def read_stats(m) -> dict[str, int]:
    """The per-CPU struct sockmap_stats, summed over CPUs, by enum sockmap_stat's names."""
    counts = m[0].sum().count
    return {name: counts[i] for name, i in m.btf.enum("sockmap_stat", strip="SOCKMAP_").items()
            if name != "nr_stats"}


def _key_codecs(btf) -> tuple:
    return tuple(codec(btf, btf.find(name, "struct")) for name in ("sockmap_key4", "sockmap_key6"))


def _addr_bytes(value) -> bytes:
    """A __u32 (IPv4) or __u32[4] (IPv6) address field, in network byte order, as bytes."""
    words = value if isinstance(value, list) else [value]
    return b"".join(w.to_bytes(4, sys.byteorder) for w in words)


def _addr_field(family: int, text: str):
    raw = socket.inet_pton(family, text)
    words = [int.from_bytes(raw[i:i + 4], sys.byteorder) for i in range(0, len(raw), 4)]
    return words[0] if family == socket.AF_INET else words


def decode_key(btf, raw: bytes) -> dict:
    """A key of either map, told apart by its size."""
    v4, v6 = _key_codecs(btf)
    family, key = (socket.AF_INET, v4.decode(raw)) if len(raw) == v4.size else (socket.AF_INET6, v6.decode(raw))
    return {"family": "ipv4" if family == socket.AF_INET else "ipv6",
            "local": socket.inet_ntop(family, _addr_bytes(key.local_addr)), "local_port": key.local_port,
            "remote": socket.inet_ntop(family, _addr_bytes(key.remote_addr)), "remote_port": key.remote_port}


def encode_key(btf, family: int, local: str, local_port: int, remote: str, remote_port: int) -> bytes:
    """The key sockops stores for a socket (IPv4-mapped IPv6 addresses are keyed as IPv4)."""
    def mapped(a: str) -> bool:
        return a.startswith("::ffff:") and "." in a

    if family == socket.AF_INET6 and mapped(local) and mapped(remote):
        family, local, remote = socket.AF_INET, local[7:], remote[7:]
    layout = _key_codecs(btf)[0 if family == socket.AF_INET else 1]
    return layout.encode({"local_addr": _addr_field(family, local), "remote_addr": _addr_field(family, remote),
                          "local_port": local_port, "remote_port": remote_port})


def key_of(btf, sock: socket.socket) -> bytes:
    """The key sockops stores for a connected socket."""
    local, remote = sock.getsockname(), sock.getpeername()
    return encode_key(btf, sock.family, local[0], local[1], remote[0], remote[1])


def read_sockets(btf, *maps) -> list[dict]:
    return [decode_key(btf, raw) for raw in raw_keys(*maps)]


def count_sockets(*maps) -> int:
    return sum(1 for m in maps for _ in m.raw.iter_keys())


def raw_keys(*maps) -> set[bytes]:
    return {raw for m in maps for raw in m.raw.iter_keys()}


def read_ports(m) -> list[int]:
    return sorted(m)


def write_ports(m, ports) -> None:
    for port in ports:
        m[port] = 1


def read_info(m) -> dict:
    return dict(m[0])


def write_info(m, **fields) -> None:
    """struct sockmap_info from ``fields`` (those not given are 0)."""
    m[0] = {name: int(value) for name, value in fields.items()}
