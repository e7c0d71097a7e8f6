"""Kernels a VM can boot: installed /boot/vmlinuz-* images, their modules, headers and config,
and kernels of other Debian releases unpacked under /var/lib/ebpfkit/kernels/<release>/ (a
root with boot/ and lib/modules/, as scripts/debian-kernel.sh leaves them; virtme-ng finds
the modules beside the image).

virtme-ng boots a distribution kernel over the host's root filesystem, so the kernel's
modules must be installed (9p, overlayfs and virtio are modules in Debian's kernels).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import NotSupportedError

BOOT_DIR = "/boot"
MODULES_DIR = "/lib/modules"
IMAGE_PACKAGE = "linux-image-amd64"
UNPACKED_DIR = os.environ.get("EBPFKIT_KERNELS_DIR", "/var/lib/ebpfkit/kernels")  # debian-kernel.sh's

# Replaces the kernel's LSM list when none can be read from its config.
FALLBACK_LSMS = "lockdown,capability,bpf"


@dataclass(frozen=True)
class Kernel:
    release: str
    image: str
    modules: str | None = None   # /lib/modules/<release>
    headers: str | None = None   # its build/ tree (linux-headers-<release>)
    config: str | None = None    # /boot/config-<release>

    @property
    def running(self) -> bool:
        return self.release == os.uname().release

    def config_value(self, name: str) -> str | None:
        """CONFIG_<name> from the kernel's config file ("y", "m", a quoted string...), or None."""
        if not self.config:
            return None
        try:
            text = Path(self.config).read_text(errors="replace")
        except OSError:
            return None
        m = re.search(rf"^CONFIG_{name}=(.*)$", text, re.M)
        return m.group(1).strip('"') if m else None

    def lsm_list(self) -> str:
        """The value for ``lsm=`` that makes BPF-LSM active: the kernel's own default list
        (CONFIG_LSM) with bpf added, so the other LSMs stay as the distribution ships them."""
        configured = self.config_value("LSM")
        if not configured:
            return FALLBACK_LSMS
        names = [n for n in configured.split(",") if n]
        return ",".join(names if "bpf" in names else names + ["bpf"])

    def missing_modules_error(self) -> NotSupportedError:
        return NotSupportedError(
            "vm-kernel", f"kernel {self.release} has no modules in {MODULES_DIR}/{self.release}; "
                         "the VM needs them (9p, overlayfs and virtio are modules)",
            hint=f"apt-get install linux-image-{self.release} (or {IMAGE_PACKAGE})")


def image_release(path: str | os.PathLike) -> str | None:
    """The release string in an x86 bzImage's setup header (what `file` prints as "version")."""
    try:
        with open(path, "rb") as f:
            head = f.read(0x4000)
            if head[0x202:0x206] != b"HdrS":
                return None
            offset = int.from_bytes(head[0x20E:0x210], "little") + 0x200
            f.seek(offset)
            text = f.read(256)
    except OSError:
        return None
    release = text.split(b"\0", 1)[0].split(b" ", 1)[0].decode(errors="replace")
    return release or None


def _kernel(image: Path, release: str, modules_root: str) -> Kernel:
    mods = Path(modules_root) / release
    build = mods / "build"
    config = image.parent / f"config-{release}"
    return Kernel(release=release, image=str(image),
                  modules=str(mods) if (mods / "modules.dep").exists() or (mods / "kernel").is_dir() else None,
                  headers=str(build.resolve()) if (build / "Makefile").exists() else None,
                  config=str(config) if config.exists() else None)


def _version_key(release: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\-+~]", release)]


def find_kernels(boot_dir: str = BOOT_DIR, modules_root: str = MODULES_DIR,
                 unpacked_dir: str | None = None) -> list[Kernel]:
    """Installed kernels and those unpacked under ``unpacked_dir`` (UNPACKED_DIR), newest first."""
    places = [(Path(boot_dir), modules_root)]
    unpacked_dir = unpacked_dir or UNPACKED_DIR
    if os.path.isdir(unpacked_dir):
        places += [(root / "boot", str(root / "lib" / "modules")) for root in sorted(Path(unpacked_dir).iterdir())
                   if root.is_dir() and not root.name.endswith(".partial")]
    kernels, seen = [], set()
    for boot, modules in places:
        for image in boot.glob("vmlinuz-*"):
            release = image.name.removeprefix("vmlinuz-")
            if image.is_file() and release not in seen:  # an installed one wins
                seen.add(release)
                kernels.append(_kernel(image, release, modules))
    return sorted(kernels, key=lambda k: _version_key(k.release), reverse=True)


def default_kernel(kernels: list[Kernel]) -> Kernel | None:
    """The newest kernel that has its modules."""
    return next((k for k in kernels if k.modules), None)


def resolve(spec: str | None = None, boot_dir: str = BOOT_DIR, modules_root: str = MODULES_DIR,
            unpacked_dir: str | None = None) -> Kernel:
    """The kernel for ``--kernel``: a path to an image, a release ("6.1.0-56-amd64") or a
    version prefix ("6.1"), or None for the default. Raises NotSupportedError naming the package."""
    if spec and (os.sep in spec or os.path.isfile(spec)):
        image = Path(spec)
        if not image.is_file():
            raise NotSupportedError("vm-kernel", f"no kernel image at {spec}")
        release = image_release(image) or image.name.removeprefix("vmlinuz-")
        image = image.resolve()
        beside = image.parent.parent / "lib" / "modules"  # an unpacked package's root (as virtme-ng looks)
        if image.parent.name == "boot" and (beside / release).is_dir():
            modules_root = str(beside)
        # a self-built image may have 9p and virtio built in: let virtme-ng judge
        return _kernel(image, release, modules_root)
    else:
        kernels = find_kernels(boot_dir, modules_root, unpacked_dir)
        if spec:
            matches = [k for k in kernels if k.release == spec] or [
                k for k in kernels if k.release.startswith(spec) and k.release[len(spec):][:1] in ".-"]
            kernel = default_kernel(matches) or (matches[0] if matches else None)
            if kernel is None:
                found = ", ".join(k.release for k in kernels) or "none"
                raise NotSupportedError("vm-kernel", f"no installed kernel matches {spec!r} (installed: {found})",
                                        hint=f"apt-get install {IMAGE_PACKAGE}, scripts/debian-kernel.sh SUITE "
                                             f"(another Debian release's: bullseye is 5.10), or pass "
                                             f"--kernel /path/to/vmlinuz")
        else:
            kernel = default_kernel(kernels)
            if kernel is None:
                raise NotSupportedError(
                    "vm-kernel", f"no kernel with modules in {boot_dir} to boot in a VM",
                    hint=f"apt-get install {IMAGE_PACKAGE} linux-headers-amd64 (or scripts/setup.sh --test)")
    if not kernel.modules:
        raise kernel.missing_modules_error()
    return kernel
