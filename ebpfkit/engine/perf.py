"""perf_event_open(2): sampling events on every CPU and tracepoint/probe events."""

from __future__ import annotations

import ctypes
import os
from ctypes import Structure, c_int32, c_uint16, c_uint32, c_uint64

from ..errors import NotSupportedError, PermissionDeniedError
from . import _libbpf as L
from .constants import PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_SOFTWARE

_NR = {"x86_64": 298, "aarch64": 241, "s390x": 331, "ppc64le": 319, "riscv64": 241}
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_EVENT_IOC_ENABLE = 0x2400
_FLAG_FREQ = 1 << 10


class perf_event_attr(Structure):
    _fields_ = [
        ("type", c_uint32), ("size", c_uint32), ("config", c_uint64), ("sample_period", c_uint64),
        ("sample_type", c_uint64), ("read_format", c_uint64), ("flags", c_uint64),
        ("wakeup_events", c_uint32), ("bp_type", c_uint32), ("config1", c_uint64),
        ("config2", c_uint64), ("branch_sample_type", c_uint64), ("sample_regs_user", c_uint64),
        ("sample_stack_user", c_uint32), ("clockid", c_int32), ("sample_regs_intr", c_uint64),
        ("aux_watermark", c_uint32), ("sample_max_stack", c_uint16), ("_reserved2", c_uint16),
        ("aux_sample_size", c_uint32), ("_reserved3", c_uint32), ("sig_data", c_uint64),
        ("config3", c_uint64),
    ]


def online_cpus() -> list[int]:
    return _parse_cpu_list("/sys/devices/system/cpu/online")


def possible_cpus() -> list[int]:
    return _parse_cpu_list("/sys/devices/system/cpu/possible")


def _parse_cpu_list(path: str) -> list[int]:
    try:
        text = open(path).read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def open_event(attr: perf_event_attr, pid: int = -1, cpu: int = 0) -> int:
    """perf_event_open; returns an fd or raises a clear error."""
    attr.size = ctypes.sizeof(attr)
    nr = _NR.get(os.uname().machine)
    if nr is None:
        raise NotSupportedError("perf_event", f"perf_event_open is not wired up for {os.uname().machine}")
    fd = L.libc.syscall(nr, ctypes.byref(attr), c_int32(pid), c_int32(cpu), c_int32(-1),
                        ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        err = L.errno()
        if err in (1, 13):
            raise PermissionDeniedError("perf_event_open was refused (needs root or CAP_PERFMON)",
                                        hint="run as root")
        raise NotSupportedError("perf_event", f"perf_event_open failed: {os.strerror(err)}")
    return fd


def sampling_attr(frequency: int = 0, period: int = 0, event_type: int = PERF_TYPE_SOFTWARE,
                  config: int = PERF_COUNT_SW_CPU_CLOCK) -> perf_event_attr:
    """An attr that samples ``frequency`` times a second (or every ``period`` events)."""
    attr = perf_event_attr(type=event_type, config=config)
    if frequency:
        attr.sample_period = frequency
        attr.flags |= _FLAG_FREQ
    else:
        attr.sample_period = period or 1_000_000
    return attr


def pmu_type(name: str) -> int | None:
    """The dynamic PMU type of 'kprobe' / 'uprobe', or None when the kernel has none."""
    try:
        return int(open(f"/sys/bus/event_source/devices/{name}/type").read())
    except (OSError, ValueError):
        return None
