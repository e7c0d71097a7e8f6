"""The running kernel's build configuration (its CONFIG_* options), where the system keeps
it: /proc/config.gz (CONFIG_IKCONFIG_PROC), else the distribution's /boot/config-RELEASE,
else the headers' .config. BTF carries no configuration; programs written against kernel
headers test it with #ifdef."""

from __future__ import annotations

import gzip
import os


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
