"""The engine-neutral interfaces tools program against.

Tools use maps, histograms and event streams only through these, so a second engine (BCC,
for kernels without BTF or BCC-dialect C) can stand behind the same tools by providing
objects with the same shape. The libbpf engine's Map, RingBuffer and PerfBuffer satisfy them,
and so do ebpfkit.bcc.neutral's wrappers of BCC's tables and buffers; ``TableConveniences``
is what both kinds of Table build on their items.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from ..errors import NotSupportedError


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


class TableConveniences:
    """Rows, data frames and histograms from a Table's ``items()``, for tools and notebooks.
    The class mixing it in has ``items()``, ``per_cpu``, ``is_array`` and ``max_entries``,
    and ``__getitem__`` (a per-CPU value being a list with ``sum()``)."""

    def to_dicts(self) -> list[dict]:
        rows = []
        for key, value in self.items():
            row = dict(key) if isinstance(key, dict) else {"key": key}
            if self.per_cpu:
                value = value.sum()
            row.update(value if isinstance(value, dict) else {"value": value})
            rows.append(row)
        return rows

    def to_dataframe(self):
        try:
            import pandas
        except ImportError:
            raise NotSupportedError("pandas", "to_dataframe() needs pandas",
                                    hint="pip install 'ebpfkit[notebook]'") from None
        return pandas.DataFrame(self.to_dicts())

    def log2_histogram(self, unit: str = "value", field: str | None = None, key=None):
        """The map's counts as a Log2Histogram: an array of per-bucket counts, or the array
        field ``field`` (e.g. 'slots') of the value stored at ``key``."""
        from ..histogram import Log2Histogram

        return Log2Histogram.from_counts(self._bucket_counts(field, key), unit=unit)

    def linear_histogram(self, base: int = 0, step: int = 1, unit: str = "value", field=None, key=None):
        from ..histogram import LinearHistogram

        return LinearHistogram.from_counts(self._bucket_counts(field, key), base=base, step=step, unit=unit)

    def _bucket_counts(self, field, key) -> list[int]:
        if field is None and key is None:
            values = dict(self.items())
            n = self.max_entries if self.is_array else max(values, default=-1) + 1
            return [_total(values.get(i, 0)) for i in range(n)]
        value = self[key if key is not None else 0]
        if self.per_cpu:
            value = value.sum()
        return list(value[field] if field else value)


def _total(value) -> int:
    return value.sum() if hasattr(value, "sum") else int(value)
