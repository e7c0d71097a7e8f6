"""On this host `guard start` must refuse with the exact BPF-LSM reason (exit 3) and leave
nothing pinned. The host lists bpf in /sys/kernel/security/lsm but refuses LSM programs
(EPERM), so the reason names that; a kernel without bpf in the list gets the other one."""

import json
import os
import subprocess
import sys

import pytest

from ebpfkit.engine import features
from ebpfkit.tools.guard import core

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to probe BPF-LSM")


def run(*args):
    return subprocess.run([sys.executable, "-m", "ebpfkit", "guard", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(features.probe("lsm").supported and features.lsm_active().supported,
                    reason="this kernel runs BPF-LSM programs: the VM tests cover start")
def test_start_refuses_without_bpf_lsm(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"protect: [{tmp_path}]\n")
    result = run("start", str(policy))
    assert result.returncode == 3, result.stderr
    if features.lsm_active().supported:
        assert "refuses LSM programs" in result.stderr and "EPERM" in result.stderr
    else:
        assert "/sys/kernel/security/lsm lacks 'bpf'" in result.stderr
        assert "lsm=" in result.stderr  # how to enable it
    assert "VM harness" in result.stderr or "lsm=" in result.stderr
    assert not os.path.exists(core.PIN_DIR)
    assert json.loads(run("status", "--format", "json").stdout) == {"state": "stopped"}
    assert "stopped" in run("status").stdout.split()


def test_invalid_policy_exits_2_before_probing(tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text("mode: loud\nprotect: [/etc]\n")
    result = run("start", str(policy))
    assert result.returncode == 2
    assert f"{policy}:1: mode must be one of" in result.stderr


def test_check_reports_what_the_policy_resolves_to_in_every_format_and_in_the_log(tmp_path):
    """`guard check` needs no BPF-LSM: the keys it resolves (one file, one trusted program,
    one process) are the same in JSON, CSV and the --log file."""
    from outputs import csv_tables, logged

    target, admin = tmp_path / "secret", tmp_path / "admin"
    target.write_text("s")
    admin.write_bytes(b"")
    admin.chmod(0o755)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"protect: [{target}]\ntrust: [{admin}]\nprocesses: [{admin}]\n")
    log = tmp_path / "guard.jsonl"
    answers = {}
    for fmt in ("json", "csv", "table"):
        result = subprocess.run([sys.executable, "-m", "ebpfkit", "--log", str(log), "--format", fmt,
                                 "guard", "check", str(policy)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        answers[fmt] = result
    record = json.loads(answers["json"].stdout)
    assert record["valid"] and record["protect"][0]["path"] == str(target)
    # protected: the file, the trusted program (write-protected) and the guard's own state
    resolved = record["resolved"]
    assert resolved["trusted"] == 1 and resolved["processes"] == 1 and resolved["protected"] >= 2
    (rows,) = csv_tables(answers["csv"].stdout)
    fields = {r["field"]: r["value"] for r in rows}
    assert fields["state"] == "valid" and fields["trusted"] == "1" and fields["policy"] == str(policy)
    assert fields["protected"] == str(resolved["protected"])
    assert f"{resolved['protected']} protected, 1 trusted, 1 processes" in answers["table"].stderr
    assert "valid" in answers["table"].stdout.split()
    kept = logged(log, "guard.check")
    assert len(kept) == 3 and all(r["resolved"] == record["resolved"] for r in kept)
