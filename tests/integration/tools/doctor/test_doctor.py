"""`ebpfkit doctor` against what kernel-facts.md says this host allows, through the real CLI."""

import json
import os
import subprocess
import sys

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


# one program per hook, loaded and attached through the public engine (not the probes' own
# hand-built instructions): the kernel's answer, got independently of the report
HOOK_PROGRAMS = {
    "tracepoint": 'SEC("tp/syscalls/sys_enter_getpid") int p(void *ctx) { return 0; }',
    "raw_tp": 'SEC("raw_tp/sched_switch") int p(void *ctx) { return 0; }',
    "tp_btf": 'SEC("tp_btf/sched_switch") int BPF_PROG(p) { return 0; }',
    "kprobe": 'SEC("kprobe/vfs_read") int BPF_KPROBE(p) { return 0; }',
    "fentry": 'SEC("fentry/vfs_read") int BPF_PROG(p) { return 0; }',
    "fexit": 'SEC("fexit/vfs_read") int BPF_PROG(p) { return 0; }',
    "lsm": 'SEC("lsm/file_open") int BPF_PROG(p, struct file *file, int ret) { return ret; }',
}


def _attaches(feature: str) -> bool:
    import ebpfkit
    from ebpfkit.errors import EbpfkitError

    text = ('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n#include <bpf/bpf_tracing.h>\n'
            f'{HOOK_PROGRAMS[feature]}\nchar LICENSE[] SEC("license") = "GPL";\n')
    try:
        with ebpfkit.compile(text=text, name=f"doctor_{feature}.bpf.c").load() as obj:
            obj.programs["p"].attach().close()
        return True
    except EbpfkitError:
        return False


def _active_lsms() -> list[str]:
    try:
        with open("/sys/kernel/security/lsm") as f:
            return f.read().strip().split(",")
    except OSError:
        return []


def test_json_report_matches_what_the_kernel_allows():
    """doctor, in a process of its own (no probe cached here), against what this kernel does
    when a real program is loaded and attached on each hook: whatever kernel the suite runs on."""
    result = subprocess.run([sys.executable, "-m", "ebpfkit", "--format", "json", "doctor"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    status = {name: f["status"] for name, f in report["features"].items()}
    for name in HOOK_PROGRAMS:
        truth = _attaches(name) and (name != "lsm" or "bpf" in _active_lsms())
        assert status[name] == ("supported" if truth else "unsupported"), (name, report["features"][name])
    if not os.path.isdir("/sys/bus/event_source/devices/kprobe"):
        assert "KPROBES" in report["features"]["kprobe"]["reason"]
    assert status["btf"] == ("supported" if os.path.exists("/sys/kernel/btf/vmlinux") else "unsupported")
    assert status["uprobe"] == ("supported" if os.path.isdir("/sys/bus/event_source/devices/uprobe")
                                else "unsupported")
    assert report["kernel"] == os.uname().release
    # every tool is listed, and runs exactly when one of its hooks has all it needs in this report
    from ebpfkit.tools import TOOLS

    for info in TOOLS.values():
        if info.hooks:
            usable = any(all(status[n] == "supported" for n in needs) for _, needs in info.hooks)
            assert report["tools"][info.name]["runs"] == usable, (info.name, report["tools"][info.name])
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
