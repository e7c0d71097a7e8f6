"""Event streams from BPF programs: ring buffers and perf buffers.

Both readers have the same engine-neutral interface, the only one tools use (a BCC-backed
reader could stand behind it later):

- ``poll(timeout_ms)``: wait up to ``timeout_ms`` for records, call ``callback(record)`` for
  each, return how many; an exception raised by the callback stops the poll and is re-raised.
- ``read_batch(timeout_ms) -> list`` and ``for ev in reader.events(timeout=...)`` for
  consumers that prefer pulling records to callbacks.
- ``fileno()`` / ``epoll_fd()``: readable when records are waiting, for ``select()`` over
  several readers (then ``poll(0)`` the ready ones).
- ``lost``: records the kernel dropped because the buffer was full (see each class).
- ``close()`` (also done by ``Object.close()``); readers are context managers.

Records are decoded through the object's BTF into ``Struct`` dicts (``ev.pid``,
``ev["comm"]``), or given as raw ``bytes`` with ``decode=False``. The record type is
``event_type`` (a struct name) if given; otherwise, by convention, the first of these
structs the program declares:

1. the map's name made singular: map ``events`` -> ``struct event``;
2. ``struct <map>_event``: map ``exec`` -> ``struct exec_event``;
3. ``struct event`` (libbpf-bootstrap's convention, e.g. map ``rb``).

clang puts a struct into the object's BTF only if a global variable or a function
signature uses it, not for local variables; so export it with ebpfkit.h's macro::

    struct event { u32 pid; char comm[16]; };
    EK_EXPORT_TYPE(struct event);  /* a never-used global pointer that keeps its BTF */

Readers are not thread-safe: poll a reader from one thread at a time.

Cost, measured on a 2-vCPU VM: libbpf's C callback into Python is ~0.3 us a record; copying
and dispatching it ~1 us; decoding a small struct ~1 us more. So one reader consumes roughly
0.5-0.9 M raw or 0.2-0.45 M decoded records/s; beyond that the buffer fills and ``lost``
grows. (Reading the ring's mmap'd pages in Python would save only the ~0.3 us callback.)
"""

from __future__ import annotations

import ctypes
import signal
import threading
import errno as _errno
import time
from collections import deque

from ..errors import EbpfkitError, LoadError, MapError
from . import _libbpf as L
from .resource import Resource
from .constants import MapType

DEFAULT_BATCH = 4096  # records per poll(): bounds one call's time and memory under a flood
_STOP = -1  # a ring-buffer sample callback returning < 0 makes libbpf stop consuming


class EventReader(Resource):
    """The common logic of ring and perf buffer readers: decoding, delivery to a callback or
    a batch, exception propagation, batching limits. Subclasses wrap libbpf's reader.

    ``batch``: at most this many records per poll()/read_batch() (None: no limit), so one
    call returns in bounded time and memory even when the program floods the buffer."""

    map_type = MapType.UNSPEC
    kind = "event buffer"

    def __init__(self, obj, map_name: str, callback=None, decode: bool = True,
                 event_type=None, batch: int | None = DEFAULT_BATCH):
        self.name = map_name
        self.callback = callback
        self.batch = batch if batch and batch > 0 else None
        self.map = self._find_map(obj, map_name)
        self._obj = obj  # keeps the object (and its maps) alive while reading
        self.event_type, self._codec = _event_codec(obj, map_name, event_type) if decode else (None, None)
        self._ptr = None  # the libbpf reader; set by subclasses
        self._sink = None  # where records of the current poll go
        self._budget = 0  # how many more records the current poll may deliver
        self._got = 0
        self._error: BaseException | None = None  # raised by the sink, re-raised from poll()
        self._pending: deque = deque()  # (raw, cpu) of records received after a stop (perf buffers)
        self.cpu = -1  # the CPU of the record being handed to the sink (perf buffers; -1: unknown)
        self._ready: deque = deque()  # decoded records an abandoned events() loop left over

    def _find_map(self, obj, name):
        m = obj.maps.get(name)
        if m is None:
            ours = [n for n, mp in obj.maps.items() if mp.type == self.map_type]
            raise MapError(f"no map '{name}' in object {obj.name}; its {self.kind} maps: "
                           f"{', '.join(ours) or 'none'}")
        if m.type != self.map_type:
            other = {MapType.RINGBUF: "ring_buffer()", MapType.PERF_EVENT_ARRAY: "perf_buffer()"}
            hint = f"; read it with {other[m.type]}" if m.type in other else ""
            raise MapError(f"map '{name}' is a {getattr(m.type, 'name', m.type)} map, "
                           f"not a {self.map_type.name}{hint}")
        return m

    # --- the public interface ---

    def poll(self, timeout_ms: int = 100) -> int:
        """Wait up to ``timeout_ms`` (-1: forever, 0: don't wait) for records and call the
        callback with each; returns the number of records delivered."""
        if self.callback is None:
            raise EbpfkitError(f"{type(self).__name__} '{self.name}' has no callback: "
                               "pass callback= or use read_batch() / events()")
        return self._run(self.callback, timeout_ms)

    def read_batch(self, timeout_ms: int = 0) -> list:
        """The records available now, waiting up to ``timeout_ms`` for the first one
        (at most ``batch`` records per call)."""
        out: list = []
        self._run(out.append, timeout_ms)
        return out

    def events(self, timeout: float | None = None, interval_ms: int = 100):
        """Yield records as they arrive, for ``timeout`` seconds (None: until close() or
        Ctrl-C; 0: one batch of those already buffered)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._ptr is not None:
            wait = interval_ms
            if deadline is not None:
                wait = max(0, min(wait, int((deadline - time.monotonic()) * 1000)))
            batch = deque(self.read_batch(wait))
            try:
                while batch:
                    yield batch.popleft()
            finally:  # the consumer stopped early: keep the rest for the next read
                self._ready.extendleft(reversed(batch))
            if deadline is not None and time.monotonic() >= deadline:
                return

    def __iter__(self):
        return self.events()

    @property
    def lost(self) -> int | None:
        """Records dropped because the buffer was full; None if this reader cannot know."""
        raise NotImplementedError

    def epoll_fd(self) -> int:
        self._check_open()
        return self._native_epoll_fd()

    fileno = epoll_fd

    def close(self) -> None:
        if self._ptr is not None:
            self._native_free()
            self._ptr = None
            self._callbacks = None  # libbpf no longer calls them
            self._pending.clear()
            self._ready.clear()

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def __repr__(self):
        state = "closed" if self.closed else f"lost={self.lost}"
        return f"<{type(self).__name__} {self.name} event_type={self.event_type} {state}>"

    # --- delivery ---

    def _check_open(self):
        if self._ptr is None:
            raise EbpfkitError(f"{type(self).__name__} '{self.name}' is closed")

    def _run(self, sink, timeout_ms: int) -> int:
        self._check_open()
        budget = self.batch or (1 << 62)
        n = self._deliver_pending(sink, budget)
        if n >= budget:
            return n
        self._sink, self._budget, self._got = sink, budget - n, 0
        try:
            with _SignalsDeferred():
                ret = self._native_poll(0 if n else timeout_ms)
        finally:
            self._sink = None
        n += self._got
        self._raise_stored_error()
        if ret < 0 and ret not in (_STOP, -_errno.EINTR):
            # EINTR: a signal arrived; Python raises its exception (e.g. KeyboardInterrupt) next
            raise EbpfkitError(f"polling {self.kind} '{self.name}' failed: {L.strerror(ret)}")
        return n

    def _deliver_pending(self, sink, budget: int) -> int:
        n = 0
        while self._ready and n < budget:
            n += 1
            sink(self._ready.popleft())
        while self._pending and n < budget:
            raw, self.cpu = self._pending.popleft()
            n += 1
            sink(self._codec.decode(raw) if self._codec else raw)
        return n

    def _on_record(self, raw: bytes, cpu: int = -1) -> bool:
        """Hand one record to the sink; False when the poll must stop (an exception was
        stored, or the batch is full). Runs inside libbpf's callback: never raises."""
        if self._error is not None or self._got >= self._budget:
            self._pending.append((raw, cpu))  # only perf buffers get here: they cannot stop early
            return False
        self._got += 1
        self.cpu = cpu
        try:
            self._sink(self._codec.decode(raw) if self._codec else raw)
        except BaseException as exc:  # including KeyboardInterrupt raised inside the callback
            self._error = exc
            return False
        return self._got < self._budget

    def _raise_stored_error(self):
        exc, self._error = self._error, None
        if exc is not None:
            raise exc

    # --- what a subclass provides ---

    def _native_poll(self, timeout_ms: int) -> int:
        raise NotImplementedError

    def _native_epoll_fd(self) -> int:
        raise NotImplementedError

    def _native_free(self) -> None:
        raise NotImplementedError


class _SignalsDeferred:
    """While libbpf runs our Python callbacks, a signal handler that raises (Ctrl-C's
    KeyboardInterrupt, the engine's SIGTERM -> SystemExit) would raise inside a ctypes
    callback, where the exception is printed and lost and the tool never stops. So note
    SIGINT/SIGTERM during the native poll and run their real handlers once it returned."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self.saved, self.caught = {}, []
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                handler = signal.getsignal(sig)
                if callable(handler):  # Python-level handlers only; SIG_DFL/SIG_IGN act in C
                    self.saved[sig] = handler
                    signal.signal(sig, self._note)
        return self

    def _note(self, signum, frame):
        self.caught.append(signum)

    def __exit__(self, *exc):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        for signum in self.caught:
            self.saved[signum](signum, None)  # raises KeyboardInterrupt / SystemExit here
        return False


class RingBuffer(EventReader):
    """A reader of a BPF_MAP_TYPE_RINGBUF map (one buffer shared by all CPUs, records in
    order), through libbpf's ring_buffer API.

    ``lost``: a ring buffer has no loss counter of its own. ebpfkit counts losses when the
    program defines the ring with ``EK_RINGBUF(name, bytes)`` and writes with
    ``ek_ringbuf_reserve`` / ``ek_ringbuf_output`` (ebpfkit.h), which add each failed
    reservation to the per-CPU map ``<name>_lost``; ``lost`` is its sum. Without that map,
    drops can't be counted and ``lost`` is None.
    """

    map_type = MapType.RINGBUF
    kind = "ring buffer"

    def __init__(self, obj, map_name: str, callback=None, decode: bool = True,
                 event_type=None, batch: int | None = DEFAULT_BATCH):
        super().__init__(obj, map_name, callback, decode, event_type, batch)
        self._lost_map = obj.maps.get(map_name + "_lost")
        string_at = ctypes.string_at

        def on_sample(_ctx, data, size):
            return 0 if self._on_record(string_at(data, size)) else _STOP

        # the ctypes function object must live as long as libbpf may call it
        self._callbacks = (L.ring_buffer_sample_fn(on_sample),)
        ptr = L.lib.ring_buffer__new(self.map.fd, self._callbacks[0], None, None)
        if not ptr:
            raise EbpfkitError(f"cannot read ring buffer '{map_name}': {L.strerror(L.errno())}")
        self._ptr = ptr

    @property
    def lost(self) -> int | None:
        if self._lost_map is None:
            return None
        return int(self._lost_map[0].sum())

    def _native_poll(self, timeout_ms):
        if timeout_ms == 0:  # what is there now, whether or not the kernel woke the epoll (a
            return L.lib.ring_buffer__consume(self._ptr)  # program may submit BPF_RB_NO_WAKEUP)
        return L.lib.ring_buffer__poll(self._ptr, timeout_ms)

    def _native_epoll_fd(self):
        return L.lib.ring_buffer__epoll_fd(self._ptr)

    def _native_free(self):
        L.lib.ring_buffer__free(self._ptr)


class PerfBuffer(EventReader):
    """A reader of a BPF_MAP_TYPE_PERF_EVENT_ARRAY map (one buffer of ``page_count`` pages,
    a power of 2, per CPU), through libbpf's perf_buffer API.

    ``lost``: the exact total of the kernel's PERF_RECORD_LOST reports. The kernel writes
    such a report into a CPU's buffer before the next record that fits there, so drops show
    up only once that CPU emits again after the buffer was drained. ``lost_callback(cpu,
    count)`` is called with each report. With ``decode=False`` a record's bytes may end in
    up to 7 bytes of padding (perf aligns samples to 8 bytes).
    """

    map_type = MapType.PERF_EVENT_ARRAY
    kind = "perf buffer"

    def __init__(self, obj, map_name: str, callback=None, decode: bool = True,
                 event_type=None, page_count: int = 64, lost_callback=None,
                 batch: int | None = DEFAULT_BATCH):
        if page_count <= 0 or page_count & (page_count - 1):
            raise EbpfkitError(f"perf buffer page_count must be a power of 2, not {page_count}")
        super().__init__(obj, map_name, callback, decode, event_type, batch)
        self.page_count = page_count
        self.lost_callback = lost_callback
        self._lost = 0
        string_at = ctypes.string_at

        def on_sample(_ctx, cpu, data, size):
            self._on_record(string_at(data, size), cpu)

        def on_lost(_ctx, cpu, count):
            self._lost += count
            if self.lost_callback is not None and self._error is None:
                try:
                    self.lost_callback(cpu, count)
                except BaseException as exc:
                    self._error = exc

        self._callbacks = (L.perf_buffer_sample_fn(on_sample), L.perf_buffer_lost_fn(on_lost))
        ptr = L.lib.perf_buffer__new(self.map.fd, page_count, self._callbacks[0], self._callbacks[1],
                                     None, None)
        if not ptr:
            raise EbpfkitError(f"cannot read perf buffer '{map_name}': {L.strerror(L.errno())}")
        self._ptr = ptr

    @property
    def lost(self) -> int:
        return self._lost

    def _native_poll(self, timeout_ms):
        # libbpf reads every ready CPU buffer to the end; records past a stop go to _pending.
        # Consume first: a perf event's readiness is cleared by whoever polls it, so after a
        # select() on fileno() said readable, epoll would see nothing until the next record.
        ret = L.lib.perf_buffer__consume(self._ptr)
        if ret < 0 or self._got or self._error is not None:
            return ret
        return L.lib.perf_buffer__poll(self._ptr, timeout_ms)

    def _native_epoll_fd(self):
        return L.lib.perf_buffer__epoll_fd(self._ptr)

    def _native_free(self):
        L.lib.perf_buffer__free(self._ptr)


# --- the record type ---

def _candidate_names(map_name: str) -> list[str]:
    names = []
    if map_name.endswith("s") and len(map_name) > 1:
        names.append(map_name[:-1])
    names += [f"{map_name}_event", "event"]
    return list(dict.fromkeys(names))


def _event_codec(obj, map_name: str, event_type):
    """(type name, codec) of the records of ``map_name``; see the module docstring."""
    from .btftypes import Kind, codec

    btf = obj.btf
    if btf is None:
        raise LoadError(f"object {obj.name} has no BTF, so records of '{map_name}' can't be "
                         "decoded; compile with -g or pass decode=False")
    if event_type is not None:
        if isinstance(event_type, int):
            return btf.type_str(event_type), codec(btf, event_type)
        name = event_type.split(" ", 1)[1] if event_type.startswith(("struct ", "union ")) else event_type
        try:
            tid = btf.find(name)
        except KeyError:
            raise MapError(f"event_type '{event_type}' is not in the BTF of object {obj.name}",
                           hint=f"clang drops types only local variables use: add "
                                f"'EK_EXPORT_TYPE(struct {name});' (from ebpfkit.h) at file scope") from None
        if btf.kind(tid) == Kind.FWD:
            raise MapError(f"event_type '{event_type}' is only declared, never defined")
        return btf.type_str(tid), codec(btf, tid)
    candidates = _candidate_names(map_name)
    for name in candidates:
        for kind in (Kind.STRUCT, Kind.UNION):
            try:
                tid = btf.find(name, kind)
            except KeyError:
                continue
            return btf.type_str(tid), codec(btf, tid)
    tried = ", ".join(f"struct {n}" for n in candidates)
    raise MapError(f"cannot tell the record type of '{map_name}': the BTF of object {obj.name} has "
                   f"none of {tried}",
                   hint="pass event_type='<struct name>' or name the struct after the map (map "
                        "'events' -> struct event), and keep it in BTF with 'EK_EXPORT_TYPE(struct event);' "
                        "from ebpfkit.h (clang drops types only local variables use); or pass "
                        "decode=False for bytes")


def foreign_ring_buffer_fd(ring_buffer: int) -> int:
    """The epoll descriptor of a libbpf ``struct ring_buffer *`` another library made in this
    process (BCC's ring buffer manager: libbcc links the same libbpf.so.1)."""
    return L.lib.ring_buffer__epoll_fd(ring_buffer)
