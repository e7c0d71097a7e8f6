"""The exporter's configuration: every mistake is exit 2 naming FILE:LINE and the setting,
the same ConfigError a tool's session gives from Python; the shipped example is valid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import ebpfkit
from ebpfkit.exporter.config import DEFAULT_LISTEN, load_config, parse_config
from ebpfkit.exporter.server import parse_listen
from ebpfkit.errors import ConfigError
from ebpfkit.policy import PolicyError
from helpers import ek

EXAMPLE = Path(ebpfkit.__file__).parent / "exporter" / "example.yaml"


def test_the_shipped_example_is_valid():
    config = load_config(str(EXAMPLE))
    assert [s.kind for s in config.sources] == ["runqlat", "iofsstat", "softirqs"]
    assert (config.series_limit, config.pid_label) == (2000, False)
    assert config.sources[1].options.hook == "auto"


def test_the_readme_shows_the_shipped_example():
    readme = (Path(ebpfkit.__file__).parent.parent / "README.md").read_text()
    assert f"```yaml\n{EXAMPLE.read_text()}```" in readme


def test_settings_reach_each_sources_config():
    config = parse_config("series_limit: 5\npid_label: true\nsources:\n"
                          "  - source: runqlat\n    milliseconds: true\n    by: cgroup\n"
                          "  - source: xdp_filter\n    iface: eth1\n    netns: web\n"
                          "  - source: xdp_lb\n    iface: eth2\n")
    runqlat, xdp, lb = config.sources
    assert (config.series_limit, config.pid_label) == (5, True)
    assert runqlat.options.milliseconds and runqlat.options.unit_ns == 1_000_000
    assert runqlat.options.by == "cgroup"
    assert (xdp.options.iface, xdp.options.netns, xdp.line) == ("eth1", "web", 7)
    assert (lb.options.iface, lb.options.netns) == ("eth2", None)


BAD = [
    # (file text, line, what the message says)
    ("sources:\n  - source: runqlat\n  - source: cpufreq\n", 3, "unknown source 'cpufreq' (known: runqlat"),
    ("sources:\n  - source: runqlat\n    per-cpu: true\n", 3,
     "source runqlat: per_cpu: unknown setting; known ones: milliseconds, per_process, pid, per_thread, per_pidns, "
     "by, cgroup"),
    ("sources:\n  - source: runqlat\n\n    milliseconds: yes please\n", 4,
     "source runqlat: milliseconds: expected bool, got str 'yes please'"),
    ("sources:\n  - source: iofsstat\n    hook: kprobe\n", 3, "source iofsstat: hook: 'kprobe' is not one of auto"),
    ("sources:\n  - source: runqlat\n    pid: 0\n", 3, "source runqlat: pid: no process with PID 0"),
    ("sources:\n  - source: runqlat\n    per_process: true\n", 3, "source runqlat: per_process: not exported"),
    ("sources:\n  - source: runqlat\n    per-thread: true\n", 3, "source runqlat: per_thread: not exported"),
    ("sources:\n  - source: runqlat\n    per_pidns: true\n", 3, "source runqlat: per_pidns: not exported"),
    ("sources:\n  - source: runqlat\n    by: container\n", 3, "source runqlat: by: not exported: use 'by: cgroup'"),
    ("sources:\n  - source: runqlat\n    by: pod\n", 3, "source runqlat: by: 'pod' is not one of cgroup, container"),
    ("sources:\n  - source: xdp_filter\n    netns: web\n", 2, "source xdp_filter: iface: a value is required"),
    ("sources:\n  - source: xdp_lb\n    iface: 3\n", 3, "source xdp_lb: iface: expected str, got int 3"),
    ("sources:\n  - iface: eth1\n", 2, "a source needs 'source:' naming it"),
    ("series_limit: 0\nsources:\n  - source: runqlat\n", 1, "series_limit must be 1 or more"),
    ("series_limit: many\nsources:\n  - source: runqlat\n", 1, "series_limit must be a whole number"),
    ("pid_label: 1\nsources:\n  - source: runqlat\n", 1, "pid_label must be true or false"),
    ("sources:\n  - source: runqlat\nlisten: 0.0.0.0:1\n", 3, "unknown key 'listen' in the configuration"),
    ("sources: []\n", 1, "'sources' must be a non-empty list"),
    ("series_limit: 3\n", 1, "no 'sources'"),
    ("sources:\n  - source: runqlat\n  - source: runqlat\n    pid: [1\n", 5, "invalid YAML"),
]


@pytest.mark.parametrize("text, line, message", BAD, ids=[m.split(":")[0][:30] for _, _, m in BAD])
def test_bad_configuration_is_exit_2_with_file_line_and_setting(capsys, tmp_path, text, line, message):
    path = tmp_path / "exporter.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as raised:
        load_config(str(path))
    assert (raised.value.line, raised.value.source) == (line, str(path))
    assert message in raised.value.message, raised.value.message
    rc, out, err = ek(capsys, "exporter", "--config", path, "--listen", "127.0.0.1:1")
    assert rc == 2 and out == ""
    assert f"{path}:{line}: " in err and message in err, err
    assert "Traceback" not in err


def test_a_sources_setting_is_the_same_error_as_its_sessions():
    """The YAML's check is the session's own Config: same reason, whichever built it."""
    from ebpfkit.tools import runqlat

    with pytest.raises(ConfigError) as direct:
        runqlat.Config(milliseconds="yes")
    with pytest.raises(PolicyError) as from_yaml:
        parse_config("sources:\n  - source: runqlat\n    milliseconds: 'yes'\n")
    assert from_yaml.value.message == f"source runqlat: {direct.value}"


def test_a_missing_or_unreadable_file_is_exit_2(capsys, tmp_path):
    rc, _, err = ek(capsys, "exporter", "--config", tmp_path / "nope.yaml")
    assert rc == 2 and "cannot read the configuration: No such file or directory" in err
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    rc, _, err = ek(capsys, "exporter", "--config", tmp_path / "bin.yaml")
    assert rc == 2 and "not UTF-8 text" in err


@pytest.mark.parametrize("text, expected", [
    (DEFAULT_LISTEN, ("127.0.0.1", 9435)), ("0.0.0.0:80", ("0.0.0.0", 80)), ("[::1]:9435", ("::1", 9435)),
    ("localhost:65535", ("localhost", 65535)),
])
def test_listen_addresses(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9435", ":9435", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "host:http"])
def test_bad_listen_is_a_usage_error_naming_the_option(capsys, tmp_path, text):
    with pytest.raises(ConfigError, match="is not HOST:PORT"):
        parse_listen(text)
    config = tmp_path / "exporter.yaml"
    config.write_text("sources:\n  - source: xdp_filter\n    iface: nosuch0\n")
    rc, _, err = ek(capsys, "exporter", "--config", config, "--listen", text)
    assert rc == 2 and "Invalid value for '--listen'" in err and "is not HOST:PORT" in err, err


def test_help_names_the_example(capsys):
    rc, out, _ = ek(capsys, "exporter", "--help")
    assert rc == 0 and "--listen HOST:PORT" in out and "example.yaml" in out
    assert os.path.exists(EXAMPLE)
