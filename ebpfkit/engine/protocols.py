"""The engine-neutral interfaces tools program against.

Tools use maps, histograms and event streams only through these, so a second engine (BCC,
for kernels without BTF or BCC-dialect C) can stand behind the same tools by providing
objects with the same shape. The libbpf engine's Map, RingBuffer and PerfBuffer satisfy them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Table(Protocol):
    """A BPF map: a mutable mapping with decoded keys and values, plus bulk reads."""

    name: str

    def __getitem__(self, key): ...

    def __setitem__(self, key, value) -> None: ...

    def __delitem__(self, key) -> None: ...

    def __iter__(self) -> Iterator: ...

    def __len__(self) -> int: ...

    def items(self) -> list[tuple[Any, Any]]: ...

    def pop_all(self) -> list[tuple[Any, Any]]: ...

    def clear(self) -> None: ...

    def to_dicts(self) -> list[dict]: ...

    def log2_histogram(self, unit: str = "value", field: str | None = None, key=None): ...

    def linear_histogram(self, base: int = 0, step: int = 1, unit: str = "value", field=None,
                         key=None): ...


@runtime_checkable
class EventStream(Protocol):
    """Records from the kernel (ring or perf buffer), decoded, with every loss counted."""

    def poll(self, timeout_ms: int = 100) -> int: ...

    def read_batch(self, timeout_ms: int = 0) -> list: ...

    def events(self, timeout: float | None = None) -> Iterator: ...

    @property
    def lost(self) -> int | None: ...

    def fileno(self) -> int: ...

    def close(self) -> None: ...
