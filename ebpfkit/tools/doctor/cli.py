"""`ebpfkit doctor`: options -> Config, the session's report (feature probes, the tool
table) -> the output layer."""

from __future__ import annotations

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config

EXAMPLES = """\b
Examples:
  ebpfkit doctor                  the table
  ebpfkit doctor --fix            also mount bpffs and tracefs if they are missing
  ebpfkit doctor --format json    the same as data
"""

_MARK = {"supported": "yes", "unsupported": "no", "unknown": "?"}


@click.command(epilog=EXAMPLES)
@click.option("--fix", is_flag=True, help="Mount bpffs (/sys/fs/bpf) and tracefs (/sys/kernel/tracing) if missing.")
@tool_options
def doctor(fix):
    """Probe this kernel (BTF, lockdown, LSM, program and attach types) and the tools' hooks."""
    from .session import Config, report

    out = Output.from_context()
    found = report(build_config(Config, fix=fix))
    for fs, where in found.mounted:
        out.info("mounted %s at %s", fs, where)
    probes = found.probes.values()
    rows = [{"feature": p.label, "name": p.name, "available": _MARK[p.status], "status": p.status,
             "detail": p.reason} for p in probes]
    tools = [{"tool": t.tool, "runs": "yes" if t.runs else "no", "hook": t.hook} for t in found.tools]
    document = {"kernel": found.kernel, "btf": found.btf,
                "features": {p.name: {"label": p.label, "status": p.status, "reason": p.reason,
                                      "value": p.value} for p in probes},
                "tools": {t.tool: {"runs": t.runs, "hook": t.hook} for t in found.tools}}
    out.document(document, [
        ResultTable([Column("feature", key="feature"), Column("ok", key="available"),
                     Column("detail", key="detail")], rows, title=f"Kernel {found.kernel}"),
        ResultTable([Column("tool", key="tool"), Column("runs", key="runs"),
                     Column("hook", key="hook")], tools, title="Tools")])
