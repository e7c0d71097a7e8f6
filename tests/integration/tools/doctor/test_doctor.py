"""`ebpfkit doctor` against what kernel-facts.md says this host allows, through the real CLI."""

import json

import pytest
from click.testing import CliRunner

from ebpfkit.cli import cli
from ebpfkit.engine import features
from outputs import csv_tables, logged

pytestmark = pytest.mark.integration


def _doctor(*args):
    result = CliRunner().invoke(cli, [*args, "doctor"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_json_report_matches_what_the_kernel_allows():
    report = json.loads(_doctor("--format", "json"))
    status = {name: f["status"] for name, f in report["features"].items()}
    # what the kernel itself decides, re-probed independently of the report
    for name in ("kprobe", "fentry", "fexit", "lsm"):
        assert status[name] == features.probe(name).status
    assert report["kernel"] == features.kernel_release()
    if features.probe("kprobe").status == "unsupported":
        assert "KPROBES" in report["features"]["kprobe"]["reason"]
    for name in ("btf", "tracepoint", "raw_tp", "tp_btf", "uprobe", "perf_event", "xdp_native",
                 "xdp_generic", "tc", "sockops", "sk_msg", "cgroup_skb", "cgroup_sock_addr"):
        assert status[name] == "supported", (name, report["features"][name])
    assert report["tools"]["runqlat"]["runs"] is True
    names = list(report["features"])  # BCC's probe lives outside the engine, listed where it always was
    assert names[names.index("type_walk") + 1] == "bcc", names


def test_table_has_one_row_per_probe_and_fits_100_columns():
    text = _doctor("--no-color")
    for probe in features.probe_all().values():
        assert probe.label in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "runqlat" in text


def test_fix_mounts_what_is_missing():
    result = CliRunner().invoke(cli, ["doctor", "--fix"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert features.mounted_tracefs()
    assert features.mounted_bpffs()


def test_csv_and_log_say_what_the_kernel_allows(tmp_path):
    log = tmp_path / "doctor.log"
    probes = features.probe_all()
    feature_rows, tool_rows = csv_tables(_doctor("--log", str(log), "--format", "csv"))
    mark = {"supported": "yes", "unsupported": "no", "unknown": "?"}
    assert {r["feature"]: r["available"] for r in feature_rows} == \
        {p.label: mark[p.status] for p in probes.values()}
    assert {r["tool"]: r["runs"] for r in tool_rows}["runqlat"] == "yes"
    (report,) = logged(log, "doctor")  # the whole report, though the run printed CSV
    assert {name: f["status"] for name, f in report["features"].items()} == \
        {name: p.status for name, p in probes.items()}
    assert report["kernel"] == features.kernel_release() and report["tools"]["runqlat"]["runs"] is True


def test_a_session_reports_the_same_as_data():
    """doctor.report() as a notebook calls it: the probes are the engine's, re-probed on their
    own; every tool with hooks has a status, and the one that runs names its first hook whose
    features this kernel has."""
    from ebpfkit.tools import TOOLS, doctor

    found = doctor.report()
    assert found.kernel == features.kernel_release() and found.mounted == []
    for name in ("kprobe", "fexit", "lsm", "tracepoint", "tp_btf"):
        assert found.probes[name].status == features.probe(name).status
    assert {t.tool for t in found.tools} == {name for name, info in TOOLS.items() if info.hooks}
    for status in found.tools:
        usable = [label for label, needs in TOOLS[status.tool].hooks
                  if all(features.probe(n).supported for n in needs)]
        assert status.runs == bool(usable), status
        assert status.hook == usable[0] if usable else status.hook.startswith("needs "), status
    assert found.btf["kernel_btf"] == features.probe("kernel_btf").supported


def test_a_bad_setting_is_one_error_from_every_entry():
    from ebpfkit.errors import ConfigError
    from ebpfkit.tools import doctor

    for build in (lambda: doctor.Config(fix="yes"), lambda: doctor.report(fix="yes"),
                  lambda: doctor.Config.from_mapping({"fix": "yes"})):
        with pytest.raises(ConfigError, match="fix: expected bool, got str 'yes'"):
            build()
