"""Engine-neutral histograms: bucket counts read from a BPF map, rendered like BCC's
print_log2_hist / print_linear_hist, and convertible to JSON dicts or DataFrames.

Nothing here imports rich or pandas at import time: tools that print JSON never pay for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

STARS_WIDTH = 40


def _stars(count: int, max_count: int) -> str:
    # Same rounding as BCC: floor(width * count / max), never wider than the bar.
    if max_count <= 0:
        return ""
    return "*" * min(STARS_WIDTH, STARS_WIDTH * count // max_count)


class Histogram:
    """Base of Log2Histogram and LinearHistogram: ``counts[i]`` is the count of bucket i;
    subclasses define the value range each bucket covers."""

    kind = ""  # "log2" or "linear", the JSON "type"

    def __init__(self, counts: Sequence[int] = (), unit: str = "value", label: str | None = None,
                 sum: float | None = None):  # noqa: A002 - the statistic's name
        self.counts = [int(c) for c in counts]
        self.unit = unit
        self.label = label
        self.sum = sum  # the exact sum of the counted values (in ``unit``) where the source keeps one

    @staticmethod
    def _counts_list(counts: Sequence[int] | Mapping[int, int]) -> list[int]:
        """A list of counts, or a {bucket index: count} mapping (sparse, e.g. from a hash map)."""
        if isinstance(counts, Mapping):
            if any(int(i) < 0 for i in counts):
                raise ValueError("bucket indexes must be >= 0")
            dense = [0] * (max((int(i) for i in counts), default=-1) + 1)
            for index, count in counts.items():
                dense[int(index)] += int(count)
            return dense
        return [int(c) for c in counts]

    # --- ranges ---

    def bounds(self, index: int) -> tuple[int, int]:
        """(low, high) values, both inclusive, counted in bucket ``index``."""
        raise NotImplementedError

    def bucket_of(self, value: int) -> int:
        raise NotImplementedError

    def add(self, value: int, count: int = 1) -> None:
        """Count ``value`` (handy for tests and pure-Python data)."""
        index = self.bucket_of(value)
        if index >= len(self.counts):
            self.counts.extend([0] * (index + 1 - len(self.counts)))
        self.counts[index] += count

    def _used_range(self) -> range:
        """Indexes from the first to the last non-empty bucket (empty ends are noise)."""
        used = [i for i, c in enumerate(self.counts) if c]
        return range(used[0], used[-1] + 1) if used else range(0)

    # --- statistics ---

    @property
    def total(self) -> int:
        return sum(self.counts)

    def percentile(self, p: float) -> int | None:
        """Approximate p-th percentile (0-100): the high end of the bucket it falls in, so the
        true value is at most this. None when the histogram is empty."""
        if not 0 <= p <= 100:
            raise ValueError(f"percentile must be between 0 and 100, not {p}")
        total = self.total
        if not total:
            return None
        target = p / 100 * total
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if count and seen >= target:
                return self.bounds(index)[1]
        return self.bounds(len(self.counts) - 1)[1]  # unreachable unless counts are negative

    # --- conversions ---

    def buckets(self) -> list[dict]:
        """Buckets from the first to the last non-empty one, as {low, high, count} dicts."""
        result = []
        for index in self._used_range():
            low, high = self.bounds(index)
            result.append({"low": low, "high": high, "count": self.counts[index]})
        return result

    def to_dict(self) -> dict:
        """The JSON form."""
        data = {"type": self.kind, "unit": self.unit}
        if self.label is not None:
            data["label"] = self.label
        data.update(self._extra_fields())
        data["buckets"] = self.buckets()
        data["total"] = self.total
        return data

    def _extra_fields(self) -> dict:
        return {}

    def to_dicts(self) -> list[dict]:
        return self.buckets()

    def to_dataframe(self):
        from .output.notebook import require_pandas

        pandas = require_pandas("to_dataframe()")
        return pandas.DataFrame(self.buckets(), columns=["low", "high", "count"])

    # --- rendering ---

    def lines(self) -> list[str]:
        """The plain-text rendering, one string per line: "low -> high : count |***|"."""
        used = self._used_range()
        widest = max((len(str(v)) for i in used for v in self.bounds(i)), default=0)
        # BCC widens the value columns for 64-bit ranges; the same idea, sized to fit.
        width = max(10, widest)
        lines = self._label_lines()
        lines.append(f"{'':{width - 5}}{self.unit:<{width + 9}} : count    distribution")
        max_count = max(self.counts, default=0)
        for index in used:
            low, high = self.bounds(index)
            count = self.counts[index]
            lines.append(f"{low:>{width}} -> {high:<{width}} : {count:<8} "
                         f"|{_stars(count, max_count):<{STARS_WIDTH}}|")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __rich_console__(self, console, options):
        from rich.text import Text

        for line in self.lines():
            yield Text(line, no_wrap=True, overflow="crop")

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        width = max((len(line) for line in self.lines()), default=0)
        return Measurement(width, width)

    def _repr_mimebundle_(self, include=None, exclude=None):
        from .output.notebook import mimebundle

        return mimebundle(self)

    def __repr__(self) -> str:
        label = f", label={self.label!r}" if self.label is not None else ""
        return f"{type(self).__name__}(unit={self.unit!r}, total={self.total}{label})"

    def __eq__(self, other) -> bool:
        return (type(other) is type(self) and self.unit == other.unit and self.label == other.label
                and self._extra_fields() == other._extra_fields()
                and _strip_zeros(self.counts) == _strip_zeros(other.counts))

    __hash__ = None  # mutable

    def _label_lines(self) -> list[str]:
        return [self.label] if self.label is not None else []


def _strip_zeros(counts: list[int]) -> list[int]:
    end = len(counts)
    while end and not counts[end - 1]:
        end -= 1
    return counts[:end]


class Log2Histogram(Histogram):
    """Power-of-two buckets: bucket 0 holds [0, 1], bucket i >= 1 holds [2^i, 2^(i+1) - 1]."""

    kind = "log2"

    @classmethod
    def from_counts(cls, counts: Sequence[int] | Mapping[int, int], unit: str = "value",
                    label: str | None = None, sum: float | None = None) -> Log2Histogram:  # noqa: A002
        return cls(cls._counts_list(counts), unit=unit, label=label, sum=sum)

    def bounds(self, index: int) -> tuple[int, int]:
        if index < 0:
            raise IndexError(index)
        if index == 0:
            return 0, 1
        return 1 << index, (1 << (index + 1)) - 1

    def bucket_of(self, value: int) -> int:
        if value < 0:
            raise ValueError("log2 histograms count values >= 0")
        return max(0, int(value).bit_length() - 1)


class LinearHistogram(Histogram):
    """Equal-width buckets: bucket i holds [base + i*step, base + (i+1)*step - 1]."""

    kind = "linear"

    def __init__(self, counts: Sequence[int] = (), base: int = 0, step: int = 1, unit: str = "value",
                 label: str | None = None):
        if step <= 0:
            raise ValueError(f"step must be positive, not {step}")
        super().__init__(counts, unit=unit, label=label)
        self.base = int(base)
        self.step = int(step)

    @classmethod
    def from_counts(cls, counts: Sequence[int] | Mapping[int, int], base: int = 0, step: int = 1,
                    unit: str = "value", label: str | None = None) -> LinearHistogram:
        return cls(cls._counts_list(counts), base=base, step=step, unit=unit, label=label)

    def bounds(self, index: int) -> tuple[int, int]:
        if index < 0:
            raise IndexError(index)
        low = self.base + index * self.step
        return low, low + self.step - 1

    def bucket_of(self, value: int) -> int:
        if value < self.base:
            raise ValueError(f"value {value} is below the histogram's base {self.base}")
        return (int(value) - self.base) // self.step

    def _extra_fields(self) -> dict:
        return {"base": self.base, "step": self.step}

    def lines(self) -> list[str]:
        if self.step != 1:
            return super().lines()
        # One value per bucket: BCC's print_linear_hist layout.
        used = self._used_range()
        width = max(10, max((len(str(self.bounds(i)[0])) for i in used), default=0))
        lines = self._label_lines()
        lines.append(f"     {self.unit:<{width + 3}} : count    distribution")
        max_count = max(self.counts, default=0)
        for index in used:
            count = self.counts[index]
            lines.append(f"        {self.bounds(index)[0]:<{width}} : {count:<8} "
                         f"|{_stars(count, max_count):<{STARS_WIDTH}}|")
        return lines
