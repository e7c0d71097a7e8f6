"""The VM part of the suite. Tests marked ``@pytest.mark.vm`` run inside a VM kernel (the
ebpfkit pytest plugin boots one per kernel/options group); the harness tests here run on
the host and boot VMs themselves. Without QEMU, virtme-ng, busybox or a kernel they fail,
naming the package (scripts/setup.sh --test installs them), unless --vm-missing=skip."""

from __future__ import annotations

import os
import subprocess

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
def tmpfs(tmp_path):
    """A fresh tmpfs the test mounts, where the (device, inode) the hooks see is what stat()
    says (the guest's /tmp is an overlay, where it is not)."""
    path = tmp_path / "fs"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "ebpfkit-test", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# --- objects the host builds for the guest --------------------------------------------------

HOST_PREBUILT = "host_prebuilt"
HOST_KMOD = "host_kmod"
KMOD_SOURCE = os.path.join(os.path.dirname(__file__), "kmod")
KMOD_BUILD = os.path.join(KMOD_SOURCE, "build")  # <release>/<name>.ko, ignored by git
HEADERS = "/usr/src"  # Debian's linux-headers-<release> (the VM kernels' own)


def pytest_configure(config):
    config.addinivalue_line("markers", f"{HOST_PREBUILT}: a VM test loading the prebuilt CO-RE objects "
                                       "the host builds before the boot (into ebpfkit/programs/prebuilt)")
    config.addinivalue_line("markers", f"{HOST_KMOD}: a VM test loading the test kernel module of "
                                       f"tests/vm/kmod, which the host builds before the boot against "
                                       f"each VM kernel's headers (into {KMOD_BUILD})")


@pytest.fixture(scope="session")
def kmod_path():
    """``kmod_path(name, release)``: where the host put test module ``name`` built for
    kernel ``release`` (tests marked host_kmod)."""
    return lambda name, release: os.path.join(KMOD_BUILD, release, f"{name}.ko")


def build_kmods() -> list[str]:
    """The modules of tests/vm/kmod built against every installed linux-headers-<release>
    that can build modules (the guest sees this tree read-only, and cannot compile fast)."""
    import glob
    import shutil

    built = []
    for headers in sorted(glob.glob(os.path.join(HEADERS, "linux-headers-*"))):
        if not os.path.exists(os.path.join(headers, "Module.symvers")):
            continue  # the -common half of a Debian pair: not a build tree
        release = os.path.basename(headers)[len("linux-headers-"):]
        out = os.path.join(KMOD_BUILD, release)
        os.makedirs(out, exist_ok=True)
        for name in os.listdir(KMOD_SOURCE):
            if name.endswith(".c") or name == "Kbuild":
                shutil.copy(os.path.join(KMOD_SOURCE, name), out)
        make = subprocess.run(["make", "-s", "-C", headers, f"M={out}", "modules"], capture_output=True,
                              text=True, timeout=600)
        if make.returncode != 0:
            raise pytest.UsageError(f"cannot build the test kernel modules against {headers}: "
                                    f"{make.stderr.strip() or make.stdout.strip()}")
        built.append(release)
    return built


def pytest_collection_modifyitems(config, items):
    """On the host, before any boot: build the test kernel modules, and make the prebuilt
    objects current, against the host's BTF (the guest sees this tree read-only; `ebpfkit
    build` leaves current objects alone)."""
    if in_vm():
        return
    if any(item.get_closest_marker(HOST_KMOD) for item in items):
        build_kmods()
    if not any(item.get_closest_marker(HOST_PREBUILT) for item in items):
        return
    from ebpfkit.engine.prebuilt import build_all

    try:
        build_all()
    except EbpfkitError as exc:
        raise pytest.UsageError(f"cannot build the prebuilt CO-RE objects the VM tests load: {exc}") from None


@pytest.fixture
def kernel_version() -> tuple[int, int]:
    """(major, minor) of the kernel the test runs in: what a kernel-dependent path depends on."""
    return tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
