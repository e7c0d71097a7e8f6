"""Debian 11's 5.10, the oldest kernel ebpfkit supports (scripts/debian-kernel.sh bullseye,
which `scripts/setup.sh --test` runs): one boot (BPF-LSM on). 5.10 has BTF, BPF-LSM, kprobes,
fentry and ring buffers, but not task storage or bpf_get_current_task_btf (5.11), bpf_loop
(5.17), uprobe_multi (6.6) or tcx (6.6). Here: doctor says what it lacks and which tools it
stops, and runqlat, on the raw tracepoint it falls back to, counts a process's wakeups. The
guard, which keeps each task's trust in a hash by task here, is judged by test_guard_vm.py's
test marked for 5.10 (every LSM hook, then each operation by a trusted subject), in this boot.

iofsstat walks each file's path with bpf_loop (5.17) on every hook: doctor says it does not run
here, and it exits 3 naming what it needs.

Each tool's ground truth on 5.10: one check of each, taken from its host integration tests (the
same test, run here by one pytest inside this boot), for the tools that run here. All of the
host tests in a 5.10 guest: scripts/kernel_matrix.py (docs/kernel-matrix.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.vm(kernel="5.10", lsm=True, timeout=1200)


def _doctor() -> dict:
    run = subprocess.run([sys.executable, "-m", "ebpfkit", "--format", "json", "doctor"], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_doctor_names_what_510_lacks_and_the_tools_it_stops():
    report = _doctor()
    assert report["kernel"].startswith("5.10."), report["kernel"]
    features = report["features"]
    for present in ("btf", "kernel_btf", "tp_btf", "raw_tp", "kprobe", "fentry", "fexit", "lsm", "lsm_active"):
        assert features[present]["status"] == "supported", (present, features[present])
    for absent in ("task_storage", "uprobe_multi"):
        assert features[absent]["status"] == "unsupported", (absent, features[absent])
    tools = report["tools"]
    # without task storage, the guard keeps each task's trust in a hash by task (its denials:
    # test_guard_vm.py, whose hook-by-hook test runs in this boot too)
    assert tools["guard"]["runs"] is True and "hash by task" in tools["guard"]["hook"], tools["guard"]
    # without task storage, runqlat keeps its state in a hash by tid, on the raw tracepoint
    from ebpfkit.tools.runqlat.session import RAW_HOOK

    assert tools["runqlat"] == {"runs": True, "hook": RAW_HOOK}, tools["runqlat"]
    assert features["bpf_loop"]["status"] == "unsupported", features["bpf_loop"]
    assert tools["iofsstat"]["runs"] is False and "bpf_loop" in tools["iofsstat"]["hook"], tools["iofsstat"]


def test_runqlat_counts_the_wakeups_of_a_process_on_the_raw_tracepoint():
    """A process that sleeps 2 ms 100 times is woken and run (nearly) 100 times."""
    from ebpfkit.tools import runqlat

    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nsys.stdin.read(1)\n"
                              "for _ in range(100): time.sleep(0.002)\n"], stdin=subprocess.PIPE)
    try:
        with runqlat.open(per_process=True, pid=child.pid) as session:
            assert session.hook == runqlat.session.RAW_HOOK
            child.communicate(b"x", timeout=300)
            assert child.returncode == 0
            keyed = session.sample_keyed()
        assert set(keyed) == {child.pid}, keyed
        assert keyed[child.pid].total >= 90, keyed[child.pid].counts
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_iofsstat_exits_3_naming_bpf_loop():
    run = subprocess.run([sys.executable, "-m", "ebpfkit", "iofsstat", "1", "1"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 3, run.stderr
    assert "bpf_loop" in run.stderr and ">= 5.17" in run.stderr and "Traceback" not in run.stderr, run.stderr


# tool -> one of its host tests that checks it against ground truth the test made (runqlat's is
# above), for the tools whose 5.10 path differs most (other record layouts, fallbacks for
# missing helpers, perf-event uprobes). The others' (runqslower, runqlen, cpudist, offcputime,
# softirqs, sockmap, xdp, tc, the exporter) run in the 5.10 column of scripts/kernel_matrix.py
# with every other host test: each takes ~20 s in this (TCG) guest, and here they would take
# the suite past its 45 minutes.
T = "tests/integration/tools"
GROUND_TRUTH = {
    "memleak": [f"{T}/memleak/test_memleak.py::test_one_thread_by_pid"],
    "iotrace": [f"{T}/iotrace/test_iotrace.py::test_direct_writes_are_joined_per_request"],
    "detect": [f"{T}/detect/test_baits.py::test_ransomware_is_killed_at_the_first_bait[in-place]"],
    "pingtrace": [f"{T}/pingtrace/test_pingtrace.py::test_two_namespaces_every_checkpoint_in_order_adding_up_to_the_rtt"],
}


@pytest.fixture(scope="module")
def host_checks(tmp_path_factory) -> dict:
    """{test id: (outcome, message)} of every GROUND_TRUTH test, run by one pytest here."""
    junit = tmp_path_factory.mktemp("host-checks") / "junit.xml"
    ids = [test for tests in GROUND_TRUTH.values() for test in tests]
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=short",
                          f"--junitxml={junit}", *ids], capture_output=True, text=True, timeout=1500)
    results = {}
    for case in ET.parse(junit).iter("testcase"):
        test = case.get("classname").replace(".", "/") + ".py::" + case.get("name")
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        outcome = "failed" if bad is not None else "skipped" if skipped is not None else "passed"
        message = (bad if bad is not None else skipped).get("message", "") if outcome != "passed" else ""
        results[test] = (outcome, message)
    assert results, run.stdout[-3000:] + run.stderr[-2000:]
    return results


@pytest.mark.parametrize("tool", sorted(GROUND_TRUTH))
def test_the_tools_ground_truth_check_passes_on_510(host_checks, tool):
    for test in GROUND_TRUTH[tool]:
        assert host_checks.get(test, ("not run", ""))[0] == "passed", (test, host_checks.get(test))
