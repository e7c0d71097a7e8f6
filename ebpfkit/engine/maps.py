"""BPF maps as Python mappings, keys and values decoded through the object's BTF.

``Map`` is the engine-neutral Table tools use (ebpfkit.bcc.neutral puts BCC's own tables
behind the same methods): ``m[key]``, ``m[key] = v``, ``del m[key]``, iteration, ``items()`` (batched
where the kernel can), ``clear()``, per-CPU values with ``.sum()``, histograms and
``to_dataframe()``.

``KernelMap`` is the same interface on a map the kernel holds by fd (a pin, an id, a dup of
a loaded object's map), typed through the BTF the kernel keeps for it: what a persistent
tool's later commands use, so no tool carries a copy of a C layout.
"""

from __future__ import annotations

import ctypes
import itertools
import os
from collections.abc import MutableMapping
from collections.abc import Iterator

from ..errors import MapError, NotSupportedError
from . import _libbpf as L
from .constants import BPF_ANY, PER_CPU_MAPS, MapType
from .protocols import TableConveniences
from .pinned import FdMap, info, map_type as _map_type, round8
from .resource import Resource

_ARRAYS = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
_NO_KEY_MAPS = frozenset({MapType.RINGBUF, MapType.PERF_EVENT_ARRAY, MapType.QUEUE, MapType.STACK,
                          MapType.USER_RINGBUF, MapType.BLOOM_FILTER})


class RawCodec:
    """For maps without BTF: ints for 1/2/4/8-byte values, bytes otherwise."""

    def __init__(self, size: int):
        self.size = size

    def decode(self, buf, offset: int = 0):
        data = bytes(buf[offset:offset + self.size])
        return int.from_bytes(data, "little") if self.size in (1, 2, 4, 8) else data

    def encode(self, value) -> bytes:
        if isinstance(value, int) and self.size in (1, 2, 4, 8):
            return value.to_bytes(self.size, "little", signed=value < 0)
        data = bytes(value)
        if len(data) != self.size:
            raise MapError(f"expected {self.size} bytes, got {len(data)}")
        return data

    def zero(self):
        return self.decode(bytes(self.size))


class PerCpu(list):
    """A per-CPU value: one entry per possible CPU, plus ``sum()``."""

    def sum(self):
        if not self:
            return 0
        first = self[0]
        if isinstance(first, dict):
            return type(first)({k: _sum_field([v[k] for v in self]) for k in first})
        return _sum_field(list(self))


def _sum_field(values):
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sum(values)
    if all(isinstance(v, list) for v in values):
        return [_sum_field(list(col)) for col in zip(*values)]
    return values[0]


def possible_cpu_count() -> int:
    from .perf import possible_cpus

    return len(possible_cpus())


class Map(TableConveniences, MutableMapping):
    """A BPF map of a loaded (or, for sizing, an opened) object."""

    def __init__(self, ptr, btf=None, owner=None):
        self._ptr = ptr
        self._owner = owner  # keeps the bpf_object alive while the map is used
        self.name = L.lib.bpf_map__name(ptr).decode()
        self.type = _map_type(L.lib.bpf_map__type(ptr))
        self.key_size = L.lib.bpf_map__key_size(ptr)
        self.value_size = L.lib.bpf_map__value_size(ptr)
        self._btf = btf
        # the key's and value's BTF type ids in ``btf`` (0: none)
        self.key_type_id = L.lib.bpf_map__btf_key_type_id(ptr)
        self.value_type_id = L.lib.bpf_map__btf_value_type_id(ptr)
        self._key_codec = self._codec(self.key_type_id, self.key_size)
        self._value_codec = self._codec(self.value_type_id, self.value_size)
        self.per_cpu = self.type in PER_CPU_MAPS
        self._ncpus = possible_cpu_count() if self.per_cpu else 1
        self._batch_ok: bool | None = None
        self._raw: FdMap | None = None

    def _codec(self, type_id: int, size: int):
        if type_id and self._btf is not None:
            from .btftypes import codec

            return codec(self._btf, type_id)
        return RawCodec(size)

    # --- properties ---

    @property
    def btf(self):
        """The BTF of the object the map belongs to (None: created without)."""
        return self._btf

    @property
    def fd(self) -> int:
        if getattr(self._owner, "closed", False):  # libbpf freed the map with its object
            raise MapError(f"map '{self.name}' belongs to a closed object")
        fd = L.lib.bpf_map__fd(self._ptr)
        if fd < 0:
            raise MapError(f"map '{self.name}' is not loaded yet")
        return fd

    @property
    def raw(self) -> FdMap:
        """The map by fd, bytes in and out: what every operation here goes through."""
        fd = self.fd
        if self._raw is None or self._raw.fd != fd:
            self._raw = FdMap(fd, self.name, owned=False)
        return self._raw

    @property
    def max_entries(self) -> int:
        return L.lib.bpf_map__max_entries(self._ptr)

    @max_entries.setter
    def max_entries(self, n: int) -> None:
        err = L.lib.bpf_map__set_max_entries(self._ptr, n)
        if err:
            raise MapError(f"cannot resize map '{self.name}' (only before load): {os.strerror(-err)}")

    @property
    def autocreate(self) -> bool:
        """False: load() leaves this map out (only programs that do not use it may load)."""
        return bool(L.lib.bpf_map__autocreate(self._ptr))

    @autocreate.setter
    def autocreate(self, value: bool) -> None:
        if L.lib.bpf_map__set_autocreate(self._ptr, bool(value)):
            raise MapError(f"autocreate of map '{self.name}' can only change before load()")

    def reuse_fd(self, fd: int) -> None:
        """Before load: use the existing map ``fd`` (of the same shape) instead of creating
        one, so programs loaded apart share it."""
        err = L.lib.bpf_map__reuse_fd(self._ptr, fd)
        if err:
            raise MapError(f"map '{self.name}' cannot reuse fd {fd}: {os.strerror(-err)}")

    def __repr__(self):
        return f"<Map {self.name} {self.type.name.lower()} max_entries={self.max_entries}>"

    # --- encoding ---

    def _key_bytes(self, key) -> bytes:
        try:
            return self._key_codec.encode(key)
        except MapError as exc:
            raise MapError(f"bad key for map '{self.name}': {exc}") from None

    def _value_bytes(self, value) -> bytes:
        codec = self._value_codec
        try:
            if not self.per_cpu:
                return codec.encode(value)
            # a PerCpu list sets each CPU's value; anything else is the value for every CPU
            values = value if isinstance(value, PerCpu) else [value] * self._ncpus
            if len(values) != self._ncpus:
                raise MapError(f"expected {self._ncpus} per-CPU values, got {len(values)}")
            stride = round8(self.value_size)
            return b"".join(codec.encode(v).ljust(stride, b"\0") for v in values)
        except MapError as exc:
            raise MapError(f"bad value for map '{self.name}': {exc}") from None

    def _decode_value(self, buf, offset: int = 0):
        if not self.per_cpu:
            return self._value_codec.decode(buf, offset)
        stride = round8(self.value_size)
        return PerCpu(self._value_codec.decode(buf, offset + i * stride) for i in range(self._ncpus))

    # --- mapping protocol ---

    def __getitem__(self, key):
        raw = self.raw.lookup(self._key_bytes(key))
        if raw is None:
            raise KeyError(key)
        return self._decode_value(raw)

    def __setitem__(self, key, value) -> None:
        self.update(key, value)

    def update(self, key, value, flags: int = BPF_ANY) -> None:
        self.raw.update(self._key_bytes(key), self._value_bytes(value), flags)

    def update_many(self, pairs) -> None:
        """Write many (key, value) pairs: one syscall per few thousand where the kernel can."""
        self.raw.update_many(self.encode_pairs(pairs))

    def encode_pairs(self, pairs) -> list[tuple[bytes, bytes]]:
        """(key, value) pairs as the bytes ``raw.update_many`` writes (to this map, or to
        another of the same types without encoding again)."""
        pairs = list(pairs)
        key_fast, value_fast = self._key_codec.fast, self._value_codec.fast
        if key_fast is not None and value_fast is not None and not self.per_cpu:
            try:  # whole keys and values: one pack call each, no per-item wrappers
                return [(key_fast(k), value_fast(v)) for k, v in pairs]
            except Exception:  # noqa: BLE001 - encoded again below, which names the bad one
                pass
        return [(self._key_bytes(k), self._value_bytes(v)) for k, v in pairs]

    def __delitem__(self, key) -> None:
        if not self.delete(key):
            raise KeyError(key)

    def delete(self, key) -> bool:
        """Remove ``key``; False if it was not there."""
        if self.type in _ARRAYS:
            raise MapError(f"array map '{self.name}' elements cannot be deleted; assign zero instead")
        return self.raw.delete(self._key_bytes(key))

    def pop(self, key, *default):
        try:
            value = self[key]
            del self[key]
        except KeyError:
            if default:
                return default[0]
            raise
        return value

    def _raw_keys(self) -> Iterator[bytes]:
        if self.type in _NO_KEY_MAPS:
            raise MapError(f"map '{self.name}' ({self.type.name.lower()}) has no keys to iterate")
        return self.raw.iter_keys()

    def __iter__(self):
        for raw in self._raw_keys():
            yield self._key_codec.decode(raw)

    def __len__(self) -> int:
        if self.type in _ARRAYS:
            return self.max_entries
        return sum(1 for _ in self._raw_keys())

    def items(self):
        """All (key, value) pairs; one batch syscall per few hundred entries where supported."""
        if self._batch_ok is not False:
            try:
                return list(self._batch_items(delete=False))
            except NotSupportedError:
                self._batch_ok = False
        return list(self._iter_items())

    def values(self):
        return [v for _, v in self.items()]

    def head(self, n: int) -> list:
        """The first ``n`` (key, value) pairs in the map's order: an array's slots 0..n-1,
        e.g. the counters in use of a large counter array, without reading the rest."""
        if self._batch_ok is not False:
            try:
                pairs = self.raw.batch(False, limit=n)
                self._batch_ok = True
                return [(self._key_codec.decode(k), self._decode_value(v)) for k, v in pairs]
            except NotSupportedError:
                self._batch_ok = False
        return list(itertools.islice(self._iter_items(), n))

    def _iter_items(self):
        for raw in self._raw_keys():
            value = self.raw.lookup(raw)
            if value is not None:
                yield self._key_codec.decode(raw), self._decode_value(value)

    def _batch_items(self, delete: bool, chunk: int = 256):
        """Decoded (key, value) pairs by batch syscalls; NotSupportedError without them."""
        pairs = self.raw.batch(delete, chunk)
        self._batch_ok = True
        return [(self._key_codec.decode(k), self._decode_value(v)) for k, v in pairs]

    def pop_all(self) -> list:
        """Read and delete every entry (atomically per batch where the kernel can)."""
        if self.type not in _ARRAYS and self._batch_ok is not False:
            try:
                return self._batch_items(delete=True)
            except NotSupportedError:
                self._batch_ok = False
        items = list(self._iter_items())
        self.clear()
        return items

    def clear(self) -> None:
        """Remove every entry (arrays: set every element to zero)."""
        self.raw.clear()

    @property
    def is_array(self) -> bool:
        return self.type in _ARRAYS


class KernelMap(Map, Resource):
    """A map by fd, keys and values typed through the BTF the kernel keeps with it
    (bpf_map_info's btf_id and key/value type ids; ints and bytes for a map created without
    BTF). Owns its fd: ``close()`` it, or use it as a context manager."""

    def __init__(self, raw: FdMap):
        from .btftypes import kernel_btf_by_id

        meta = info(raw.fd, L.bpf_map_info)
        self._raw, self._owner = raw, None
        self.id, self.name, self.type = raw.id, raw.name, raw.type
        self.key_size, self.value_size = raw.key_size, raw.value_size
        self._btf = kernel_btf_by_id(meta.btf_id) if meta.btf_id else None
        self._key_codec = self._codec(meta.btf_key_type_id, self.key_size)
        self._value_codec = self._codec(meta.btf_value_type_id, self.value_size)
        self.per_cpu, self._ncpus = raw.per_cpu, raw.ncpus
        self._batch_ok = None

    @classmethod
    def open_pinned(cls, path: str, readonly: bool = False) -> "KernelMap":
        """The map pinned at ``path`` (read-only if asked); PinError if it cannot be opened."""
        return cls.owning(FdMap.open_pinned(path, readonly))

    @classmethod
    def by_id(cls, map_id: int) -> "KernelMap":
        fd = L.lib.bpf_map_get_fd_by_id(map_id)
        if fd < 0:
            raise MapError(f"no map with id {map_id}: {os.strerror(-fd)}")
        return cls.owning(FdMap(fd))

    @classmethod
    def of(cls, engine_map: Map) -> "KernelMap":
        """A loaded object's map on a duplicate fd of its own (it outlives the object)."""
        return cls.owning(FdMap.of(engine_map))

    @classmethod
    def owning(cls, raw: FdMap) -> "KernelMap":
        """Typed over ``raw``, whose fd it takes over (closed here if typing it fails)."""
        try:
            return cls(raw)
        except BaseException:
            raw.close()
            raise

    @property
    def fd(self) -> int:
        if self._raw.fd < 0:
            raise MapError(f"map '{self.name}' is closed")
        return self._raw.fd

    @property
    def raw(self) -> FdMap:
        return self._raw

    @property
    def max_entries(self) -> int:
        return self._raw.max_entries

    def close(self) -> None:
        self._raw.close()

    def __repr__(self):
        return f"<KernelMap {self.name} id={self.id} {getattr(self.type, 'name', self.type)}>"


def create_map(map_type: int, key_size: int, value_size: int, max_entries: int, name: str = "",
               flags: int = 0) -> int:
    """Create a standalone map (no BTF); returns its fd."""
    opts = L.bpf_map_create_opts(map_flags=flags)
    fd = L.lib.bpf_map_create(map_type, name.encode() or None, key_size, value_size, max_entries,
                              ctypes.byref(opts))
    if fd < 0:
        raise MapError(f"cannot create {MapType(map_type).name.lower()} map: {os.strerror(-fd)}")
    return fd


