"""The filter's configuration is checked where it is defined: the CLI, YAML and a notebook
get the same error for the same bad value."""

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.errors import ConfigError
from ebpfkit.tools.xdp.filter import MAX_RULES, FilterConfig
from ebpfkit.tools.xdp.lb import LbConfig


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


# --- the load balancer's ---------------------------------------------------------------------------

LB_GOOD = {"vip": "10.0.0.100:80", "backends": ["10.0.0.11"]}
LB_OPTIONS = {"vip": ["--vip"], "backends": ["-b", "--backend"], "table_size": ["--table-size"],
              "max_backends": ["--max-backends"]}  # --mode is a click.Choice: click refuses a bad one


def _lb_cli_args(settings: dict) -> list[str]:
    args = []
    for name, value in settings.items():
        for one in value if name == "backends" else [value]:
            args += [LB_OPTIONS[name][-1], str(one)]
    return args


@pytest.mark.parametrize("settings, message", [
    ({"backends": []}, "backends: VIP 10.0.0.100:80/tcp has no backends: give at least one"),
    ({"backends": ["10.0.0.11", "10.0.0.12", "10.0.0.11"]}, "backends: backend 10.0.0.11 is given twice"),
    ({"backends": ["10.0.0.11,weight=0"]},
     "backends: bad backend '10.0.0.11,weight=0': 'weight=0' (options: weight=1-65535, mac=aa:bb:..)"),
    ({"vip": "10.0.0.300:80"}, "vip: bad VIP '10.0.0.300:80': "
                               "'10.0.0.300' does not appear to be an IPv4 or IPv6 address"),
    ({"vip": "10.0.0.100:80/icmp"}, "vip: bad VIP '10.0.0.100:80/icmp': the protocol must be tcp, udp or sctp"),
    ({"table_size": 65536}, "table_size: 65536 is not prime (65537 and 655373 are)"),
    ({"max_backends": 0}, "max_backends: must be in 1..65536, got 0"),
    ({"max_backends": 65537}, "max_backends: must be in 1..65536, got 65537"),
    ({"table_size": 13, "max_backends": 14}, "max_backends: must not exceed the table size 13, got 14"),
])
def test_lb_config_gives_one_error_from_keywords_yaml_and_the_cli(settings, message):
    values = {**LB_GOOD, **settings}
    with pytest.raises(ConfigError) as from_keywords:
        LbConfig(**values)
    with pytest.raises(ConfigError) as from_yaml:
        LbConfig.from_mapping({k.replace("_", "-"): v for k, v in values.items()})
    assert str(from_keywords.value) == str(from_yaml.value) == message
    assert from_keywords.value.exit_code == from_yaml.value.exit_code == 2
    # the config is checked before the interface is looked up: no such interface is needed
    result = CliRunner().invoke(cli, ["xdp", "lb", "attach", "--iface", "nosuch0", *_lb_cli_args(values)])
    field, reason = message.split(": ", 1)
    hint = " / ".join(f"'{o}'" for o in LB_OPTIONS[field])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for {hint}: {reason}" in result.output
    assert "Traceback" not in result.output


def test_lb_config_from_yaml_needs_a_vip_a_list_of_backends_and_a_mode():
    with pytest.raises(ConfigError, match="^mode: 'fast' is not one of native, generic, auto$"):
        LbConfig.from_mapping({**LB_GOOD, "mode": "fast"})
    with pytest.raises(ConfigError, match="^vip: a value is required$"):
        LbConfig.from_mapping({"backends": ["10.0.0.11"]})
    with pytest.raises(ConfigError, match="^backends: expected a list of IP"):
        LbConfig.from_mapping({"vip": "10.0.0.100:80", "backends": "10.0.0.11"})
    with pytest.raises(ConfigError, match="^flows: unknown setting"):
        LbConfig.from_mapping({**LB_GOOD, "flows": 10})


def test_lb_config_keeps_good_values_and_parses_them():
    config = LbConfig.from_mapping({"vip": "[2001:db8::100]:53/udp", "backends": ["2001:db8::11,weight=2"],
                                    "table-size": 4099, "max-backends": 8, "mode": "generic"})
    assert config == LbConfig(vip="[2001:db8::100]:53/udp", backends=("2001:db8::11,weight=2",),
                              table_size=4099, max_backends=8, mode="generic")
    assert str(config.parsed_vip()) == "[2001:db8::100]:53/udp"
    assert [(b.name, b.weight) for b in config.backend_specs()] == [("2001:db8::11", 2)]
