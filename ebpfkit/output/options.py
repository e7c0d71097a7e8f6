"""Click options shared by every ebpfkit command.

The root group uses ``@global_options``; a tool may add ``@tool_options`` for -T and
per-tool --format/--output overrides. Both leave an OutputSettings in ``ctx.meta`` where
``Output.from_context(ctx)`` finds it."""

from __future__ import annotations

import functools

import click

from .core import SETTINGS_KEY, settings_from_context
from .logs import setup_logging
from .settings import DEFAULT_LOG_BACKUP, FORMATS, OutputSettings, activate
from .sizes import SIZE


def install_settings(ctx: click.Context, settings: OutputSettings) -> None:
    """Make ``settings`` the ones tools of this invocation see (and the error reporter uses)."""
    ctx.meta[SETTINGS_KEY] = settings
    activate(settings)


def _format_option(default):
    return click.option("--format", "output_format", type=click.Choice(FORMATS, case_sensitive=False),
                        default=default, show_default=default is not None,
                        help="How results are printed: a table, JSON (one object per interval, "
                             "one per line for events) or CSV.")


def _output_option():
    return click.option("--output", "output_file", type=click.Path(dir_okay=False), metavar="FILE",
                        help='Write results to FILE instead of stdout ("-" for stdout).')


def global_options(func):
    """Root-group decorator: -v/--verbose, --format, --no-color, --output, --log, --log-size,
    --log-backup. Builds the OutputSettings and sets up logging before the group body runs."""

    @functools.wraps(func)
    def wrapper(*args, verbose, output_format, no_color, output_file, log_file, log_size,
                log_backup, **kwargs):
        settings = OutputSettings(format=output_format, output_file=output_file, color=not no_color,
                                  verbosity=verbose, log_file=log_file, log_size=log_size,
                                  log_backup=log_backup)
        install_settings(click.get_current_context(), settings)
        setup_logging(verbose, log_file, log_size, log_backup, color=not no_color)
        return func(*args, **kwargs)

    options = [
        click.option("-v", "--verbose", count=True,
                     help="More messages: -v for info, -vv for debug and tracebacks."),
        _format_option("table"),
        click.option("--no-color", is_flag=True, help="Print without colors (NO_COLOR works too)."),
        _output_option(),
        click.option("--log", "log_file", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Also write messages and every result or event to FILE, as JSON lines."),
        click.option("--log-size", type=SIZE, default="10M", show_default=True,
                     help="Rotate the --log file at this size, e.g. 512K, 10M, 1G."),
        click.option("--log-backup", type=click.IntRange(min=0), default=DEFAULT_LOG_BACKUP,
                     show_default=True, metavar="N", help="Rotated --log files to keep."),
    ]
    for option in reversed(options):  # so --help lists them in the order above
        wrapper = option(wrapper)
    return wrapper


def tool_options(func=None, *, output: bool = True, short_timestamp: bool = True):
    """Tool decorator: -T/--timestamp, and --format/--output that override the global ones
    (so both ``ebpfkit --format json runqlat`` and ``ebpfkit runqlat --format json`` work).
    ``@tool_options(output=False)`` leaves --output out, for a tool whose own --output names
    something else (iotrace record's record file); ``short_timestamp=False`` leaves -T to
    the tool (memleak's -T TOP, as BCC's), --timestamp staying."""
    if func is None:
        return functools.partial(tool_options, output=output, short_timestamp=short_timestamp)

    @functools.wraps(func)
    def wrapper(*args, timestamp, output_format, output_file=None, **kwargs):
        ctx = click.get_current_context()
        settings = settings_from_context(ctx).replace(
            timestamps=timestamp or None, format=output_format, output_file=output_file)
        install_settings(ctx, settings)
        return func(*args, **kwargs)

    options = [
        click.option(*(["-T"] if short_timestamp else []), "--timestamp", is_flag=True,
                     help="Include the time on each output."),
        _format_option(None),
        *([_output_option()] if output else []),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
