"""BPF maps by file descriptor, keys and values as bytes.

The XDP tools change maps that another process pinned (``rules add`` while ``attach`` left
the program running), so they cannot use the engine's Map, which needs the libbpf object
that created it. The layouts are fixed by our own programs and packed with ``struct``.
"""

from __future__ import annotations

import ctypes
import os
import struct

from ..engine import _libbpf as L
from ..engine.constants import PER_CPU_MAPS, MapType
from ..errors import MapError

_BATCH = 4096


def _round8(n: int) -> int:
    return (n + 7) & ~7


COUNTER = struct.Struct("<QQ")  # the programs' per-CPU {packets, bytes} counters


class RawMap:
    """One map fd (owned: closed by ``close()``)."""

    def __init__(self, fd: int, label: str = ""):
        self.fd = fd
        info = L.bpf_map_info()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        if L.lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)):
            raise MapError(f"fd {fd} is not a BPF map")
        self.type = info.type
        self.id = info.id
        self.name = label or info.name.decode()
        self.key_size, self.value_size = info.key_size, info.value_size
        self.max_entries = info.max_entries
        self.per_cpu = self.type in PER_CPU_MAPS
        if self.per_cpu:
            from ..engine.perf import possible_cpus

            self.ncpus = len(possible_cpus())
            self._vsize = _round8(self.value_size) * self.ncpus
        else:
            self.ncpus, self._vsize = 1, self.value_size

    @classmethod
    def open_pinned(cls, path: str) -> "RawMap":
        fd = L.lib.bpf_obj_get(os.fsencode(path))
        if fd < 0:
            raise MapError(f"no pinned map at {path}: {os.strerror(-fd)}")
        try:
            return cls(fd, os.path.basename(path))
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def of(cls, engine_map) -> "RawMap":
        """A RawMap on its own duplicate of an engine Map's fd (outlives the object)."""
        return cls(os.dup(engine_map.fd), engine_map.name)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<RawMap {self.name} fd={self.fd}>"

    def _err(self, op: str, err: int) -> MapError:
        return MapError(f"{op} on map '{self.name}' failed: {os.strerror(abs(err))}")

    # --- single elements ---

    def lookup(self, key: bytes) -> bytes | None:
        buf = ctypes.create_string_buffer(self._vsize)
        err = L.lib.bpf_map_lookup_elem(self.fd, key, buf)
        if err:
            if abs(err) == 2:
                return None
            raise self._err("lookup", err)
        return buf.raw

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        if self.per_cpu and len(value) == self.value_size:
            value = value.ljust(_round8(self.value_size), b"\0") * self.ncpus
        err = L.lib.bpf_map_update_elem(self.fd, key, value, flags)
        if err:
            raise self._err("update", err)

    def delete(self, key: bytes) -> bool:
        err = L.lib.bpf_map_delete_elem(self.fd, key)
        if err and abs(err) != 2:
            raise self._err("delete", err)
        return not err

    def per_cpu_values(self, raw: bytes) -> list[bytes]:
        stride = _round8(self.value_size)
        return [raw[i * stride:i * stride + self.value_size] for i in range(self.ncpus)]

    # --- whole map ---

    def keys(self) -> list[bytes]:
        out = []
        key = ctypes.create_string_buffer(self.key_size)
        nxt = ctypes.create_string_buffer(self.key_size)
        err = L.lib.bpf_map_get_next_key(self.fd, None, nxt)
        while err == 0:
            out.append(nxt.raw)
            ctypes.memmove(key, nxt, self.key_size)
            err = L.lib.bpf_map_get_next_key(self.fd, key, nxt)
        if abs(err) != 2:
            raise self._err("iterate", err)
        return out

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value); batched where the map type allows it."""
        try:
            return self._batch_items()
        except _NoBatch:
            return [(k, v) for k in self.keys() if (v := self.lookup(k)) is not None]

    def _batch_items(self) -> list[tuple[bytes, bytes]]:
        ks, vs, chunk = self.key_size, self._vsize, _BATCH
        keys = ctypes.create_string_buffer(ks * chunk)
        vals = ctypes.create_string_buffer(vs * chunk)
        tok = max(ks, 8)
        in_tok, out_tok = ctypes.create_string_buffer(tok), ctypes.create_string_buffer(tok)
        opts, out, first = L.bpf_map_batch_opts(), [], True
        while True:
            count = ctypes.c_uint32(chunk)
            err = L.lib.bpf_map_lookup_batch(self.fd, None if first else in_tok, out_tok, keys, vals,
                                             ctypes.byref(count), ctypes.byref(opts))
            if err and first and abs(err) in (22, 95, 524):
                raise _NoBatch()
            if err and abs(err) != 2:
                raise self._err("batch lookup", err)
            kraw, vraw = keys.raw, vals.raw
            out.extend((kraw[i * ks:(i + 1) * ks], vraw[i * vs:(i + 1) * vs]) for i in range(count.value))
            if err:
                return out
            ctypes.memmove(in_tok, out_tok, tok)
            first = False

    def update_many(self, pairs: list[tuple[bytes, bytes]]) -> None:
        """Write many elements: one syscall per few thousand where the kernel can."""
        if not pairs:
            return
        if self.per_cpu:  # one value for every CPU unless given per CPU
            stride = _round8(self.value_size)
            pairs = [(k, v.ljust(stride, b"\0") * self.ncpus if len(v) == self.value_size else v)
                     for k, v in pairs]
        for start in range(0, len(pairs), _BATCH):
            part = pairs[start:start + _BATCH]
            if not self.update_packed(b"".join(k for k, _ in part), b"".join(v for _, v in part),
                                      len(part)):
                for k, v in part:
                    self.update(k, v)

    def update_packed(self, keys: bytes, values: bytes, count: int) -> bool:
        """One BPF_MAP_UPDATE_BATCH of ``count`` packed keys and values (per-CPU values
        already expanded). False if the map type has no batch update."""
        opts = L.bpf_map_batch_opts()
        n = ctypes.c_uint32(count)
        err = L.lib.bpf_map_update_batch(self.fd, keys, values, ctypes.byref(n), ctypes.byref(opts))
        if err and abs(err) in (22, 95, 524) and n.value == 0:
            return False
        if err:
            raise self._err("batch update", err)
        return True

    def delete_many(self, keys: list[bytes]) -> None:
        for k in keys:
            self.delete(k)

    def clear(self) -> None:
        if self.type in (MapType.ARRAY, MapType.PERCPU_ARRAY):
            zero = bytes(self.value_size)
            self.update_many([(i.to_bytes(4, "little"), zero) for i in range(self.max_entries)])
        else:
            self.delete_many(self.keys())


class _NoBatch(Exception):
    pass


def per_cpu_counter(m: RawMap, raw: bytes | None) -> tuple[int, int]:
    """(packets, bytes) summed over CPUs from a per-CPU {u64 packets; u64 bytes} value."""
    if raw is None:
        return 0, 0
    pk = by = 0
    for v in m.per_cpu_values(raw):
        p, b = COUNTER.unpack(v)
        pk, by = pk + p, by + b
    return pk, by
