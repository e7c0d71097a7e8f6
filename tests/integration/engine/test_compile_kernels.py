"""Every shipped program compiles against the types of each kernel the VM harness boots
(5.10, 6.1, 6.12: the BTF of the vmlinux inside each installed image), as a user's clang
compiles against the kernel they run. A name newer than one of them (a field, an enum value,
a tracepoint record) used outside a local CO-RE flavour fails here, not on their machine:
the VM tests compile against this host's types (the harness shares its compile cache), so
they cannot see it. Loading there is the VM tests' job."""

from __future__ import annotations

import lzma
import os
import shutil
import subprocess
import sys

import pytest

from ebpfkit.vm import find_kernels

pytestmark = pytest.mark.integration

KERNELS = {k.release: k.image for k in find_kernels()}

COMPILE_ALL = r"""
import ebpfkit
from ebpfkit.engine.prebuilt import program_sources
failed = []
for source in program_sources():
    try:
        ebpfkit.compile(source).close()
    except Exception as exc:
        failed.append(f"{source.name}: " + "; ".join(l.strip() for l in str(exc).splitlines() if "error:" in l))
print("\n".join(failed))
"""


def vmlinux_of(image: str, into: str) -> str:
    """The ELF vmlinux inside a bzImage: the kernel's compressed payload (xz on Debian's 5.10
    and 6.1, zstd on 6.12), found by its magic."""
    with open(image, "rb") as f:
        data = f.read()
    out = os.path.join(into, os.path.basename(image).replace("vmlinuz", "vmlinux"))
    if (at := data.find(b"\xfd7zXZ\x00")) >= 0:
        payload = lzma.LZMADecompressor().decompress(data[at:])
    elif (at := data.find(b"\x28\xb5\x2f\xfd")) >= 0:
        assert shutil.which("zstd"), "zstd decompresses this image: apt-get install zstd"
        payload = subprocess.run(["zstd", "-dc"], input=data[at:], capture_output=True).stdout
    else:
        raise AssertionError(f"{image}: no xz or zstd payload")
    assert payload[:4] == b"\x7fELF", f"{image}: the payload is no ELF vmlinux"
    with open(out, "wb") as f:
        f.write(payload)
    return out


def test_the_harness_boots_the_kernels_users_run():
    assert {r.split(".")[0] + "." + r.split(".")[1] for r in KERNELS} >= {"5.10", "6.1", "6.12"}, KERNELS


@pytest.mark.parametrize("release", sorted(KERNELS))
def test_every_program_compiles_against_this_kernels_types(release, tmp_path):
    vmlinux = vmlinux_of(KERNELS[release], str(tmp_path))
    env = dict(os.environ, EBPFKIT_COMPILE_BTF=vmlinux, EBPFKIT_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", COMPILE_ALL], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "", f"against {release}'s types:\n{done.stdout}"
