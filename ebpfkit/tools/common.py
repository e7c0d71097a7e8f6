"""Plumbing every tool shares: BCC-style `[interval [count]]` and `-p PID` arguments,
the interval loop, and the start/stop of engine objects. Tools build on it; it knows no tool."""

from __future__ import annotations

import contextlib
import time

import click


def interval_arguments(func):
    """BCC's positional `[interval [count]]`: print every INTERVAL seconds, COUNT times."""
    func = click.argument("count", type=click.IntRange(min=1), required=False)(func)
    func = click.argument("interval", type=click.FloatRange(min=0.01), required=False)(func)
    return func


def pid_option(func):
    return click.option("-p", "--pid", type=int, metavar="PID", callback=_existing_pid,
                        help="Only this process (thread group).")(func)


def _existing_pid(ctx, param, value):
    from .config import check_pid

    with _as_bad_parameter(ctx):
        check_pid(param.name, value)
    return value


def build_config(config_class, **values):
    """A tool's Config from the command's options; a bad value is a usage error naming the
    option it came from (the Config names the setting, which is the option's name)."""
    with usage_errors():
        return config_class(**values)


def usage_errors():
    """Within it, a ConfigError (a bad value found by a Config, or by a session when it
    meets the thing the value names) is a usage error naming the command's option."""
    return _as_bad_parameter(click.get_current_context())


@contextlib.contextmanager
def _as_bad_parameter(ctx):
    from ..errors import ConfigError

    try:
        yield
    except ConfigError as exc:
        param = next((p for p in ctx.command.params if p.name == exc.field), None)
        raise click.BadParameter(exc.reason, ctx=ctx, param=param,
                                 param_hint=None if param else exc.field) from None


def live_intervals(out, interval: float | None, count: int | None, banner: str | None = None):
    """A running tool's loop: its banner (saying how to stop it), then one iteration per
    interval, as intervals() gives them, inside the output layer's live view."""
    started = (lambda: out.banner(f"{banner} Hit Ctrl-C to end.")) if banner else None
    with out.live():
        yield from intervals(interval, count, started)


def intervals(interval: float | None, count: int | None, started=None):
    """Yield once per interval (sleeping in between) until COUNT intervals or Ctrl-C.

    Without an interval, wait for Ctrl-C and yield once, so a tool prints a final summary.
    ``started()`` is called once Ctrl-C is handled (a banner saying to press it goes there:
    a Ctrl-C right after it still ends the loop cleanly). A Ctrl-C while the caller's body
    runs (a sample being read, symbolized, printed) ends the loop once that body is done,
    as one during the sleep does; a second one aborts the body.
    """
    if interval is None:
        try:
            if started:
                started()
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            yield
        return
    done = 0
    deadline = time.monotonic()
    with _ctrl_c_between_iterations() as ctrl_c:
        try:
            if started:
                started()
            while count is None or done < count:
                deadline += interval
                time.sleep(max(0.0, deadline - time.monotonic()))
                done += 1
                ctrl_c.in_body = True
                yield
                ctrl_c.in_body = False
                if ctrl_c.pressed:
                    return
        except KeyboardInterrupt:
            return


class _CtrlC:
    """SIGINT's handler around an interval loop: KeyboardInterrupt, except the first one
    while the loop's body runs, which is only noted (the loop ends after the body)."""

    def __init__(self):
        self.in_body = False
        self.pressed = False

    def __call__(self, signum, frame):
        if self.in_body and not self.pressed:
            self.pressed = True
            return
        raise KeyboardInterrupt


@contextlib.contextmanager
def _ctrl_c_between_iterations():
    import signal
    import threading

    ctrl_c = _CtrlC()
    # only over Python's own Ctrl-C handling, and only where signal handlers can be set
    ours = (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if ours:
        signal.signal(signal.SIGINT, ctrl_c)
    try:
        yield ctrl_c
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
