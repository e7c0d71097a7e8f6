"""doctor's session: what this kernel allows, probed by really loading tiny programs, and
which ebpfkit tool can run here with which hook, as data. No click, no printing, no formats::

    from ebpfkit.tools import doctor
    found = doctor.report()
    found.probes["fexit"].supported, [t for t in found.tools if not t.runs]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import ToolConfig

if TYPE_CHECKING:
    from ...engine.features import Probe


@dataclass(frozen=True)
class Config(ToolConfig):
    fix: bool = False  # first mount bpffs (/sys/fs/bpf) and tracefs (/sys/kernel/tracing) if missing


@dataclass(frozen=True)
class ToolStatus:
    tool: str
    runs: bool
    hook: str  # the best hook it can use here, or what it needs and why it is missing


@dataclass
class Report:
    kernel: str                   # its release
    btf: dict                     # which BTF CO-RE uses, and whether the kernel has its own
    probes: dict[str, Probe]      # feature name -> its probe
    tools: list[ToolStatus]       # the registered tools that have hooks
    mounted: list[tuple[str, str]] = field(default_factory=list)  # what ``fix`` mounted: (fs, where)


def report(config: Config | None = None, **settings) -> Report:
    """Probe every feature (after mounting what is missing, with ``fix``) and tell, for every
    tool with hooks, the first of its ways of running that this kernel allows."""
    from ...bcc import probe as bcc_probe  # noqa: F401 (registers the "bcc" probe: doctor lists it)
    from ...engine import features
    from .. import TOOLS

    config = Config.given(config, **settings)
    mounted = _fix_mounts() if config.fix else []
    probes = features.probe_all()
    return Report(features.kernel_release(), _btf_summary(probes), probes,
                  [_tool_status(info, probes) for info in TOOLS.values() if info.hooks], mounted)


def _btf_summary(probes) -> dict:
    """Which BTF CO-RE uses here, and whether the kernel has its own for BTF-typed hooks."""
    from ...engine.btf import BTF_TYPED_HOOKS, user_btf_path

    return {"path": probes["btf"].value, "source": "--btf" if user_btf_path() else "kernel",
            "kernel_btf": probes["kernel_btf"].supported,
            "needs_kernel_btf": list(BTF_TYPED_HOOKS)}


def _tool_status(info, probes) -> ToolStatus:
    """The first of the tool's hook choices whose features are all available here."""
    missing_first = None
    for label, needs in info.hooks:
        missing = [n for n in needs if not probes[n].supported]
        if not missing:
            return ToolStatus(info.name, True, label)
        missing_first = missing_first or (label, missing)
    label, missing = missing_first
    why = "; ".join(f"{probes[n].label}: {probes[n].reason}" for n in missing)
    return ToolStatus(info.name, False, f"needs {label} ({why})")


def _fix_mounts() -> list[tuple[str, str]]:
    from ...engine import features, mounts

    mounted = []
    if not features.mounted_bpffs():
        mounts.ensure_bpffs()
        mounted.append(("bpffs", mounts.BPFFS))
    if not features.mounted_tracefs():
        mounts.ensure_tracefs()
        mounted.append(("tracefs", mounts.TRACEFS))
    return mounted
