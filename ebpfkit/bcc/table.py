"""BCC's table classes over the engine's maps: keys and values are ctypes objects (Key and
Leaf made from the map's BTF), as BCC scripts expect; bytes go through the engine."""

from __future__ import annotations

import ctypes
from collections.abc import MutableMapping

from ..engine.constants import MapType
from ..errors import MapError
from .ctypes_btf import ctype


class TableBase(MutableMapping):
    """A hash-like table: ``t[key]`` (a Key, or what Key() takes), ``items()``, ``clear()``."""

    def __init__(self, bpf, engine_map, event_type: str | None = None):
        self.bpf, self.map, self.name = bpf, engine_map, engine_map.name
        self._raw = engine_map.raw
        self.Key = _ctype_of(engine_map, "key")
        self.Leaf = _ctype_of(engine_map, "value")
        self._event_type = event_type

    # --- keys and values ---

    def _key(self, key) -> bytes:
        return self._encode(key, self.Key, "key")

    def _leaf(self, value) -> bytes:
        return self._encode(value, self.Leaf, "value")

    def _encode(self, obj, kind, what: str) -> bytes:
        """``obj`` as the map's bytes: a Key/Leaf, a Python value one takes, or a ctypes object
        of the script's own with the same size (BCC passes any by reference: netqtop's Devname)."""
        if isinstance(obj, kind):
            return bytes(obj)
        if isinstance(obj, (ctypes.Structure, ctypes.Union, ctypes.Array)):
            raw = bytes(obj)
            if len(raw) != ctypes.sizeof(kind):
                raise MapError(f"table '{self.name}': a {what} of {len(raw)} bytes ({type(obj).__name__}) "
                               f"where the map's are {ctypes.sizeof(kind)}")
            return raw
        return bytes(kind(obj.value if isinstance(obj, ctypes._SimpleCData) else obj))

    def _decode(self, raw: bytes):
        return self.Leaf.from_buffer_copy(raw[:ctypes.sizeof(self.Leaf)])

    def __getitem__(self, key):
        raw = self._raw.lookup(self._key(key))
        if raw is None:
            raise KeyError(key)
        return self._decode(raw)

    def __setitem__(self, key, value) -> None:
        self._raw.update(self._key(key), self._leaf(value))

    def __delitem__(self, key) -> None:
        if not self._raw.delete(self._key(key)):
            raise KeyError(key)

    def __iter__(self):
        for raw in self._raw.keys():
            yield self.Key.from_buffer_copy(raw)

    def __len__(self) -> int:
        return len(self._raw.keys())

    def items(self):
        return [(self.Key.from_buffer_copy(k), self._decode(v)) for k, v in self._raw.items()]

    def items_lookup_batch(self):
        return self.items()

    def values(self):
        return [v for _, v in self.items()]

    def clear(self) -> None:
        for raw in self._raw.keys():
            self._raw.delete(raw)

    def zero(self) -> None:
        for raw in self._raw.keys():
            self._raw.update(raw, bytes(ctypes.sizeof(self.Leaf) * getattr(self, "_ncpus", 1)))

    # --- histograms, as BCC prints them ---

    def _histograms(self, bucket_fn=None) -> dict:
        """{section: [count per slot]}: a key with a ``slot`` field is (section, slot), the
        section its first field (BCC's per-disk, per-process histograms); else one section, None."""
        groups: dict = {}
        sectioned = issubclass(self.Key, ctypes.Structure)
        first = next((f for f, _ in getattr(self.Key, "_fields_", ()) if not f.startswith("__pad")), None)
        for k, v in self.items():
            if sectioned:
                section, slot = getattr(k, first), k.slot
                section = bucket_fn(section) if bucket_fn else section
            else:
                section, slot = None, _number(k)
            counts = groups.setdefault(section, {})
            counts[slot] = counts.get(slot, 0) + _total(v)
        return {s: [c.get(i, 0) for i in range(max(c) + 1)] for s, c in groups.items() if c}

    def _print_hists(self, histogram, val_type, section_header, section_print_fn, bucket_fn, bucket_sort_fn):
        groups = self._histograms(bucket_fn)
        sections = list(groups)
        if bucket_sort_fn:
            sections = bucket_sort_fn(sections)
        for section in sections:
            if section is not None:
                shown = section_print_fn(section) if section_print_fn else repr(section)
                _say(f"\n{_text(section_header)} = {shown}")
            _say("\n".join(histogram(groups[section], _text(val_type)).lines()))

    def print_log2_hist(self, val_type="value", section_header="Bucket ptr", section_print_fn=None,
                        bucket_fn=None, strip_leading_zero=None, bucket_sort_fn=None):
        from ..histogram import Log2Histogram

        # BCC's slot n (n >= 1) holds [2^(n-1), 2^n - 1]: the histogram's bucket n - 1
        self._print_hists(lambda counts, unit: Log2Histogram(counts[1:], unit=unit), val_type, section_header,
                          section_print_fn, bucket_fn, bucket_sort_fn)

    def print_linear_hist(self, val_type="value", section_header="Bucket ptr", section_print_fn=None,
                          bucket_fn=None, bucket_sort_fn=None):
        from ..histogram import LinearHistogram

        self._print_hists(lambda counts, unit: LinearHistogram(counts, unit=unit), val_type, section_header,
                          section_print_fn, bucket_fn, bucket_sort_fn)

    # --- events ---

    def event(self, data):
        """The event at ``data`` (what an output callback got) as a ctypes struct of the type
        the program submits into this table."""
        cls = self._event_class()
        return ctypes.cast(data, ctypes.POINTER(cls)).contents

    def _event_class(self):
        name = self._event_type
        if not name:
            raise MapError(f"table '{self.name}': no perf_submit/ringbuf_output call in the program says "
                           "what its events are")
        kind, _, bare = name.partition(" ")
        btf = self.bpf._btf
        return ctype(btf, btf.find(bare or kind, kind if bare else None))


class HashTable(TableBase):
    pass


class Array(TableBase):
    """An array: every index exists; ``clear()`` zeroes."""

    def __len__(self) -> int:
        return self.map.max_entries

    def __iter__(self):
        for i in range(len(self)):
            yield self.Key(i)

    def __getitem__(self, key):
        index = key.value if hasattr(key, "value") else key
        if not 0 <= index < len(self):
            raise IndexError(f"array index {index} out of range (0..{len(self) - 1})")
        return super().__getitem__(key)

    def __delitem__(self, key) -> None:
        self[key] = self.Leaf()

    def items(self):
        return [(k, self[k]) for k in self]

    def clear(self) -> None:
        self.zero()

    def zero(self) -> None:
        blank = bytes(ctypes.sizeof(self.Leaf))
        for k in self:
            self._raw.update(bytes(k), blank)


class _PerCpu:
    """Values for every CPU: ``t[k]`` is a list (one Leaf per CPU); ``sum``/``max``/``average``."""

    def _decode(self, raw: bytes):
        return [self.Leaf.from_buffer_copy(chunk[:ctypes.sizeof(self.Leaf)])
                for chunk in self._raw.per_cpu_values(raw)]

    def _leaf(self, value) -> bytes:
        values = value if isinstance(value, (list, tuple)) else [value]
        stride = (ctypes.sizeof(self.Leaf) + 7) & ~7
        return b"".join(TableBase._leaf(self, v).ljust(stride, b"\0") for v in values)

    def sum(self, key):
        return self.Leaf(sum(_number(v) for v in self[key]))

    def max(self, key):
        return self.Leaf(max(_number(v) for v in self[key]))

    def average(self, key):
        values = [_number(v) for v in self[key]]
        return sum(values) / len(values)


class PerCpuHash(_PerCpu, HashTable):
    pass


class PerCpuArray(_PerCpu, Array):
    pass


class PerfEventArray(TableBase):
    def __init__(self, bpf, engine_map, event_type=None):
        self.bpf, self.map, self.name, self._event_type = bpf, engine_map, engine_map.name, event_type

    def open_perf_buffer(self, callback, page_cnt: int = 8, lost_cb=None, wakeup_events: int = 1):
        """Deliver each event to ``callback(cpu, data, size)`` from ``perf_buffer_poll()``."""
        def on_record(raw: bytes):
            buf = ctypes.create_string_buffer(raw, len(raw))
            callback(reader.cpu, ctypes.cast(buf, ctypes.c_void_p), len(raw))

        lost = (lambda cpu, count: lost_cb(count)) if lost_cb else None
        reader = self.bpf._maps.perf_buffer(self.name, callback=on_record, decode=False, page_count=page_cnt,
                                            lost_callback=lost)
        self.bpf._readers.append(reader)


class RingBuf(TableBase):
    def __init__(self, bpf, engine_map, event_type=None):
        self.bpf, self.map, self.name, self._event_type = bpf, engine_map, engine_map.name, event_type

    def open_ring_buffer(self, callback, ctx=None):
        """Deliver each event to ``callback(ctx, data, size)`` from ``ring_buffer_poll()``."""
        def on_record(raw: bytes):
            buf = ctypes.create_string_buffer(raw, len(raw))
            callback(ctx, ctypes.cast(buf, ctypes.c_void_p), len(raw))

        self.bpf._readers.append(self.bpf._maps.ring_buffer(self.name, callback=on_record, decode=False))


class StackTrace(TableBase):
    def __init__(self, bpf, engine_map, event_type=None):
        self.bpf, self.map, self.name = bpf, engine_map, engine_map.name
        self._raw = engine_map.raw
        self.Key = ctypes.c_uint32
        self.Leaf = ctypes.c_uint64 * (engine_map.value_size // 8)

    def walk(self, stack_id):
        """The addresses of stack ``stack_id``, innermost first."""
        raw = self._raw.lookup(bytes(ctypes.c_uint32(stack_id)))
        if raw is None:
            return iter(())
        return iter([a for a in self.Leaf.from_buffer_copy(raw) if a])


_CLASSES = {MapType.HASH: HashTable, MapType.LRU_HASH: HashTable, MapType.ARRAY: Array,
            MapType.PERCPU_HASH: PerCpuHash, MapType.LRU_PERCPU_HASH: PerCpuHash,
            MapType.PERCPU_ARRAY: PerCpuArray, MapType.PERF_EVENT_ARRAY: PerfEventArray,
            MapType.RINGBUF: RingBuf, MapType.STACK_TRACE: StackTrace}


def table(bpf, engine_map, event_type: str | None = None) -> TableBase:
    cls = _CLASSES.get(engine_map.type)
    if cls is None:
        raise MapError(f"table '{engine_map.name}': {getattr(engine_map.type, 'name', engine_map.type)} maps "
                       "have no BCC table class here yet")
    return cls(bpf, engine_map, event_type)


def _ctype_of(engine_map, which: str):
    type_id = engine_map.key_type_id if which == "key" else engine_map.value_type_id
    size = engine_map.key_size if which == "key" else engine_map.value_size
    if type_id and engine_map.btf is not None:
        return ctype(engine_map.btf, type_id)
    return ctypes.c_uint8 * size


def _say(text: str) -> None:
    """BCC's API prints to stdout; so does this, through the output layer."""
    from ..output import forward_output

    forward_output("stdout", (text + "\n").encode())


def _number(v) -> int:
    return v.value if hasattr(v, "value") else int(v)


def _total(v) -> int:
    """A value, or a per-CPU value's sum over the CPUs."""
    return sum(_number(x) for x in v) if isinstance(v, list) else _number(v)


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
