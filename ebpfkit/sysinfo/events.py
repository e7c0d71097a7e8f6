"""Which event sources the kernel offers: a hardware PMU (its cycles event overflows in an
NMI) and named tracepoints. The roots are parameters, so a test can point them at a fake
tree."""

from __future__ import annotations

import os
import platform
from typing import NamedTuple

EVENT_SOURCES = "/sys/bus/event_source/devices"
TRACING = "/sys/kernel/tracing"


def hardware_pmu(devices_root: str = EVENT_SOURCES) -> bool:
    """True when the CPU's performance-monitoring unit is a perf event source (x86 and arm64
    name it ``cpu``, or ``armv8_pmuv3*`` on some arm64 machines)."""
    try:
        names = os.listdir(devices_root)
    except OSError:
        return False
    return "cpu" in names or any(name.startswith("armv8_pmuv3") for name in names)


def tracepoint_exists(group: str, name: str, tracing_root: str = TRACING) -> bool:
    """True when tracefs (mounted at ``tracing_root``) lists the tracepoint group/name."""
    return os.path.isdir(os.path.join(tracing_root, "events", group, name))


class TracepointField(NamedTuple):
    """One field of a tracepoint's record, as its tracefs ``format`` file declares it."""
    declaration: str  # "const char * filename", "__data_loc char[] name", "char comm[16]"
    offset: int
    size: int
    signed: bool


def tracepoint_fields(group: str, name: str, tracing_root: str = TRACING) -> list[TracepointField]:
    """The fields of tracepoint group/name's record, in order; raises OSError when tracefs
    lists no such tracepoint."""
    with open(os.path.join(tracing_root, "events", group, name, "format")) as f:
        lines = f.read().splitlines()
    fields = []
    for line in lines:
        line = line.strip()
        if not line.startswith("field:"):
            continue
        parts = dict(p.strip().split(":", 1) for p in line.rstrip(";").split(";") if ":" in p)
        fields.append(TracepointField(parts["field"].strip(), int(parts["offset"]), int(parts["size"]),
                                      parts.get("signed", "0").strip() == "1"))
    return fields


def kallsyms_lists(names: set[str], kallsyms: str = "/proc/kallsyms") -> set[str]:
    """Which of ``names`` /proc/kallsyms lists (data symbols, per-CPU variables among them,
    are listed only with CONFIG_KALLSYMS_ALL; a BPF program's typed ksym needs them)."""
    found: set[str] = set()
    try:
        with open(kallsyms, "rb") as f:
            for line in f:
                name = line.rstrip().rsplit(b" ", 1)[-1].decode(errors="replace")
                if name in names:
                    found.add(name)
    except OSError:
        pass
    return found


def softirq_names(proc_softirqs: str = "/proc/softirqs") -> dict[int, str]:
    """{vector: name} from /proc/softirqs, whose rows are the vectors in order (HI, TIMER,
    NET_TX, ...): what names them on a kernel without BTF."""
    with open(proc_softirqs) as f:
        f.readline()  # the CPU header
        names = [line.split(":", 1)[0].strip() for line in f if ":" in line]
    return dict(enumerate(names))


def preempt_count_per_cpu(kallsyms: str = "/proc/kallsyms") -> bool | None:
    """Where a BPF program reads preempt_count (in an interrupt or not, bottom halves off):
    x86 keeps it in a per-CPU variable (``__preempt_count``, ``pcpu_hot`` in 6.2-6.14), which
    a program may name only where kallsyms lists it: True then, False on a kernel without
    CONFIG_KALLSYMS_ALL. None elsewhere: other architectures keep it in the task."""
    if platform.machine() not in ("x86_64", "i386", "i686"):
        return None
    return bool(kallsyms_lists({"__preempt_count", "pcpu_hot"}, kallsyms))
