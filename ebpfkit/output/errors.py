"""Exceptions -> a message on stderr and an exit code. ``describe_error`` is the one mapping;
``run_cli`` wraps the root command with it."""

from __future__ import annotations

import errno
import logging
import sys
import traceback
from dataclasses import dataclass

from ..errors import (CompileError, EbpfkitError, NotSupportedError, PermissionDeniedError,
                      VerifierError)

PRIVILEGE_HINT = "run as root or with CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN"
# The engine's hints name what to enable; which command shows the whole picture is the CLI's to say.
DOCTOR_HINT = "`ebpfkit doctor` shows what this kernel allows"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_SUPPORTED = 3
EXIT_PERMISSION = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C


@dataclass
class Failure:
    """What to tell the user. ``message`` None means exit quietly."""

    code: int
    message: str | None = None
    hint: str | None = None
    details: str | None = None   # verifier log, compiler output or traceback (verbose only)
    usage: str | None = None     # usage lines printed before a usage error


def describe_error(exc: BaseException, verbosity: int = 0) -> Failure:
    """Map an exception to the exit code and message the CLI shows."""
    import click

    if isinstance(exc, KeyboardInterrupt) or (
            isinstance(exc, click.Abort) and isinstance(exc.__cause__, KeyboardInterrupt)):
        return Failure(EXIT_INTERRUPTED)
    if isinstance(exc, click.UsageError):
        return Failure(EXIT_USAGE, exc.format_message(), usage=_usage(exc))
    if isinstance(exc, click.Abort):
        return Failure(EXIT_FAILURE, "aborted")
    if isinstance(exc, click.ClickException):
        return Failure(exc.exit_code, exc.format_message())
    if isinstance(exc, VerifierError):
        if verbosity:
            return Failure(EXIT_FAILURE, str(exc), details=exc.log)
        return Failure(EXIT_FAILURE, str(exc), hint=exc.hint)
    if isinstance(exc, CompileError):
        output = exc.output.strip()
        details = output if verbosity and output and output not in str(exc) else None
        return Failure(EXIT_FAILURE, str(exc), details=details)
    if isinstance(exc, PermissionDeniedError):
        return Failure(EXIT_PERMISSION, str(exc), hint=exc.hint or PRIVILEGE_HINT)
    if isinstance(exc, NotSupportedError):
        return Failure(EXIT_NOT_SUPPORTED, str(exc), hint="; ".join(filter(None, (exc.hint, DOCTOR_HINT))))
    if isinstance(exc, EbpfkitError):
        return Failure(getattr(exc, "exit_code", EXIT_FAILURE), str(exc), hint=exc.hint)
    if isinstance(exc, OSError) and exc.errno in (errno.EPERM, errno.EACCES):
        return Failure(EXIT_PERMISSION, str(exc), hint=PRIVILEGE_HINT)
    message = f"unexpected error: {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
    if verbosity:
        return Failure(EXIT_FAILURE, message, details=_traceback(exc))
    return Failure(EXIT_FAILURE, message, hint="run with -v to see the traceback")


def _usage(exc) -> str | None:
    ctx = exc.ctx
    if ctx is None:
        return None
    usage = ctx.get_usage()
    if ctx.command.get_help_option(ctx) is not None:
        names = ctx.help_option_names[0]
        usage += f"\nTry '{ctx.command_path} {names}' for help."
    return usage


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def report_failure(failure: Failure, color: bool = True) -> None:
    """Print ``failure`` on stderr (plain click.echo: no rich import on the error path)."""
    import click

    if failure.message is None:
        return
    use_color = None if color else False

    def say(text, **style):
        click.echo(click.style(text, **style) if style else text, err=True, color=use_color)

    if failure.usage:
        say(failure.usage + "\n")
    if failure.details:
        say(failure.details)
    say(f"Error: {failure.message}", fg="red", bold=True)
    if failure.hint:
        say(f"Hint: {failure.hint}", fg="yellow")


def invoke_cli(command, args=None, prog_name: str | None = None) -> int:
    """Run a click command and return its exit code, reporting any exception.
    A command ends with a non-zero status through ``ctx.exit(code)`` (or by returning an int)."""
    try:
        result = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except (Exception, KeyboardInterrupt) as exc:  # every failure becomes a message and a code
        return handle_error(exc)
    return result if isinstance(result, int) and not isinstance(result, bool) else EXIT_OK


def handle_error(exc: BaseException) -> int:
    """Report ``exc`` as the running command's settings say (verbosity, color); its exit code."""
    from .settings import active_settings

    settings = active_settings()
    failure = describe_error(exc, settings.verbosity)
    logger = logging.getLogger("ebpfkit")
    if failure.message is not None and any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        # The --log file should say why a run ended; the console gets report_failure instead.
        logger.error("%s", failure.message, exc_info=exc, extra={"file_only": True})
    report_failure(failure, settings.color)
    return failure.code


def run_cli(command, args=None, prog_name: str | None = None):
    """The console-script entry point: ``def main(): run_cli(cli)``. Never returns."""
    sys.exit(invoke_cli(command, args, prog_name))
