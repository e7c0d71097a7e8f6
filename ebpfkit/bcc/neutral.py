"""One BCC-dialect program, either engine, the same objects out.

``Program`` loads and attaches a BCC-dialect program through ebpfkit's engine (translated to
CO-RE against BTF: no kernel headers) or through BCC itself (``engine="bcc"``: against this
kernel's headers, where there is no BTF), and hands out its maps as ``Table``s and its perf or
ring buffers as ``EventStream``s (ebpfkit.engine.protocols). Keys, values and records come out
decoded the same way from both: ints, str for char arrays, lists for other arrays, a
``Struct`` for a struct, a ``PerCpu`` list from a per-CPU map. A tool written against those
runs on either engine::

    with Program(src_file="counts.bcc.c", engine="bcc") as program:
        stats = program.table("stats")          # a Table
        for key, value in stats.pop_all(): ...
"""

from __future__ import annotations

import ctypes
import select
from collections import deque

from ..engine.btftypes import Struct
from ..engine.maps import PerCpu
from ..engine.protocols import TableConveniences
from ..errors import EbpfkitError


class Program:
    """A BCC-dialect program loaded and attached (its ``kprobe__``, ``TRACEPOINT_PROBE``, ...
    functions) by ``engine`` until ``close()``."""

    def __init__(self, text: str | None = None, src_file: str | None = None, cflags=(),
                 engine: str = "ebpfkit"):
        from .bpf import BPF

        self.engine = engine
        self.bpf = BPF(text=text, src_file=src_file, cflags=list(cflags), engine=engine)
        self._streams: list = []

    def table(self, name: str):
        """The map ``name`` as a Table."""
        table = self.bpf[name]
        return table.map if self.engine == "ebpfkit" else NativeTable(name, table)

    def events(self, name: str, callback=None):
        """The BPF_PERF_OUTPUT or BPF_RINGBUF_OUTPUT ``name`` as an EventStream of decoded
        records (``callback``, if given, gets each from ``poll()``)."""
        if self.engine == "ebpfkit":
            table = self.bpf[name]
            if type(table).__name__ == "RingBuf":
                stream = self.bpf._maps.ring_buffer(name, callback, event_type=table._event_type)
            else:
                stream = self.bpf._maps.perf_buffer(name, callback, event_type=table._event_type)
        else:
            stream = NativeEvents(self.bpf, name, callback)
        self._streams.append(stream)
        return stream

    def close(self) -> None:
        for stream in self._streams:
            stream.close()
        self._streams.clear()
        self.bpf.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def plain(value):
    """A value of BCC's (ctypes) as ebpfkit's engine decodes the same bytes."""
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return Struct((field[0], plain(getattr(value, field[0]))) for field in value._fields_
                      if not field[0].startswith("__pad"))  # BCC's own alignment padding
    if isinstance(value, ctypes.Array):
        if getattr(value, "_type_", None) is ctypes.c_char:
            return _text(value.value)
        return [plain(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return plain(value.value)
    if isinstance(value, bytes):  # a char array field of a Structure
        return _text(value)
    return value


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class NativeTable(TableConveniences):
    """One of BCC's tables (bcc.table.*) as a Table: decoded keys and values, ``pop_all``
    by BCC's batch lookup-and-delete where it has one."""

    def __init__(self, name: str, table):
        self.name = name
        self._table = table
        kind = type(table).__name__
        self.per_cpu = kind.startswith("PerCpu") or kind.startswith("LruPerCpu")
        self.is_array = "Array" in kind
        self.max_entries = table.max_entries

    def _key(self, key):
        if isinstance(key, self._table.Key):
            return key
        return self._table.Key(**key) if isinstance(key, dict) else self._table.Key(key)

    def _value(self, raw):
        return PerCpu(plain(v) for v in raw) if self.per_cpu else plain(raw)

    def __getitem__(self, key):
        return self._value(self._table[self._key(key)])

    def __setitem__(self, key, value) -> None:
        leaf = self._table.Leaf
        self._table[self._key(key)] = leaf(**value) if isinstance(value, dict) else leaf(value)

    def __delitem__(self, key) -> None:
        del self._table[self._key(key)]

    def __iter__(self):
        return (plain(k) for k in list(self._table.keys()))

    def __len__(self) -> int:
        return len(self._table)

    def items(self) -> list:
        return [(plain(k), self._value(v)) for k, v in self._table.items()]

    def values(self) -> list:
        return [v for _, v in self.items()]

    def pop_all(self) -> list:
        if not self.is_array and hasattr(self._table, "items_lookup_and_delete_batch"):
            try:
                return [(plain(k), self._value(v)) for k, v in self._table.items_lookup_and_delete_batch()]
            except Exception:  # noqa: BLE001 - BCC raises a bare Exception where the kernel has no batch ops
                pass
        items = self.items()
        self.clear()
        return items

    def clear(self) -> None:
        self._table.clear()

    def __repr__(self):
        return f"NativeTable({self.name!r}, {type(self._table).__name__})"


class NativeEvents:
    """BCC's perf or ring buffer reader of table ``name`` as an EventStream: records decoded by
    BCC's ``event()`` and then as ``plain`` does, losses counted (perf buffers)."""

    def __init__(self, bpf, name: str, callback=None):
        self.name, self.callback = name, callback
        self._bpf = bpf
        self._table = bpf[name]
        self._ready: deque = deque()
        self._lost = 0
        self.ring = type(self._table).__name__ == "RingBuf"
        self._epoll = None
        self._closed = False
        if self.ring:
            self._table.open_ring_buffer(lambda _ctx, data, _size: self._got(data))
        else:
            self._table.open_perf_buffer(lambda _cpu, data, _size: self._got(data), lost_cb=self._count_lost)
            self._epoll = self._perf_epoll()

    def _got(self, data) -> None:
        self._ready.append(plain(self._table.event(data)))

    def _count_lost(self, count: int) -> None:
        self._lost += count

    def _fill(self, timeout_ms: int) -> None:
        if self._ready or self._closed:
            return
        if self.ring:
            self._bpf.ring_buffer_poll(timeout_ms)
            return
        # consume first: a select() on fileno() clears a perf event's readiness, which
        # BCC's poll would then wait for in vain (as the engine's PerfBuffer does)
        self._bpf.perf_buffer_consume()
        if not self._ready:
            self._bpf.perf_buffer_poll(timeout_ms)

    def poll(self, timeout_ms: int = 100) -> int:
        if self.callback is None:
            raise EbpfkitError(f"event stream '{self.name}' has no callback: use read_batch() or events()")
        records = self.read_batch(timeout_ms)
        for record in records:
            self.callback(record)
        return len(records)

    def read_batch(self, timeout_ms: int = 0) -> list:
        self._fill(timeout_ms)
        out = list(self._ready)
        self._ready.clear()
        return out

    def events(self, timeout: float | None = None, interval_ms: int = 100):
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed:
            wait = interval_ms if deadline is None else max(0, min(interval_ms, int((deadline - time.monotonic()) * 1000)))
            yield from self.read_batch(wait)
            if deadline is not None and time.monotonic() >= deadline:
                return

    @property
    def lost(self) -> int | None:
        """Perf records lost; None for a ring buffer (BCC does not say)."""
        return None if self.ring else self._lost

    def fileno(self) -> int:
        """A descriptor readable when a record waits: perf buffers, an epoll set over BCC's
        readers of this table; ring buffers, the epoll descriptor of BCC's ring buffer manager
        (libbpf's, so readable when any ring buffer of the program has a record)."""
        if self.ring:
            from ..engine.events import foreign_ring_buffer_fd

            return foreign_ring_buffer_fd(self._bpf._ringbuf_manager)
        return self._epoll.fileno()

    def _perf_epoll(self):
        """An epoll set over this table's perf readers, made as they are opened: a perf event
        that signalled before it joined a set would not make the set readable later."""
        from .native import module

        lib = module().libbcc.lib
        epoll = select.epoll()
        for (owner, _cpu), reader in self._bpf.perf_buffers.items():
            if owner == id(self._table):
                epoll.register(lib.perf_reader_fd(reader), select.EPOLLIN)
        return epoll

    def close(self) -> None:
        """Stop reading: the perf readers are freed (BCC's cleanup() frees a ring buffer's)."""
        if self._closed:
            return
        self._closed = True
        if self._epoll is not None:
            self._epoll.close()
        if not self.ring:
            for owner, cpu in [k for k in self._bpf.perf_buffers if k[0] == id(self._table)]:
                del self._table[cpu]
