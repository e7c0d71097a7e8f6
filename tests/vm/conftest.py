"""The VM part of the suite. Tests marked ``@pytest.mark.vm`` run inside a VM kernel (the
ebpfkit pytest plugin boots one per kernel/options group); the harness tests here run on
the host and boot VMs themselves. Without QEMU, virtme-ng, busybox or a kernel they fail,
naming the package (scripts/setup.sh --test installs them), unless --vm-missing=skip."""

from __future__ import annotations

import os

import pytest

from ebpfkit.errors import EbpfkitError
from ebpfkit.vm import in_vm, resolve_kernel
from ebpfkit.vm import host


@pytest.fixture
def host_only():
    """Harness tests drive the host's side: inside a VM (pytest run there by hand) they skip."""
    if in_vm():
        pytest.skip("tests the harness from the host: runs on the host only")


@pytest.fixture
def vm_kernel(request, host_only):
    """The kernel a host-side harness test boots (after checking every host piece)."""
    try:
        host.require()
        return resolve_kernel(request.config.getoption("vm_kernel", None))
    except EbpfkitError as exc:
        reason = f"cannot run a VM here: {exc} ({exc.hint})"
        if request.config.getoption("vm_missing", "fail") == "skip":
            pytest.skip(reason)
        pytest.fail(reason, pytrace=False)


@pytest.fixture
def kernel_version() -> tuple[int, int]:
    """(major, minor) of the kernel the test runs in: what a kernel-dependent path depends on."""
    return tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
