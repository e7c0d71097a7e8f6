"""The filter's configuration is checked where it is defined: the CLI, YAML and a notebook
get the same error for the same bad value."""

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.errors import ConfigError
from ebpfkit.tools.xdp.filter import MAX_RULES, FilterConfig


@pytest.mark.parametrize("settings, message", [
    ({"max_rules": 0}, f"max_rules: must be in 1..{MAX_RULES}, got 0"),
    ({"max-rules": MAX_RULES + 1}, f"max_rules: must be in 1..{MAX_RULES}, got {MAX_RULES + 1}"),
    ({"mode": "fast"}, "mode: 'fast' is not one of native, generic, auto"),
    ({"dry_run": "yes"}, "dry_run: expected bool, got str 'yes'"),
])
def test_bad_settings_name_the_setting(settings, message):
    with pytest.raises(ConfigError) as from_yaml:
        FilterConfig.from_mapping(settings)
    assert str(from_yaml.value) == message
    assert from_yaml.value.exit_code == 2


def test_the_cli_names_the_option_for_the_same_rule():
    result = CliRunner().invoke(cli, ["xdp", "filter", "attach", "--iface", "nosuch0", "--max-rules", "0",
                                      "--src", "10.0.0.0/8"])
    assert result.exit_code == 2
    assert f"Invalid value for '--max-rules': must be in 1..{MAX_RULES}, got 0" in result.output


def test_good_settings_keep_their_values():
    assert FilterConfig.from_mapping({"default-deny": True, "max_rules": 10, "mode": "generic"}) == \
        FilterConfig(default_deny=True, dry_run=False, max_rules=10, mode="generic")
