"""doctor: what this kernel allows, probed by really loading tiny programs, and which
ebpfkit tool can run here with which hook."""

from __future__ import annotations

import click

from ...output import Column, Output, ResultTable, tool_options

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
    from ...engine import features
    from .. import TOOLS

    out = Output.from_context()
    if fix:
        _fix_mounts(out)
    probes = features.probe_all()
    rows = [{"feature": p.label, "name": p.name, "available": _MARK[p.status], "status": p.status,
             "detail": p.reason} for p in probes.values()]
    tools = [_tool_row(info, probes) for info in TOOLS.values() if info.hooks]
    report = {"kernel": features.kernel_release(), "btf": _btf_summary(probes),
              "features": {p.name: {"label": p.label, "status": p.status, "reason": p.reason,
                                    "value": p.value} for p in probes.values()},
              "tools": {t["tool"]: {"runs": t["runs"] == "yes", "hook": t["hook"]} for t in tools}}
    out.document(report, [
        ResultTable([Column("feature", key="feature"), Column("ok", key="available"),
                     Column("detail", key="detail")], rows, title=f"Kernel {features.kernel_release()}"),
        ResultTable([Column("tool", key="tool"), Column("runs", key="runs"),
                     Column("hook", key="hook")], tools, title="Tools")])


def _btf_summary(probes) -> dict:
    """Which BTF CO-RE uses here, and whether the kernel has its own for BTF-typed hooks."""
    from ...engine.btf import BTF_TYPED_HOOKS, user_btf_path

    return {"path": probes["btf"].value, "source": "--btf" if user_btf_path() else "kernel",
            "kernel_btf": probes["kernel_btf"].supported,
            "needs_kernel_btf": list(BTF_TYPED_HOOKS)}


def _tool_row(info, probes) -> dict:
    """The first of the tool's hook choices whose features are all available here."""
    missing_first = None
    for label, needs in info.hooks:
        missing = [n for n in needs if not probes[n].supported]
        if not missing:
            return {"tool": info.name, "runs": "yes", "hook": label}
        missing_first = missing_first or (label, missing)
    label, missing = missing_first
    why = "; ".join(f"{probes[n].label}: {probes[n].reason}" for n in missing)
    return {"tool": info.name, "runs": "no", "hook": f"needs {label} ({why})"}


def _fix_mounts(out) -> None:
    from ...engine import features, mounts

    if not features.mounted_bpffs():
        mounts.ensure_bpffs()
        out.info("mounted bpffs at %s", mounts.BPFFS)
    if not features.mounted_tracefs():
        mounts.ensure_tracefs()
        out.info("mounted tracefs at %s", mounts.TRACEFS)
