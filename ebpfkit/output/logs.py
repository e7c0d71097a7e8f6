"""Logging for ebpfkit: records under the ``ebpfkit.`` logger go to stderr through rich
(WARNING by default, INFO with -v, DEBUG with -vv) and, with --log FILE, to a size-rotated file
of JSON lines. The output layer also writes every result and event a tool prints to that file
(see log_event), so one file holds a run's messages and data."""

from __future__ import annotations

import logging
import sys
from datetime import datetime

from .settings import DEFAULT_LOG_BACKUP, DEFAULT_LOG_SIZE
from .values import iso_time, to_json

ROOT_LOGGER = "ebpfkit"
EVENTS_LOGGER = "ebpfkit.events"
DETAILED_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def logger_name(name: str) -> str:
    """``runqlat`` -> ``ebpfkit.tools.runqlat``; names already under ``ebpfkit`` are kept."""
    if name == ROOT_LOGGER or name.startswith(ROOT_LOGGER + "."):
        return name
    return f"{ROOT_LOGGER}.tools.{name}"


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(logger_name(name))


def level_for(verbosity: int) -> int:
    if verbosity >= 2:
        return logging.DEBUG
    return logging.INFO if verbosity == 1 else logging.WARNING


class FileOnly(logging.Filter):
    """Drops records marked ``extra={"file_only": True}`` (e.g. an error the CLI already printed)."""

    def filter(self, record):
        return not getattr(record, "file_only", False)


class JsonLines(logging.Formatter):
    """One JSON object per line, so the --log file reads with jq or json.loads: a tool's
    record is {"time", "tool", ...the record}; a message is {"time", "level", "logger",
    "message"} (with "traceback" when it carries one)."""

    def format(self, record):
        when = iso_time(datetime.fromtimestamp(record.created).astimezone())
        data = getattr(record, "ebpfkit_record", None)
        if data is not None:
            line = {"time": data.get("time", when), "tool": record.name.removeprefix(EVENTS_LOGGER + ".")}
            line.update((k, v) for k, v in data.items() if k not in line)
            return to_json(line)
        line = {"time": when, "level": record.levelname, "logger": record.name,
                "message": record.getMessage()}
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return to_json(line)


class StderrHandler(logging.Handler):
    """On a terminal, prints through rich.logging.RichHandler (created on the first record, so
    runs that log nothing never import rich); otherwise plain "WARNING: message" lines, which
    read better in files and CI logs than rich's padded columns."""

    def __init__(self, level: int, color: bool = True, detailed: bool = False):
        super().__init__(level)
        self.color = color
        self.detailed = detailed
        self.json = False  # JSON lines instead (json_console_messages)
        self._rich = None
        self.addFilter(FileOnly())
        self.setFormatter(logging.Formatter(
            DETAILED_FORMAT if detailed else "%(levelname)s: %(message)s"))

    def emit(self, record):
        stream = sys.stderr  # looked up per record: it may be redirected
        try:
            if self.json or not stream.isatty():
                stream.write(self.format(record) + "\n")
                stream.flush()
                return
            if self._rich is None:
                self._rich = self._make_rich_handler()
            if hasattr(stream, "rich_proxied_file"):
                # A rich Live display owns the terminal and proxies stderr; rich consoles
                # bypass that proxy, so render here and hand it the text to print above the table.
                with self._rich.console.capture() as captured:
                    self._rich.emit(record)
                stream.write(captured.get())
                stream.flush()
            else:
                self._rich.emit(record)
        except Exception:  # noqa: BLE001 - logging must never crash the tool
            self.handleError(record)

    def _make_rich_handler(self):
        from rich.console import Console
        from rich.logging import RichHandler

        # file=None: rich looks up sys.stderr at each write.
        console = Console(stderr=True, no_color=not self.color, highlight=False)
        return RichHandler(console=console, show_time=self.detailed, show_path=self.detailed,
                           markup=False, rich_tracebacks=self.detailed)


def setup_logging(verbosity: int = 0, log_file: str | None = None,
                  log_size: int = DEFAULT_LOG_SIZE, log_backup: int = DEFAULT_LOG_BACKUP,
                  color: bool = True) -> logging.Logger:
    """Configure the ``ebpfkit`` logger; calling it again replaces the previous setup."""
    root = logging.getLogger(ROOT_LOGGER)
    events = logging.getLogger(EVENTS_LOGGER)
    for logger in (root, events):
        for handler in list(logger.handlers):
            if getattr(handler, "ebpfkit_owned", False):
                logger.removeHandler(handler)
                handler.close()

    console_level = level_for(verbosity)
    handlers: list[logging.Handler] = [StderrHandler(console_level, color, detailed=verbosity >= 2)]
    file_handler = None
    if log_file:
        # logging.handlers pulls in socket, pickle...: import it only when --log is used.
        from logging.handlers import RotatingFileHandler

        file_handler = RotatingFileHandler(
            log_file, maxBytes=log_size, backupCount=log_backup, encoding="utf-8")
        # The file is the record of a run: keep INFO even when the console only shows warnings.
        file_handler.setLevel(min(logging.INFO, console_level))
        file_handler.setFormatter(JsonLines())
        handlers.append(file_handler)
    for handler in handlers:
        handler.ebpfkit_owned = True
        root.addHandler(handler)
    root.setLevel(min(h.level for h in handlers))
    root.propagate = False  # the CLI owns these records; don't print them twice via the root logger

    # Event records only ever go to the log file, never to the console.
    events.propagate = False
    events.setLevel(logging.INFO)
    sink = file_handler or logging.NullHandler()
    sink.ebpfkit_owned = True
    events.addHandler(sink)
    return root


def json_console_messages() -> None:
    """Messages on stderr as JSON lines (like the --log file's), for a service whose stderr a
    log collector reads (Loki, Elastic)."""
    for handler in logging.getLogger(ROOT_LOGGER).handlers:
        if isinstance(handler, StderrHandler):
            handler.json = True
            handler.setFormatter(JsonLines())


def event_log_enabled() -> bool:
    """True when --log FILE is set, so tools can skip building records nobody will read."""
    return any(isinstance(h, logging.FileHandler) for h in logging.getLogger(EVENTS_LOGGER).handlers)


def log_event(tool: str, record: dict) -> None:
    """Append one record of ``tool`` to the log file as a JSON line (see JsonLines)."""
    if event_log_enabled():
        logging.getLogger(f"{EVENTS_LOGGER}.{tool}").info("record", extra={"ebpfkit_record": record})
