"""Reading sockmap's maps by fd, the same for a live object and for pins another process
left: counters (per-CPU array), the sockets in the SOCKHASH, the ports, the info record.
Layouts follow ebpfkit/programs/sockmap.h."""

from __future__ import annotations

import ctypes
import os
import socket
import struct

from ..engine import _libbpf as L
from ..engine.maps import possible_cpu_count

STATS = ("sockets_added", "add_failed", "msgs_redirected", "bytes_redirected",
         "msgs_fallback", "bytes_fallback")
KEY = struct.Struct("=I16s16sII")          # struct sockmap_key
INFO = struct.Struct("=QIIIIQ")            # struct sockmap_info
INFO_FIELDS = ("enabled_at", "ipv6", "skb_verdict", "regression", "nports", "cgroup_id")


def _lookup(fd: int, key: bytes, size: int) -> bytes | None:
    buf = ctypes.create_string_buffer(size)
    return buf.raw if L.lib.bpf_map_lookup_elem(fd, key, buf) == 0 else None


def _keys(fd: int, key_size: int):
    key, nxt = ctypes.create_string_buffer(key_size), ctypes.create_string_buffer(key_size)
    err = L.lib.bpf_map_get_next_key(fd, None, nxt)
    while err == 0:
        yield nxt.raw
        ctypes.memmove(key, nxt, key_size)
        err = L.lib.bpf_map_get_next_key(fd, key, nxt)


def read_stats(fd: int) -> dict[str, int]:
    """The per-CPU struct sockmap_stats, summed over CPUs."""
    ncpus, n = possible_cpu_count(), len(STATS)
    raw = _lookup(fd, struct.pack("=I", 0), 8 * n * ncpus) or bytes(8 * n * ncpus)
    values = struct.unpack(f"={n * ncpus}Q", raw)
    return {name: sum(values[cpu * n + i] for cpu in range(ncpus)) for i, name in enumerate(STATS)}


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


def read_sockets(fd: int) -> list[dict]:
    return [decode_key(raw) for raw in _keys(fd, KEY.size)]


def count_sockets(fd: int) -> int:
    return sum(1 for _ in _keys(fd, KEY.size))


def raw_keys(fd: int) -> set[bytes]:
    return set(_keys(fd, KEY.size))


def read_ports(fd: int) -> list[int]:
    return sorted(struct.unpack("=H", raw)[0] for raw in _keys(fd, 2))


def write_ports(fd: int, ports) -> None:
    one = ctypes.c_uint8(1)
    for port in ports:
        key = ctypes.c_uint16(port)
        err = L.lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(one), 0)
        if err:
            raise OSError(-err, f"cannot store port {port}: {os.strerror(-err)}")


def read_info(fd: int) -> dict:
    raw = _lookup(fd, struct.pack("=I", 0), INFO.size)
    return dict(zip(INFO_FIELDS, INFO.unpack(raw))) if raw else {}


def write_info(fd: int, **fields) -> None:
    values = INFO.pack(*(int(fields.get(name, 0)) for name in INFO_FIELDS))
    err = L.lib.bpf_map_update_elem(fd, struct.pack("=I", 0), values, 0)
    if err:
        raise OSError(-err, f"cannot write the info record: {os.strerror(-err)}")
