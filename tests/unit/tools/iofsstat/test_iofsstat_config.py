"""iofsstat's Config: each bad value is the same ConfigError from keyword arguments (a
notebook), from a mapping (a YAML file), and a usage error (exit 2) naming the option from
the CLI, before anything is loaded."""

import pytest

from ebpfkit.tools import iofsstat
from helpers import same_config_error


@pytest.mark.parametrize("settings, args, option, message", [
    ({"pid": 999999999}, ["-p", "999999999"], "'-p' / '--pid'", "no process with PID 999999999"),
    ({"disk": "no-such-disk0"}, ["--disk", "no-such-disk0"], "'--disk'", "no block device 'no-such-disk0'"),
    ({"container": "not-hex"}, ["--container", "not-hex"], "'--container'", "is no container id"),
    ({"container": "ffffffffffff"}, ["--container", "ffffffffffff"], "'--container'", "no running container"),
])
def test_a_bad_value_is_one_error_from_every_entry(capsys, settings, args, option, message):
    same_config_error(capsys, iofsstat.Config, settings, ["iofsstat", *args, "1", "1"], option, message)


def test_settings_the_cli_cannot_misspell_are_still_checked():
    from ebpfkit.errors import ConfigError

    with pytest.raises(ConfigError, match="hook: 'kprobe' is not one of auto, fexit, tracepoint"):
        iofsstat.Config(hook="kprobe")
    with pytest.raises(ConfigError, match="pid: expected int, got str"):
        iofsstat.Config.from_mapping({"pid": "1"})
    with pytest.raises(ConfigError, match="unknown setting"):
        iofsstat.Config.from_mapping({"sort": "pid"})
    assert iofsstat.Config.from_mapping({"pid": None, "hook": "tracepoint"}).hook == "tracepoint"
