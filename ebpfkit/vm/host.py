"""What the host needs to boot a VM (QEMU, virtme-ng, busybox) and whether KVM works.

Each missing piece is a NotSupportedError whose hint names the package that provides it.
"""

from __future__ import annotations

import functools
import os
import select
import shutil
import subprocess
import sys
import time

from ..errors import NotSupportedError

QEMU = "qemu-system-x86_64"
SETUP_HINT = "or run scripts/setup.sh --test"


def tool_path() -> str:
    """PATH for virtme-ng: it runs `virtme-run` by name, which lives next to `vng` (in the
    venv's bin dir, not always on the caller's PATH)."""
    dirs = [os.path.dirname(sys.executable)]
    vng = shutil.which("vng")
    if vng:
        dirs.append(os.path.dirname(vng))
    dirs += os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep)
    return os.pathsep.join(dict.fromkeys(d for d in dirs if d))


def find_vng() -> str:
    path = tool_path()
    vng, run = shutil.which("vng", path=path), shutil.which("virtme-run", path=path)
    if not vng or not run:
        raise NotSupportedError("virtme-ng", "virtme-ng (vng) is not installed",
                                hint=f"pip install virtme-ng (it is in ebpfkit's [test] extra), {SETUP_HINT}")
    return vng


def find_qemu() -> str:
    qemu = shutil.which(QEMU, path=tool_path())
    if not qemu:
        raise NotSupportedError("qemu", f"{QEMU} is not installed",
                                hint=f"apt-get install qemu-system-x86 ({SETUP_HINT})")
    return qemu


def find_busybox() -> str:
    # virtme-ng builds the guest's initramfs around a static busybox
    busybox = shutil.which("busybox", path=tool_path())
    if not busybox:
        raise NotSupportedError("busybox", "busybox is not installed (virtme-ng's initramfs needs it)",
                                hint=f"apt-get install busybox-static ({SETUP_HINT})")
    return busybox


def require() -> str:
    """Check every host piece; return the vng path."""
    find_qemu()
    find_busybox()
    return find_vng()


KVM_BOOT_SECONDS = 10.0  # a KVM guest prints "Linux version" well within a second


@functools.lru_cache(maxsize=None)
def kvm_usable(image: str | None = None) -> tuple[bool, str]:
    """(usable, why). /dev/kvm existing is not enough: under nested virtualisation QEMU can
    abort while setting up the vCPU (e.g. "failed to set MSR"), or the vCPU runs the
    firmware and the kernel's real-mode setup but stalls when the kernel switches to long
    mode (seen on these hosts: the guest never boots). So start QEMU paused with KVM and the
    CPU virtme-ng asks for, then, given the kernel ``image`` to boot, boot it and wait for
    its first console line."""
    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible (join the kvm group)"
    try:
        qemu = find_qemu()
    except NotSupportedError as exc:
        return False, str(exc)
    base = [qemu, "-accel", "kvm", "-cpu", "host", "-nodefaults", "-no-user-config", "-display", "none"]
    try:
        out = subprocess.run([*base, "-m", "64", "-monitor", "stdio", "-S"],
                             input="quit\n", capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False, "QEMU with KVM did not answer"
    if out.returncode != 0:
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        return False, f"QEMU cannot start a KVM vCPU: {lines[0] if lines else f'exit {out.returncode}'}"
    if image and not _kernel_boots(base, image):
        return False, (f"a kernel under KVM printed nothing in {KVM_BOOT_SECONDS:g} s "
                       "(nested virtualisation stalls it)")
    return True, "KVM works"


def _kernel_boots(qemu_argv: list[str], image: str, seconds: float = KVM_BOOT_SECONDS) -> bool:
    """Whether ``image`` under KVM reaches its first console line ("Linux version")."""
    proc = subprocess.Popen([*qemu_argv, "-m", "256", "-serial", "stdio", "-no-reboot", "-kernel", image,
                             "-append", "console=ttyS0 earlyprintk=serial,ttyS0 panic=-1"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    seen = bytearray()
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        deadline = time.monotonic() + seconds
        while b"Linux version" not in seen and time.monotonic() < deadline and proc.poll() is None:
            select.select([proc.stdout], [], [], 0.2)
            seen += proc.stdout.read() or b""
        return b"Linux version" in seen
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def choose_accel(requested: str = "auto", image: str | None = None) -> tuple[str, str]:
    """("kvm" | "tcg", why) for booting the kernel ``image`` (None: check the vCPU only)."""
    if requested == "tcg":
        return "tcg", "software emulation requested"
    usable, why = kvm_usable(image)
    if requested == "kvm":
        if not usable:
            raise NotSupportedError("kvm", f"KVM cannot be used: {why}", hint="use --accel tcg (software emulation)")
        return "kvm", why
    return ("kvm", why) if usable else ("tcg", f"software emulation (TCG): {why}")
