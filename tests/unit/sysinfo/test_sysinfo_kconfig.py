"""The kernel's configuration, as BCC programs' #ifdefs see it."""

from __future__ import annotations

import os

from ebpfkit.sysinfo import kconfig


def test_the_running_kernels_configuration_has_what_this_very_suite_uses():
    options = kconfig.kernel_config()
    assert kconfig.config_path() is not None, "no /proc/config.gz nor /boot/config-$(uname -r) here"
    assert options["CONFIG_BPF_SYSCALL"] == "y" and options["CONFIG_BPF_EVENTS"] == "y"
    assert all(name.startswith("CONFIG_") and value not in ("", "n") for name, value in options.items())


def test_a_named_release_is_read_from_its_boot_file():
    release = next((f[len("config-"):] for f in sorted(os.listdir("/boot")) if f.startswith("config-")), None)
    assert release is not None, "the suite installs Debian kernels, each with /boot/config-RELEASE"
    assert kconfig.config_path(release) in (f"/boot/config-{release}", "/proc/config.gz")
    assert kconfig.kernel_config(release)["CONFIG_BPF_SYSCALL"] == "y"


def test_options_become_autoconf_defines():
    text = kconfig.as_c_defines({"CONFIG_A": "y", "CONFIG_B": "m", "CONFIG_HZ": "250",
                                 "CONFIG_NAME": '"debian"', "CONFIG_OFF": "n"})
    assert text.splitlines() == ["#define CONFIG_A 1", "#define CONFIG_B_MODULE 1", "#define CONFIG_HZ 250",
                                 '#define CONFIG_NAME "debian"']


def test_the_version_code_is_the_upstream_one():
    debian = "Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP Debian 6.1.158-1 (2025-11-09)"
    assert kconfig.version_code("6.1.0-56-amd64", debian) == (6 << 16) + (1 << 8) + 158
    assert kconfig.version_code("6.18.44-fc-v595", "Linux version 6.18.44-fc-v595 #1 SMP") == (6 << 16) + (18 << 8) + 44
    assert kconfig.version_code("5.10.300", "") == (5 << 16) + (10 << 8) + 255  # as version.h caps it
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    assert kconfig.version_code() >> 8 == (major << 8) + minor
