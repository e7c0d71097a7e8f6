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
