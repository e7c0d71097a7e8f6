"""Kernel headers for BCC without touching /lib/modules.

BCC compiles every program against kernel headers. It looks in
/lib/modules/$(uname -r)/{build,source}, or in the single directory named by
$BCC_KERNEL_SOURCE. Debian splits its header packages in two (linux-headers-X-amd64 has
the generated config headers, linux-headers-X-common the rest), which fits the
build/source pair but not the single directory, so this builds a symlink tree merging
both (once, ~16k symlinks, ~1 s) and points $BCC_KERNEL_SOURCE at it.

The headers need not match the running kernel: the benchmark programs only read
tracepoint fields, whose layout BCC takes from tracefs, never kernel structs. Where the
running kernel is one scripts/debian-kernel.sh unpacked (a VM guest booted with
`ebpfkit vm run --kernel 5.10`), its own headers are used if `debian-kernel.sh --headers`
unpacked them beside it (/var/lib/ebpfkit/kernels/<release>/usr/src/); the -amd64 package's
Makefile names the -common one by its /usr/src path, which is read inside that tree.

    python3 benchmarks/bcc_headers.py [RELEASE]   # prepare, print the BCC_KERNEL_SOURCE to use
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

INSTALL_HINT = "apt-get install linux-headers-$(dpkg --print-architecture)  (or linux-headers-$(uname -r))"
# where scripts/debian-kernel.sh unpacks other Debian releases' kernels (as ebpfkit.vm.kernels)
UNPACKED_DIR = os.environ.get("EBPFKIT_KERNELS_DIR", "/var/lib/ebpfkit/kernels")


def _cache_root() -> str:
    if os.geteuid() == 0:
        return "/var/cache/ebpfkit-bench/bcc-kernel-source"
    base = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    return os.path.join(base, "ebpfkit-bench", "bcc-kernel-source")


def _version_key(path: str):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", os.path.basename(path))]


def _debian_pairs(root: str = "/"):
    """(flavour dir, common dir) of Debian/Ubuntu-style split header packages under ``root``'s
    /usr/src (the machine's own, or an unpacked package tree's), newest first."""
    pairs = []
    for d in glob.glob(os.path.join(root, "usr/src/linux-headers-*")):
        if not os.path.exists(os.path.join(d, "include/generated/autoconf.h")):
            continue
        common = None
        try:
            with open(os.path.join(d, "Makefile")) as f:
                m = re.search(r"^include\s+(\S+)/Makefile", f.read(), re.M)
            common = m.group(1) if m else None
            if common and os.path.isabs(common):  # an unpacked tree's /usr/src is its own
                common = os.path.join(root, common.lstrip("/"))
        except OSError:
            pass
        if common and os.path.exists(os.path.join(common, "include/linux/kconfig.h")):
            pairs.append((d, common))
        elif os.path.exists(os.path.join(d, "include/linux/kconfig.h")):
            pairs.append((d, None))  # a complete tree on its own
    return sorted(pairs, key=lambda p: _version_key(p[0]), reverse=True)


def _merge(flavour: str, common: str, target: str) -> None:
    tmp = f"{target}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    # symlink copies: common first, then the flavour's generated files on top
    for src in (common, flavour):
        subprocess.run(["cp", "-rsf", f"{src}/.", f"{tmp}/"], check=True)
    try:
        os.rename(tmp, target)
    except OSError:  # someone else finished first
        shutil.rmtree(tmp, ignore_errors=True)


def _unpacked_pair(release: str):
    """(flavour dir, common dir) of ``release``'s own headers where debian-kernel.sh --headers
    unpacked them beside that kernel, or None."""
    root = os.path.join(UNPACKED_DIR, release)
    if not os.path.isdir(os.path.join(root, "usr/src")):
        return None
    return next((p for p in _debian_pairs(root) if os.path.basename(p[0]) == f"linux-headers-{release}"), None)


def bcc_kernel_env(release: str | None = None) -> tuple[dict | None, str]:
    """(extra environment for BCC, description), or (None, why not and how to fix it).
    ``release``: the kernel to prepare for (default: the running one; another one's own
    headers are prepared only where debian-kernel.sh --headers unpacked them)."""
    running = os.uname().release
    release = release or running
    build = f"/lib/modules/{release}/build"
    if os.path.exists(os.path.join(build, "include/generated/autoconf.h")):
        return {}, f"{build} (headers of the running kernel)"
    env_dir = os.environ.get("BCC_KERNEL_SOURCE")
    if env_dir and os.path.exists(os.path.join(env_dir, "include/linux/kconfig.h")):
        return {"BCC_KERNEL_SOURCE": env_dir}, f"BCC_KERNEL_SOURCE={env_dir} (from the environment)"
    own = _unpacked_pair(release)
    missing = ""
    if own is None and os.path.isdir(os.path.join(UNPACKED_DIR, release, "boot")):
        missing = f"no headers beside the unpacked kernel {release}: scripts/debian-kernel.sh --headers SUITE"
        if release != running:
            return None, missing
        missing = f"; {missing}"  # a guest of such a kernel without them: the installed ones, as anywhere else
    pairs = [own] if own else _debian_pairs()
    if not pairs:
        return None, f"no kernel headers for BCC: {INSTALL_HINT}"
    flavour, common = pairs[0]
    name = os.path.basename(flavour).removeprefix("linux-headers-")
    if common is None:
        source = flavour
    else:
        source = os.path.join(_cache_root(), name)
        if not os.path.exists(os.path.join(source, "include/generated/autoconf.h")):
            os.makedirs(_cache_root(), exist_ok=True)
            _merge(flavour, common, source)
    match = ("" if name == release else f", running kernel is {release}") + missing
    if own:
        match += f", unpacked beside the kernel in {os.path.join(UNPACKED_DIR, release)}"
    return {"BCC_KERNEL_SOURCE": source}, f"BCC_KERNEL_SOURCE={source} (headers {name}{match})"


def headers_match(env: dict) -> bool:
    """Whether the headers ``env`` (from bcc_kernel_env) gives BCC are the running kernel's: only then
    do BCC programs that read kernel structs (not just tracepoint fields) read the right offsets."""
    source = env.get("BCC_KERNEL_SOURCE")
    return not source or os.path.basename(os.path.normpath(source)) == os.uname().release


if __name__ == "__main__":
    env, text = bcc_kernel_env(sys.argv[1] if len(sys.argv) > 1 else None)
    print(text)
    sys.exit(0 if env is not None else 1)
