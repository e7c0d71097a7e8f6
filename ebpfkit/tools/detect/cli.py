"""`ebpfkit detect`: run the rules over the kernel's events (run), validate rule files (check),
list the rules (rules), read the alerts kept (log)."""

from __future__ import annotations

import contextlib
import os
from datetime import datetime

import click

from ...output import Column, Output, ResultTable, tool_options
from ...output.values import clock_time
from ..common import build_config, usage_errors
from . import alertlog

EXAMPLES = """\b
Examples:
  ebpfkit detect run                         the built-in rules, alerts as they come
  ebpfkit detect run --rules local.yaml      and a file of your own (it may extend them, declare baits)
  ebpfkit detect run --rules baits.yaml --action alert   report bait files touched, kill nothing
  ebpfkit --format json --log alerts.log detect run   JSON lines, and a rotating log
  ebpfkit detect check local.yaml            validate only (exit 2 with the line of an error)
  ebpfkit detect rules                       every rule, its priority and ATT&CK techniques
  ebpfkit detect log -f                      the alerts kept, then new ones as they come
"""

ALERT_DATA_KEYS = ["time", "rule", "priority", "techniques", "pid", "container", "process_tree", "signals", "output",
                   "event", "action", "killed"]
ALERT_COLUMNS = (Column("TIME", key="time", format=lambda t: clock_time(datetime.fromtimestamp(t))),
                 Column("PRIORITY", key="priority", align="left"), Column("RULE", key="rule", align="left"),
                 Column("PID", key="pid"), Column("OUTPUT", key="output", align="left"))


def alert_log_option(f):
    return click.option("--alert-log", metavar="FILE", default=None,
                        help="The alert log, rotated at 10 MiB, 3 kept (default: $EBPFKIT_DETECT_LOG, else "
                             "/var/log/ebpfkit/detect.log).")(f)


def rules_option(f):
    f = click.option("--no-builtin", "builtin", is_flag=True, default=True, flag_value=False,
                     help="Leave out the built-in rules.")(f)
    return click.option("--rules", "rules", multiple=True, type=click.Path(), metavar="FILE|DIR",
                        help="A rules file, or a directory of *.yaml, read after the built-in rules "
                             "(repeatable, in order; a later file may extend an earlier one).")(f)


@click.group(epilog=EXAMPLES)
def detect():
    """Intrusion detection: process, network and file-descriptor events from the kernel matched
    against rules in Falco's format (rule, macro, list, condition, output, priority, tags,
    exceptions), built-in ones first. A reverse shell (a network socket on a process's
    stdin/stdout) is one alert per process, whichever of its signals come."""


@detect.command(epilog=EXAMPLES)
@rules_option
@click.option("--action", type=click.Choice(["alert", "kill"]), default=None,
              help="alert: kill nothing; kill: every rule on bait files kills from the kernel, and the "
                   "rules whose action is kill as they say. Default: as each rule's action says (on bait "
                   "files from the kernel, before the call returns; other rules from here, once the alert "
                   "is raised).")
@click.option("--throttle", type=click.IntRange(min=0), default=2000, show_default=True, metavar="N",
              help="Events a second one process may send; the rest are counted and reported in an "
                   "'Events throttled' alert, so one flooding process cannot blind detect to the others "
                   "(0: no limit).")
@alert_log_option
@click.option("--no-alert-log", is_flag=True, help="Keep no alert log.")
@tool_options
def run(rules, builtin, action, throttle, alert_log, no_alert_log):
    """Match the kernel's events against the rules until Ctrl-C; each alert as it is raised.
    Bait files declared in the rules are planted (or adopted) first, and the planted ones
    removed at the end."""
    from .session import open as open_session, Config

    config = build_config(Config, rules=tuple(rules), builtin=builtin, action=action, throttle=throttle)
    out = Output.from_context()
    out.event_columns(*ALERT_COLUMNS, data_keys=ALERT_DATA_KEYS)
    with usage_errors():  # a bait that cannot be planted, a log that cannot be written
        log = None if no_alert_log else alertlog.AlertLog(alert_log or alertlog.default_path())
        try:
            session = open_session(config)
        except BaseException:
            if log:
                log.close()
            raise
    with session, contextlib.ExitStack() as stack:
        if log:
            stack.callback(log.close)
            out.info("alert log: %s", log.path)

        def emit(alert):
            record = alert.to_dict()
            out.event(record)
            if log:
                log.write(record)

        out.info("hook: %s", session.hook)
        for warning in session.warnings:
            out.warning("%s", warning)
        if session.unwatched:
            out.info("not watched (not here): %s", ", ".join(session.unwatched))
        if session.baits:
            planted = sum(b.planted for b in session.baits)
            out.info("baits: %d files (%d planted); %s", len(session.baits), planted,
                     f"kill on {', '.join(sorted(session.killing))}" if session.killing else "alerts only")
        if session.killing_here:
            out.info("kill from here, once the alert is raised: %s", ", ".join(sorted(session.killing_here)))
        enabled = len(session.ruleset.enabled())
        try:
            out.banner(f"Detecting with {enabled} rules... Hit Ctrl-C to end.")
            for alert in session.alerts():
                emit(alert)
        except KeyboardInterrupt:
            for alert in session.poll(0):
                emit(alert)
        for rule, count in session.suppressed.items():
            out.info("%s: %d more matches held back (rate limit or fused)", rule, count)
        if session.throttled:
            out.warning("%d events throttled (their process was over --throttle %d a second)",
                        session.throttled, config.throttle)
        out.lost(session.lost)


@detect.command(epilog=EXAMPLES)
@click.option("-f", "--follow", is_flag=True, help="Keep printing alerts as they are written.")
@alert_log_option
@tool_options
def log(follow, alert_log):
    """Print the alerts `detect run` kept, oldest first (the rotated files too); with -f, then
    each new one as it is written. --format json prints each as it was raised."""
    out = Output.from_context()
    out.event_columns(*ALERT_COLUMNS, data_keys=ALERT_DATA_KEYS)
    path = alert_log or alertlog.default_path()
    if not follow and not os.path.exists(path):
        raise click.UsageError(f"no alert log at {path} (has `detect run` run here? --alert-log names another)")
    try:
        for record in alertlog.read(path, follow=follow):
            out.event(record)
    except KeyboardInterrupt:
        pass


@detect.command(epilog=EXAMPLES)
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--no-builtin", "builtin", is_flag=True, default=True, flag_value=False,
              help="Check FILES alone, not after the built-in rules.")
@tool_options
def check(files, builtin):
    """Validate rule FILES (after the built-in rules, which they may extend); nothing is
    loaded. An error names the file and line, and exits 2."""
    from .session import Config, load_ruleset

    out = Output.from_context()
    ruleset = load_ruleset(build_config(Config, rules=tuple(files), builtin=builtin))
    mine = [r for r in ruleset.rules.values() if r.source in files]
    out.document({"valid": True, "files": list(files), "rules": len(mine), "enabled": len(ruleset.enabled()),
                  "lists": len(ruleset.lists), "macros": len(ruleset.macros)})
    out.banner(f"{', '.join(files)}: valid ({len(mine)} rules of their own; {len(ruleset.enabled())} enabled "
               f"in all)")


@detect.command(epilog=EXAMPLES)
@rules_option
@tool_options
def rules(rules, builtin):
    """List the rules `detect run` would use: name, priority, ATT&CK techniques, enabled."""
    from .session import Config, load_ruleset

    out = Output.from_context()
    ruleset = load_ruleset(build_config(Config, rules=tuple(rules), builtin=builtin))
    rows = [{"rule": r.name, "priority": r.priority, "techniques": list(r.techniques), "enabled": r.enabled,
             "action": r.action, "source": f"{r.source}:{r.line}"} for r in ruleset.rules.values()]
    columns = [Column("RULE", key="rule", align="left"), Column("PRIORITY", key="priority", align="left"),
               Column("TECHNIQUES", key="techniques", align="left", format=lambda t: ", ".join(t)),
               Column("ENABLED", key="enabled"), Column("ACTION", key="action", align="left")]
    out.document({"rules": rows}, ResultTable(columns, rows, title="detect rules"))
