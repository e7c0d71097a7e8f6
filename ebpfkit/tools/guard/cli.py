"""guard: protect files and processes with BPF-LSM, pinned so it outlives its agent."""

from __future__ import annotations


import os
import time

import click

from ...output import Column, Output, ResultTable, tool_options

EXAMPLES = """\b
Examples:
  ebpfkit guard check policy.yaml       validate only (exit 2 on errors, with the line)
  ebpfkit guard start policy.yaml       load, pin, start the logging agent; returns
  ebpfkit guard start --audit policy.yaml   allow everything, log what would be denied
  ebpfkit guard status                  mode, policy, agent, denied/lost counters
  ebpfkit guard log -f                  violations and reloads as they come
  ebpfkit --format json guard log      the log's records as JSON lines
  ebpfkit guard reload policy.yaml      swap the maps, never unprotected in between
  ebpfkit guard stop                    detach and unpin everything

Changing a running guard (stop, reload, its maps, pins, links, policy file) is allowed only
to subjects it trusts: run stop/reload from a program listed under `trust:` with
`inherit: true`, e.g. an admin shell: guard-admin -c 'ebpfkit guard stop'. The agent also
reloads by itself when the policy file changes (a bad version is logged and ignored).
"""


def _fields(record: dict, title: str) -> ResultTable:
    """A record as a two-column table, for people (JSON and --log get the record itself)."""
    rows = [(key, ", ".join(map(str, value)) if isinstance(value, list) else value)
            for key, value in record.items()]
    return ResultTable([Column("FIELD", key="field", align="left"), Column("VALUE", key="value", align="left")],
                       rows, title=title)


def _load_policy(path: str):
    from ...policy import load_guard_policy

    return load_guard_policy(path)  # PolicyError: exit 2 with the file and line


@click.group(epilog=EXAMPLES)
def guard():
    """Deny writes, unlinks, renames, links and attribute changes of protected files (and,
    where a rule adds them, every read and every way to run them), and signals/ptrace of
    protected processes, to every program that is not trusted.

    Objects are keyed by (device, inode) as the kernel sees them (overlayfs included), so
    hardlinks, renames, bind mounts and symlinks do not escape. The guard protects itself:
    only trusted subjects can stop or reload it. Needs BPF-LSM (`bpf` in
    /sys/kernel/security/lsm)."""


@guard.command(epilog=EXAMPLES)
@click.argument("policy", type=click.Path())
@tool_options
def check(policy):
    """Validate POLICY and show what it resolves to; nothing is loaded."""
    from .core import resolve

    out = Output.from_context()
    parsed = _load_policy(policy)
    res = resolve(parsed)
    protected, trusted, exe, warnings = res
    for w in warnings:
        out.warn("%s", w)
    record = {"valid": True, **parsed.to_dict(), "resolved": {
        "protected": len(protected), "trusted": len(trusted), "processes": len(exe),
        "interpreters": len(res.interpreters)}, "warnings": warnings}
    summary = {"policy": policy, "state": "valid", "mode": parsed.mode, **record["resolved"],
               "denied": [f"{r.path}: {' '.join(r.deny)}" for r in parsed.protect], "warnings": warnings}
    out.document(record, _fields(summary, "guard policy"))
    out.banner(f"{policy}: valid (mode {parsed.mode}; {len(protected)} protected, {len(trusted)} trusted, "
               f"{len(exe)} processes resolved)")


@guard.command(epilog=EXAMPLES)
@click.argument("policy", type=click.Path())
@click.option("--audit", is_flag=True, help="Allow everything; log what enforce mode would deny.")
@click.option("--timeout", type=float, default=600.0, show_default=True,
              help="Seconds to wait for the agent to load (compiles are slow under emulation).")
@tool_options
def start(policy, audit, timeout):
    """Load and pin the guard, start the logging agent, return when protection is on.
    The agent watches POLICY and reloads it when it changes."""
    from . import core, session

    out = Output.from_context()
    parsed = _load_policy(policy)
    session.require_lsm()
    if not parsed.trust and not audit and parsed.mode == "enforce":
        out.warn("the policy trusts no program: nothing will be able to stop or reload this "
                 "guard until reboot (add an admin program under trust:, see `guard --help`)")
    record = session.start(policy, audit, timeout, out.settings.log_size, out.settings.log_backup)
    out.document(record)
    out.banner(f"guard {record['mode']}: pinned in {core.PIN_DIR}, agent pid {record['agent_pid']}, "
               f"log {core.LOG_FILE}")


@guard.command(epilog=EXAMPLES)
@click.argument("policy", type=click.Path())
@tool_options
def reload(policy):
    """Resolve POLICY again and swap the maps in place (no unprotected window); the agent
    watches POLICY from then on. Only from a context the running guard trusts."""
    from . import core

    out = Output.from_context()
    _load_policy(policy)
    warnings = core.reload(policy)  # PolicyError (exit 2), GuardError (exit 4 if untrusted)
    for w in warnings:
        out.warn("%s", w)
    out.document({"reloaded": os.path.abspath(policy), "warnings": warnings})
    out.banner(f"guard policy reloaded from {policy}")


@guard.command(epilog=EXAMPLES)
@tool_options
def stop():
    """Detach every hook, unpin everything, stop the agent. Only from a context the running
    guard trusts (exit 4 otherwise, nothing removed)."""
    from . import core

    out = Output.from_context()
    stopped = core.stop()  # GuardError (exit 4) from an untrusted subject, nothing removed
    out.document({"stopped": stopped, "removed": core.PIN_DIR if stopped else None})
    if stopped:
        out.banner(f"guard stopped: {core.PIN_DIR} removed")
    else:
        out.warn("the guard is not running")


@guard.command(epilog=EXAMPLES)
@tool_options
def status():
    """Whether it runs, mode, policy, agent, denied/audited/lost event counts."""
    from .session import status as guard_status

    out = Output.from_context()
    record = guard_status()
    out.document(record, _fields(record, "guard"))


LOG_COLUMNS = (Column("TIME", key="time", format=lambda t: time.strftime("%H:%M:%S", time.localtime(t))),
               Column("EVENT", key="event", align="left"), Column("VERDICT", key="verdict", align="left"),
               Column("OPERATION", key="operation", align="left"), Column("HOOK", key="hook", align="left"),
               Column("PID", key="pid"), Column("COMM", key="comm", align="left"),
               Column("OBJECT", key="object", align="left"))


@guard.command(epilog=EXAMPLES)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new records.")
@tool_options
def log(follow):
    """Print the guard's log, oldest first (its rotated files too): violations (time, hook,
    pid, comm, exe, object, operation, verdict) and policy reloads. --format json prints
    each record as the agent wrote it."""
    from . import core, logfile

    out = Output.from_context()
    out.event_columns(*LOG_COLUMNS)
    for record in logfile.records(core.LOG_FILE, follow=follow):
        out.event(record)
