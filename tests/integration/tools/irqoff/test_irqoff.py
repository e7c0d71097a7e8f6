"""irqoff on the host kernel: it picks the best mode the kernel allows (exact with preemptirq
tracepoints, NMI with a PMU, else software: the last on this project's hosts) and says so (and
doctor shows it), runs for its DURATION, writes -f LOGFILE
instead of stdout, and leaves nothing in the kernel however it ends. What it reports is
checked in the VM (tests/vm/test_irqoff_vm.py), where a test module makes sections of known
length; the host allows no modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import ek, ek_json, signalled_run_leaves_nothing

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

SOFTWARE = "hrtimer sampling: cpu-clock ticks (stack when the tick ran)"


def best_mode(features: dict) -> tuple[str, str]:
    """(mode, hook) irqoff's auto mode must pick, from doctor's features: the first of the
    tool's hook choices (exact, nmi, software) whose features are all supported."""
    from ebpfkit.tools import TOOLS

    for mode, (label, needs) in zip(("exact", "nmi", "software"), TOOLS["irqoff"].hooks):
        if all(features[n]["status"] == "supported" for n in needs):
            return mode, label
    raise AssertionError(f"irqoff cannot run here: {features}")


@pytest.mark.parametrize("args, message", [
    (["-t", "0"], "must be greater than 0, got 0.0"),
    (["-t", "-5"], "must be greater than 0, got -5.0"),
    (["-t", "abc"], "'abc' is not a valid float"),
    (["0"], "0 is not in the range x>0"),
    (["--mode", "fast"], "'fast' is not one of 'auto', 'exact', 'nmi', 'software'"),
    (["--log-file-size", "0"], "too small"),
    (["--log-file-backups", "-1"], "-1 is not in the range x>=0"),
    (["--bogus"], "No such option"),
])
def test_bad_options_exit_2(capsys, args, message):
    rc, _, err = ek(capsys, "irqoff", *args)
    assert rc == 2 and message in err and "Traceback" not in err, err


def test_doctor_shows_the_mode_it_would_pick(capsys):
    report = ek_json(capsys, "doctor")
    _, hook = best_mode(report["features"])
    assert report["tools"]["irqoff"] == {"runs": True, "hook": hook}, report["tools"]["irqoff"]


def test_it_runs_for_its_duration_in_the_best_mode_into_a_rotating_log_file(tmp_path, capsys):
    """With a 10 µs threshold every mode sees sections within a second (the sampling modes'
    own tick jitter is longer): they go to the log, not stdout, as records of at least the
    threshold on this machine's CPUs, and the log rotates at its size, keeping one backup."""
    mode, hook = best_mode(ek_json(capsys, "doctor")["features"])
    log = tmp_path / "irqoff.log"
    run = subprocess.run([sys.executable, "-m", "ebpfkit", "--format", "json", "irqoff", "-t", "0.01", "-f", str(log),
                          "--log-file-size", "4K", "--log-file-backups", "1", "2"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, NO_COLOR="1"))
    assert run.returncode == 0, run.stderr
    assert f"irqoff mode: {mode}: {hook}" in run.stderr, run.stderr
    assert "for 2 s" in run.stderr and run.stdout == "", (run.stdout, run.stderr)
    files = sorted(tmp_path.glob("irqoff.log*"))
    assert [f.name for f in files] == ["irqoff.log", "irqoff.log.1"], files
    assert all(f.stat().st_size <= 4096 for f in files), [f.stat().st_size for f in files]
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert records
    cpus = os.cpu_count()
    for record in records:
        assert record["kind"] in ("hardirq", "softirq") and 0 <= record["cpu"] < cpus, record
        assert record["lat_us"] >= 10 and record["tid"] >= 0 and isinstance(record["stack"], list), record


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_leaves_nothing_attached(sig):
    signalled_run_leaves_nothing(["irqoff", "--mode", "software", "-t", "50"], sig)
