"""Run commands and tests inside another kernel: a VM booted with virtme-ng (QEMU).

    from ebpfkit import vm
    kernel = vm.resolve_kernel("6.1")               # or a path, or None for the default
    result = vm.run(["uname", "-r"], vm.VMSpec(kernel, lsm=True, timeout=300))
    result.status, result.exit_code                 # "exited", 0

``ebpfkit vm run`` is the command-line face of this; ``ebpfkit.vm.plugin`` is a pytest plugin
that runs tests marked ``@pytest.mark.vm(...)`` inside such a VM.
"""

from __future__ import annotations

from .kernels import Kernel, find_kernels
from .kernels import resolve as resolve_kernel
from .runner import VMResult, VMSpec, in_vm, run

__all__ = ["Kernel", "VMResult", "VMSpec", "find_kernels", "in_vm", "resolve_kernel", "run"]
