"""sockmap pieces that need no kernel: key layout and byte order, the regression's release
table, cgroup path checks, options, the status table and the CLI's shape."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.errors import ConfigError
from ebpfkit.tools.sockmap import Options, SockmapUsageError, resolve_cgroup
from ebpfkit.tools.sockmap import maps as M
from ebpfkit.sysinfo.mounts import MountTable
from ebpfkit.tools.sockmap.regression import release_affected
from ebpfkit.tools import TOOLS

@pytest.fixture(scope="module")
def btf():
    """The BTF of sockmap.bpf.c, compiled (not loaded): the layouts maps.py encodes with."""
    import ebpfkit

    spec = ebpfkit.compile(str(Path(M.__file__).with_name("sockmap.bpf.c")))
    yield spec.btf
    spec.close()


def test_key_byte_order_addresses_network_ports_host(btf):
    raw = M.encode_key(btf, socket.AF_INET, "127.0.0.1", 8080, "127.0.0.2", 443)
    local, remote, lport, rport = struct.unpack("=4s4sHH", raw)
    assert local == bytes([127, 0, 0, 1]) and remote == bytes([127, 0, 0, 2])
    assert (lport, rport) == (8080, 443)  # both host order in the key
    assert M.decode_key(btf, raw) == {"family": "ipv4", "local": "127.0.0.1", "local_port": 8080,
                                      "remote": "127.0.0.2", "remote_port": 443}


def test_ipv4_mapped_ipv6_is_keyed_as_ipv4(btf):
    mapped = M.encode_key(btf, socket.AF_INET6, "::ffff:127.0.0.1", 5201, "::ffff:127.0.0.1", 40000)
    plain = M.encode_key(btf, socket.AF_INET, "127.0.0.1", 5201, "127.0.0.1", 40000)
    assert mapped == plain and len(plain) == 12
    v6 = M.encode_key(btf, socket.AF_INET6, "::1", 1, "fe80::1", 2)
    assert len(v6) == 36
    assert M.decode_key(btf, v6) == {"family": "ipv6", "local": "::1", "local_port": 1, "remote": "fe80::1",
                                "remote_port": 2}


@pytest.mark.parametrize("release, affected", [
    ("6.18.44-fc-v595", True), ("6.18.14", True), ("6.18.13", False), ("6.12.75", True),
    ("6.12.74-amd64", False), ("6.6.128", True), ("6.6.127", False), ("6.1.150", False),
    ("6.19.0", True), ("7.0.0-22-generic", True), ("5.15.0", False), ("garbage", False)])
def test_release_table(release, affected):
    assert release_affected(release) is affected


def test_missing_cgroup_is_a_usage_error(tmp_path):
    with pytest.raises(SockmapUsageError) as info:
        resolve_cgroup(str(tmp_path / "nope"))
    assert info.value.exit_code == 2 and "does not exist" in str(info.value)


def test_plain_directory_is_not_a_cgroup(tmp_path):
    with pytest.raises(SockmapUsageError, match="not a cgroup v2 directory"):
        resolve_cgroup(str(tmp_path))


def test_cgroup_v1_directory_is_refused():
    v1 = next((p for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids")
               if os.path.isdir(p) and MountTable().containing(os.path.realpath(p)).fstype == "cgroup"), None)
    if v1 is None:
        pytest.skip("no cgroup v1 hierarchy mounted here")
    with pytest.raises(SockmapUsageError, match="cgroup v1"):
        resolve_cgroup(v1)


def test_options_are_checked():
    assert Options(ports=[443, 80, 443]).ports == (80, 443)
    with pytest.raises(ConfigError, match="ports: not a TCP port: 70000"):
        Options(ports=[70000])
    with pytest.raises(ConfigError, match="skb_verdict: 'sometimes' is not one of auto, on, off"):
        Options(skb_verdict="sometimes")
    with pytest.raises(ConfigError, match="max_sockets: must be in 2..1048576, got 1"):
        Options.from_mapping({"max-sockets": 1})
    with pytest.raises(ConfigError, match="ipv6: expected bool, got str 'no'"):
        Options.from_mapping({"ipv6": "no"})


def test_registry_and_help_list_the_subcommands():
    assert TOOLS["sockmap"].module == "ebpfkit.tools.sockmap.cli"
    result = CliRunner().invoke(cli, ["sockmap", "--help"])
    assert result.exit_code == 0
    for sub in ("enable", "disable", "status", "run", "bench"):
        assert sub in result.output
    enable_help = CliRunner().invoke(cli, ["sockmap", "enable", "--help"]).output
    for opt in ("--cgroup", "--port", "--ipv6 / --no-ipv6", "--skb-verdict"):
        assert opt in enable_help


def test_bad_port_is_a_usage_error():
    result = CliRunner().invoke(cli, ["sockmap", "enable", "--port", "0"])
    assert result.exit_code == 2


def test_status_table_rows():
    from ebpfkit.tools.sockmap.cli import status_table

    record = {"cgroup": "/sys/fs/cgroup/unified/web", "ports": [80, 8080], "sockets": 4,
              "msgs_redirected": 10, "bytes_redirected": 1000, "msgs_fallback": 1, "bytes_fallback": 5,
              "add_failed": 0, "skb_verdict": True}
    table = status_table([record])
    row = table.to_dicts()[0]
    assert row["ports_text"] == "80,8080" and row["verdict_text"] == "yes" and row["sockets"] == 4
    assert "REDIR BYTES" in str(table)


def _p50(plain, minimal, ebpfkit, again=None):
    from ebpfkit.tools.sockmap.bench import AGAIN, Metric

    m = Metric("sockperf p50", "µs", True, 0.8)
    m.samples = {"plain": plain, "minimal": minimal, "ebpfkit": ebpfkit}
    if again is not None:
        m.samples[AGAIN] = again
    return m


def test_bench_ratios_pair_rounds_and_skip_failed_runs():
    m = _p50([10, 20, None], [6, 12, 6], [5, None, 9])
    assert m.ratios("ebpfkit") == [0.5]  # round 2 failed for ebpfkit, round 3 for plain
    assert m.ratios("ebpfkit", "minimal") == [5 / 6, 1.5]


def test_bench_not_worse_than_the_sample_is_judged_by_the_runs_own_noise():
    plain, minimal, slower = [10.0] * 5, [6.0] * 5, [6.3] * 5  # 5% above the sample
    assert _p50(plain, minimal, slower).ok() is False  # no A/A control: not above it at all
    quiet = _p50(plain, minimal, slower, again=[6.0, 6.01, 5.99, 6.0, 6.02])
    assert quiet.noise() < 0.01 and quiet.ok() is False  # identical setups agree: 5% is real
    noisy = _p50(plain, minimal, slower, again=[5.0, 7.0, 6.0, 5.4, 6.9])
    assert noisy.noise() > 0.05 and noisy.ok() is True  # identical setups differ more than that
    assert _p50(plain, minimal, [5.9] * 5).ok() is True
    assert _p50([10.0] * 5, minimal, [8.5] * 5, again=minimal).ok() is False  # 0.85x plain
