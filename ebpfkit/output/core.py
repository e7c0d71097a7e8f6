"""Output: the one object a tool prints through (results on stdout or --output FILE,
messages on stderr), honouring --format table|json|csv, --no-color and -T."""

from __future__ import annotations

import sys
from dataclasses import replace
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .logs import event_log_enabled, get_logger, json_console_messages, log_event
from .settings import OutputSettings
from .table import MAX_TABLE_WIDTH, Column, ResultTable, as_column
from .values import clock_time, cell_text, iso_time, is_number, now, plain, to_json

if TYPE_CHECKING:
    from ..histogram import Histogram

SETTINGS_KEY = "ebpfkit.output.settings"
OUTPUTS_KEY = "ebpfkit.output.outputs"


def settings_from_context(ctx) -> OutputSettings:
    """The settings the root CLI (and the tool's own options) stored in the click context."""
    settings = ctx.meta.get(SETTINGS_KEY)
    if settings is None:
        settings = ctx.find_object(OutputSettings)
    return settings or OutputSettings()


class Output:
    """Prints a tool's results and messages.

    Results: ``table()``, ``histogram()``, ``histograms()`` (once, or once per interval inside
    ``with out.live():``), ``event()`` for event streams. Messages: ``banner()``, ``info()``,
    ``warn()``, ``error()``, ``lost()``.
    """

    def __init__(self, settings: OutputSettings | None = None, name: str = "ebpfkit", *,
                 stream=None, console=None):
        self.settings = settings or OutputSettings()
        self.name = name
        self.log = get_logger(name)
        self.lost_total = 0
        # For tests/embedding (default: the given console's file); else --output FILE or stdout.
        self._stream = stream if stream is not None or console is None else console.file
        self._file = None
        self._console = console
        self._live = None                # rich Live while redrawing in place
        self._in_live = False
        self._csv_header: list[str] | None = None
        self._event_columns: list[Column] | None = None
        self._event_data_keys: list[str] | None = None
        self._event_detail = None
        self._event_header_done = False

    @classmethod
    def from_context(cls, ctx=None, name: str | None = None) -> Output:
        """The Output for the current click command (one per tool; closed with the context)."""
        import click

        ctx = ctx or click.get_current_context()
        if name is None:
            # "ebpfkit net tcpdrop" -> "net.tcpdrop": the logger becomes ebpfkit.tools.net.tcpdrop
            name = ".".join(ctx.command_path.split()[1:]) or ctx.info_name or "ebpfkit"
        outputs = ctx.meta.setdefault(OUTPUTS_KEY, {})
        if name not in outputs:
            out = outputs[name] = cls(settings_from_context(ctx), name=name)
            ctx.call_on_close(out.close)  # flushes/closes --output FILE, ends a Live display
        return outputs[name]

    # --- where results go ---

    @property
    def format(self) -> str:
        return self.settings.format

    @property
    def stream(self):
        if self._stream is not None:
            return self._stream
        path = self.settings.output_file
        if path and path != "-":
            if self._file is None:
                try:
                    self._file = open(path, "w", encoding="utf-8", newline="")
                except OSError as exc:
                    import click

                    raise click.FileError(path, hint=exc.strerror or str(exc)) from exc
            return self._file
        return sys.stdout  # looked up each time: it may be redirected (click's CliRunner, Live)

    @property
    def console(self):
        """rich Console for table-format results (created on first use)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, no_color=not self.settings.color,
                                    highlight=False, soft_wrap=False)
            if not self._console.is_terminal:
                self._console.width = MAX_TABLE_WIDTH  # files and pipes: don't guess 80
        return self._console

    def _write_line(self, line: str) -> None:
        stream = self.stream
        stream.write(line + "\n")
        stream.flush()  # event streams are read live (| grep, tail -f)

    def close(self) -> None:
        self._stop_live()
        if self._file is not None:
            self._file.close()
            self._file = None

    # --- messages (stderr) ---

    def banner(self, text: str) -> None:
        """The "Tracing... Hit Ctrl-C to end." line; on stderr so stdout stays pure data."""
        import click

        click.echo(click.style(text, bold=True), err=True, color=None if self.settings.color else False)

    def debug(self, msg: str, *args) -> None:
        self.log.debug(msg, *args)

    def info(self, msg: str, *args) -> None:
        self.log.info(msg, *args)

    def warn(self, msg: str, *args) -> None:
        self.log.warning(msg, *args)

    warning = warn

    def error(self, msg: str, *args) -> None:
        self.log.error(msg, *args)

    def service_messages(self) -> None:
        """For a long-running service (the exporter): with --format json, its messages on
        stderr are JSON lines too, what a log collector reads from a container's output."""
        if self.format == "json":
            json_console_messages()

    def lost(self, count: int, what: str = "events") -> None:
        """Report records the kernel dropped (full ring/perf buffer), so nobody trusts silent gaps."""
        if count > 0:
            self.lost_total += count
            self.log.warning("lost %d %s (buffer full: try a larger buffer or fewer events)",
                             count, what)

    def log_event(self, record: Mapping) -> None:
        """Keep ``record`` in the --log file as a JSON line; no-op without --log. Results and
        events printed through this object are kept there already (as their JSON form)."""
        log_event(self.name, dict(record))

    # --- interval results ---

    @contextmanager
    def live(self):
        """Interval mode. Inside, each table()/histogram()/histograms() call is one interval:
        on a terminal in table format it redraws in place (rich Live, top-like); otherwise
        each interval is appended under a timestamp header (or one JSON object / CSV rows)."""
        if self._in_live:
            yield self
            return
        self._in_live = True
        try:
            yield self  # the rich Live starts with the first table (_table_result): not before
            # the tool's banner, which would wait for rich's import
        finally:
            self._stop_live()
            self._in_live = False

    def _stop_live(self) -> None:
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()

    def table(self, table: ResultTable | Iterable[Mapping | Sequence],
              columns: Iterable[str | Column] | None = None, title: str | None = None) -> None:
        """Print a ResultTable, or rows (dicts or sequences) with ``columns``."""
        if not isinstance(table, ResultTable):
            rows = list(table)
            if columns is None:
                columns = list(rows[0]) if rows and isinstance(rows[0], Mapping) else []
            table = ResultTable(columns, rows, title=title)
        self._result(table)

    def document(self, value: Mapping, tables: ResultTable | Iterable[ResultTable] = ()) -> None:
        """A result whose data is a structure (e.g. doctor's report): --format json prints
        ``value`` as one JSON object, and --log keeps it whatever the format; table and CSV
        print ``tables``, its rows for people and spreadsheets (one frame in live mode; in
        CSV each table under its header line), or nothing when the tool has none (it then
        says what happened in messages)."""
        value = dict(value)
        tables = [tables] if isinstance(tables, ResultTable) else list(tables)
        if self.format == "json" or not tables:
            self.log_event(value)
            if self.format == "json":
                self._write_line(to_json(value))
            return
        self._result(tables[0] if len(tables) == 1 else tables, document=value)

    def histogram(self, histogram: Histogram) -> None:
        self._result(histogram)

    def histograms(self, histograms: Iterable[Histogram]) -> None:
        """Several histograms as one result (e.g. one per process, each with a label)."""
        self._result(list(histograms))

    def tables(self, tables: Iterable[ResultTable]) -> None:
        """Several tables as one interval's result (one frame in live mode)."""
        self._result(list(tables))

    def _result(self, result, document: dict | None = None) -> None:
        """Print one result (a table, a histogram, or a list of either) in the chosen format,
        and keep it in --log: as ``document`` when given, else as its JSON form."""
        when = now()
        if document is None and (self.format == "json" or event_log_enabled()):
            document = self._json_result(result, when)
        if document is not None:
            self.log_event(document)  # first: kept even if printing fails (a closed pipe)
        if self.format == "json":
            self._write_line(to_json(document))
        elif self.format == "csv":
            self._csv_result(result, when)
        else:
            self._table_result(result, when)

    def _json_result(self, result, when) -> dict:
        data = {"time": iso_time(when)}
        if isinstance(result, ResultTable):
            data.update(_table_dict(result))
        elif isinstance(result, list) and all(isinstance(r, ResultTable) for r in result):
            data["tables"] = [_table_dict(t) for t in result]
        elif isinstance(result, list):
            data["histograms"] = [h.to_dict() for h in result]
        else:
            data.update(result.to_dict())
        return data

    def _csv_result(self, result, when) -> None:
        stamp = iso_time(when)
        parts = result if isinstance(result, list) else [result]
        if all(isinstance(t, ResultTable) for t in parts):
            for table in parts:  # each under its own header (written again when it changes)
                self._csv_rows(["time", *table.keys], [[stamp, *row.values()] for row in table.to_dicts()])
            return
        header = ["time", "label", "unit", "low", "high", "count"]
        rows = [[stamp, h.label or "", h.unit, b["low"], b["high"], b["count"]]
                for h in parts for b in h.buckets()]
        self._csv_rows(header, rows)

    def _csv_rows(self, header: list[str], rows: Iterable[Sequence]) -> None:
        import csv  # only -o csv needs it

        stream = self.stream
        writer = csv.writer(stream, lineterminator="\n")
        if header != self._csv_header:  # once per stream; again only if the columns change
            writer.writerow(header)
            self._csv_header = header
        writer.writerows([[_csv_cell(v) for v in row] for row in rows])
        stream.flush()

    def _table_result(self, result, when) -> None:
        from rich.console import Group
        from rich.text import Text

        if isinstance(result, list):
            # A blank line between per-key histograms, as BCC prints them.
            parts = []
            for index, histogram in enumerate(result):
                parts.extend([Text(), histogram] if index else [histogram])
            result = Group(*parts)
        stamp = Text(clock_time(when), style="bold")
        if self._in_live and self._live is None and self.console.is_terminal:
            from rich.live import Live

            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        if self._live is not None:
            self._live.update(Group(stamp, result), refresh=True)
            return
        if self._in_live or self.settings.timestamps:
            self.console.print(stamp)
        if isinstance(result, ResultTable) and not self.console.is_terminal:
            # files and pipes have no screen to fit: as wide as the table asks (rich's
            # print(width=) would only narrow it)
            console_width = self.console.width
            self.console.width = max(console_width, result.width)
            try:
                self.console.print(result)
            finally:
                self.console.width = console_width
        else:
            self.console.print(result)
        if self._in_live:
            self.console.print()

    # --- text of a tool's own format ---

    def refuse_format_with(self, option: str) -> None:
        """For an option whose result is text of its own (folded stacks): --format json or
        csv cannot apply to it, a usage error to say before the tool starts."""
        if self.format != "table":
            import click

            raise click.UsageError(f"{option} prints text of its own; it does not combine with "
                                   f"--format {self.format}")

    def text_lines(self, lines: Iterable[str], what: str) -> None:
        """A result that is text of the tool's own format (folded stacks for flame graphs),
        written as it is; --log keeps it as {``what``: [lines]}."""
        lines = list(lines)
        self.log_event({what: lines})
        stream = self.stream
        stream.writelines(line + "\n" for line in lines)
        stream.flush()

    # --- event streams ---

    def event_columns(self, *columns: str | Column, data_keys: Sequence[str] | None = None,
                      detail: Callable[[Mapping], Iterable[str]] | None = None) -> None:
        """Declare the event line layout (header text, key, width, alignment, format);
        without it the columns come from the first event's keys. ``data_keys``: the keys a
        CSV row carries instead of the columns' (a list value joined by ";"), as
        ResultTable's; ``detail(record)``: lines printed indented under the event's line in
        table format (a stack, say), which JSON and CSV carry in the record instead."""
        self._event_columns = [as_column(c) for c in columns]
        self._event_data_keys = list(data_keys) if data_keys is not None else None
        self._event_detail = detail

    def event(self, record: Mapping) -> None:
        """One event: an aligned line in table format (header printed once), one JSON object
        per line in json format (NDJSON), a CSV row in csv format. Flushed at once."""
        when = now() if self.settings.timestamps else None
        self.log_event(record)
        if self.format == "json":
            data = {"time": iso_time(when)} if when else {}
            data.update(record)
            self._write_line(to_json(data))
        elif self.format == "csv":
            keys = self._event_data_keys or ([c.key for c in self._event_columns] if self._event_columns
                                             else list(record))
            header = ["time", *keys] if when else keys
            row = [_csv_cell(record.get(k)) for k in keys]
            self._csv_rows(header, [[iso_time(when), *row] if when else row])
        else:
            self._event_line(record, when)
            for line in self._event_detail(record) if self._event_detail else ():
                self._write_line(f"    {line}")

    def _event_line(self, record: Mapping, when) -> None:
        if self._event_columns is None:
            self._event_columns = [Column(str(k).upper(), key=k) for k in record]
        if not self._event_header_done:
            # Sizes and alignment not declared come from the first event.
            self._event_columns = [_fill_in(c, record.get(c.key)) for c in self._event_columns]
            header = _join_cells(self._event_columns, [c.name for c in self._event_columns])
            self._write_line(f"{'TIME':<8} {header}" if when else header)
            self._event_header_done = True
        line = _join_cells(self._event_columns, [cell_text(record.get(c.key), c.format)
                                                 for c in self._event_columns])
        self._write_line(f"{clock_time(when)} {line}" if when else line)


def _csv_cell(value):
    """A list (a stack's frames) as one cell, its items joined by ";"."""
    value = plain(value)
    return ";".join(map(str, value)) if isinstance(value, (list, tuple)) else value


def _table_dict(table: ResultTable) -> dict:
    return {"title": table.title, "rows": table.to_dicts()} if table.title else {"rows": table.to_dicts()}


def _fill_in(column: Column, value) -> Column:
    number = is_number(value)
    align = column.align or ("right" if number else "left")
    # Room for typical pids/counts and task names (16 = TASK_COMM_LEN), like BCC's formats.
    width = column.width or max(len(column.name), 6 if number else 16,
                                len(cell_text(value, column.format)))
    return replace(column, align=align, width=width)


def _join_cells(columns: Sequence[Column], texts: Sequence[str]) -> str:
    """Cells padded to their column widths; long values push the line out rather than
    losing data; the last column is not padded."""
    cells = []
    last = len(columns) - 1
    for index, (column, text) in enumerate(zip(columns, texts)):
        width = column.width or len(column.name)
        if index == last and column.align != "right":
            cells.append(text)
        elif column.align == "right":
            cells.append(text.rjust(width))
        else:
            cells.append(text.ljust(width))
    return " ".join(cells)
