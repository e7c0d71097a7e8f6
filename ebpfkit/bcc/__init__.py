"""BCC compatibility (issue #23): ``ebpfkit.bcc.BPF`` runs BCC programs and scripts on
ebpfkit's engine, against the kernel's BTF (no kernel headers): the C is translated to
CO-RE C (translate.py), tables are BCC's classes over the engine's maps (table.py).
``install_as_bcc()`` makes ``import bcc`` mean this package, for BCC's own scripts
(`ebpfkit bcc run`). ``probe`` says whether BCC itself is installed, to compare against."""

from __future__ import annotations

import importlib
import sys

from .utils import ArgString, StrcmpRewrite  # noqa: F401 - BCC exports them from its top level


class PerfType:
    HARDWARE, SOFTWARE = 0, 1


class PerfHWConfig:
    CPU_CYCLES, INSTRUCTIONS, CACHE_REFERENCES, CACHE_MISSES, BRANCH_INSTRUCTIONS, BRANCH_MISSES = range(6)
    BUS_CYCLES, STALLED_CYCLES_FRONTEND, STALLED_CYCLES_BACKEND, REF_CPU_CYCLES = range(6, 10)


class PerfSWConfig:
    CPU_CLOCK, TASK_CLOCK, PAGE_FAULTS, CONTEXT_SWITCHES, CPU_MIGRATIONS = range(5)
    PAGE_FAULTS_MIN, PAGE_FAULTS_MAJ, ALIGNMENT_FAULTS, EMULATION_FAULTS, DUMMY, BPF_OUTPUT = range(5, 11)


DEBUG_LLVM_IR, DEBUG_BPF, DEBUG_PREPROCESSOR, DEBUG_SOURCE, DEBUG_BPF_REGISTER_STATE, DEBUG_BTF = 1, 2, 4, 8, 16, 32

_SUBMODULES = ("utils", "syscall", "containers", "tcp")


def __getattr__(name):  # BPF on first use: importing ebpfkit.bcc.probe stays cheap
    if name == "BPF":
        from .bpf import BPF

        return BPF
    if name in ("USDT", "USDTException"):
        from . import usdt

        return getattr(usdt, name)
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)


def install_as_bcc() -> None:
    """Make ``import bcc`` (and ``bcc.utils``, ``bcc.syscall``, ``bcc.containers``) this package."""
    sys.modules["bcc"] = sys.modules[__name__]
    for sub in _SUBMODULES:
        sys.modules[f"bcc.{sub}"] = importlib.import_module(f"{__name__}.{sub}")
