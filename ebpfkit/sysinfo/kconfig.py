"""The running kernel's build configuration (its CONFIG_* options), where the system keeps
it: /proc/config.gz (CONFIG_IKCONFIG_PROC), else the distribution's /boot/config-RELEASE,
else the headers' .config. BTF carries no configuration; programs written against kernel
headers test it with #ifdef."""

from __future__ import annotations

import gzip
import os
import re


def config_path(release: str | None = None) -> str | None:
    """Where this kernel's (or ``release``'s) configuration is, or None."""
    running = os.uname().release
    release = release or running
    places = (["/proc/config.gz"] if release == running else []) + [
        f"/boot/config-{release}", f"/lib/modules/{release}/build/.config", f"/lib/modules/{release}/config"]
    return next((p for p in places if os.path.isfile(p)), None)


def kernel_config(release: str | None = None) -> dict[str, str]:
    """{"CONFIG_X": "y" | "m" | value} of the options set (empty when none is found)."""
    path = config_path(release)
    if path is None:
        return {}
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    options = {}
    for line in lines:
        name, sep, value = line.partition("=")
        if sep and name.startswith("CONFIG_") and value:
            options[name] = value
    return options


def as_c_defines(options: dict[str, str]) -> str:
    """The options as the kernel's generated autoconf.h states them: ``CONFIG_X 1`` for y,
    ``CONFIG_X_MODULE 1`` for m, the value itself (strings quoted) otherwise."""
    lines = []
    for name, value in sorted(options.items()):
        if value == "y":
            lines.append(f"#define {name} 1")
        elif value == "m":
            lines.append(f"#define {name}_MODULE 1")
        elif value != "n":
            lines.append(f"#define {name} {value}")
    return "\n".join(lines) + "\n"


def version_code(release: str | None = None, proc_version: str | None = None) -> int:
    """The running kernel's LINUX_VERSION_CODE ((major << 16) + (minor << 8) + patch, the patch
    capped at 255), as its headers' version.h gives it: from the release name, except where
    that hides the upstream sublevel (Debian's 6.1.0-56-amd64 is 6.1.158: /proc/version says)."""
    running = os.uname().release
    release = release or running
    if proc_version is None and release == running:
        try:
            with open("/proc/version") as f:
                proc_version = f.read()
        except OSError:
            pass
    numbers = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not numbers:
        return 0
    major, minor, patch = int(numbers[1]), int(numbers[2]), int(numbers[3] or 0)
    debian = re.search(rf"Debian {major}\.{minor}\.(\d+)", proc_version or "")
    if debian:
        patch = int(debian[1])
    return (major << 16) + (minor << 8) + min(patch, 255)
