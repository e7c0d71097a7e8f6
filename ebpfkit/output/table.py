"""ResultTable: rows of a tool's result, rendered as a rich table no wider than MAX_TABLE_WIDTH."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .values import cell_text, is_number, plain

MAX_TABLE_WIDTH = 100


@dataclass(frozen=True)
class Column:
    """One column. ``key`` is the row-dict key (default: ``name``); ``align`` is "left" or
    "right" (default: right for numbers); ``width`` is the minimum width (a fixed width for
    event lines); ``max_width`` caps a text column; ``format`` is a format spec (".1f") or a
    callable turning the value into text."""

    name: str
    key: str | None = None
    align: str | None = None
    width: int | None = None
    max_width: int | None = None
    format: str | Callable | None = None

    def __post_init__(self):
        if self.key is None:
            object.__setattr__(self, "key", self.name)
        if self.align not in (None, "left", "right"):
            raise ValueError(f"column {self.name!r}: align must be 'left' or 'right'")


def as_column(spec: str | Column) -> Column:
    return spec if isinstance(spec, Column) else Column(str(spec))


class ResultTable:
    """Columns and rows (dicts keyed by column key, or sequences in column order). ``width``
    caps the rendered width (wide side-by-side comparisons may ask for more). ``data_keys``,
    when given, are the keys JSON and CSV carry instead of the columns' (a narrow table for
    the eye over wider data)."""

    def __init__(self, columns: Iterable[str | Column], rows: Iterable[Mapping | Sequence] = (),
                 title: str | None = None, width: int = MAX_TABLE_WIDTH,
                 data_keys: Sequence[str] | None = None):
        self.columns = [as_column(c) for c in columns]
        self.title = title
        self.width = width
        self.data_keys = list(data_keys) if data_keys is not None else None
        self.rows: list[dict] = []
        for row in rows:
            self.add_row(row)

    def add_row(self, row: Mapping | Sequence | None = None, **values) -> None:
        if row is None:
            row = values
        elif not isinstance(row, Mapping):
            row = list(row)
            if len(row) != len(self.columns):
                raise ValueError(f"row has {len(row)} values for {len(self.columns)} columns")
            row = {c.key: v for c, v in zip(self.columns, row)}
        self.rows.append(dict(row))

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    @property
    def keys(self) -> list[str]:
        """The keys of the data (JSON, CSV, data frames): ``data_keys``, else the columns'."""
        return self.data_keys if self.data_keys is not None else [c.key for c in self.columns]

    def to_dicts(self) -> list[dict]:
        """Rows as plain dicts in key order (bytes decoded, enums by name)."""
        keys = self.keys
        return [{k: plain(row.get(k)) for k in keys} for row in self.rows]

    def to_dataframe(self):
        from .notebook import require_pandas

        return require_pandas().DataFrame(self.to_dicts(), columns=self.keys)

    # --- rendering ---

    def _is_numeric(self, column: Column) -> bool:
        values = [row.get(column.key) for row in self.rows]
        return all(is_number(v) or v is None for v in values) and any(v is not None for v in values)

    def rich_table(self):
        """The rich Table (borderless, like classic top-style tools)."""
        from rich.table import Table
        from rich.text import Text

        title = Text(self.title, style="bold") if self.title else None
        table = Table(title=title, box=None, pad_edge=False, header_style="bold",
                      show_edge=False, highlight=False)
        numeric = [self._is_numeric(c) for c in self.columns]
        for column, is_num in zip(self.columns, numeric):
            # Numbers must never be cut; text columns (paths, commands) are what shrinks.
            table.add_column(column.name, justify=column.align or ("right" if is_num else "left"),
                             no_wrap=is_num, overflow="ellipsis", min_width=column.width,
                             max_width=column.max_width)
        for row in self.rows:
            cells = []
            for column, is_num in zip(self.columns, numeric):
                text = cell_text(row.get(column.key), column.format)
                # The cell refuses to wrap, so a narrowed column ellipsizes instead.
                cells.append(text if is_num else Text(text, no_wrap=True, overflow="ellipsis"))
            table.add_row(*cells)
        return table

    def __rich_console__(self, console, options):
        from rich.constrain import Constrain

        yield Constrain(self.rich_table(), self.width)

    def __str__(self) -> str:
        from .notebook import render_text

        return render_text(self, self.width)

    def _repr_mimebundle_(self, include=None, exclude=None):
        from .notebook import mimebundle

        return mimebundle(self)

    def __repr__(self) -> str:
        return f"ResultTable(columns={self.keys!r}, rows={len(self.rows)})"
