"""iotrace's Config and ReportConfig: each bad value is the same ConfigError from keyword
arguments (a notebook), from a mapping (a YAML file), and a usage error (exit 2) naming the
option from the CLI, before anything is loaded or read."""

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools import iotrace
from helpers import same_config_error


@pytest.mark.parametrize("settings, args, option, message", [
    ({"pid": 999999999}, ["-p", "999999999"], "'-p' / '--pid'", "no process with PID 999999999"),
    ({"disk": "no-such-disk"}, ["--disk", "no-such-disk"], "'--disk'", "no block device 'no-such-disk'"),
])
def test_a_bad_record_setting_is_one_error_from_every_entry(capsys, tmp_path, settings, args, option, message):
    out = str(tmp_path / "x.iot")
    same_config_error(capsys, iotrace.Config, {"record_file": out, **settings},
                      ["iotrace", "record", "-o", out, *args], option, message)
    assert not (tmp_path / "x.iot").exists()


def test_values_the_cli_parses_away_are_still_checked(tmp_path):
    with pytest.raises(ConfigError, match="duration: must be greater than 0, got 0"):
        iotrace.Config(record_file="x.iot", duration=0)
    with pytest.raises(ConfigError, match="record_file: a value is required"):
        iotrace.Config.from_mapping({"duration": 1})
    with pytest.raises(ConfigError, match="top: must be 0 or more, got -1"):
        iotrace.ReportConfig.from_mapping({"record-file": "x.iot", "top": -1})
    with pytest.raises(ConfigError, match=f"record_file: {tmp_path} is a directory"):
        iotrace.ReportConfig(record_file=str(tmp_path))


def test_a_file_that_is_no_record_is_a_config_error_naming_it(capsys, tmp_path):
    bad = tmp_path / "random.iot"
    bad.write_bytes(b"\x00not json\n")
    with pytest.raises(ConfigError) as exc:
        iotrace.report(record_file=str(bad))
    assert exc.value.field == "record_file" and "is not an iotrace record file" in exc.value.reason
    from helpers import ek

    rc, _, err = ek(capsys, "iotrace", "report", str(bad))
    assert rc == 2 and f"Invalid value for 'FILE': {exc.value.reason}" in err, err
