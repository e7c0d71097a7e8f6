"""detect's bait files against the real kernel: a ransomware simulator walking a directory the
test fills must be killed at the first bait it reaches, having touched at most one real file;
every call that changes a bait (open for writing, creat, truncate, ftruncate, rename from and
onto it, unlink, and the writes through an fd opened before detect started) kills its caller
before the call returns, and reading one does nothing."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import RunningTool, alerts_within, ek
from ebpfkit.tools import detect

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

BAIT_RULE = "Bait file touched"
BAIT_NAME = "!0000-budget.xlsx"   # sorts before the files beside it

SIMULATOR = Path(__file__).parents[3] / "ransomware.py"


def fill(top) -> dict[str, str]:
    """Twelve real files in a share of three directories, a bait in each: {path: sha256}."""
    real = {}
    for sub in ("", "finance", "hr"):
        d = top / sub
        d.mkdir(parents=True, exist_ok=True)
        for i in range(4):
            path = d / f"report-{i}.txt"
            path.write_bytes(os.urandom(4096))
            real[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return real


def rules_for(tmp_path, top, extra: str = "") -> str:
    paths = ", ".join(f'"{top / sub / BAIT_NAME}"' for sub in ("", "finance", "hr"))
    path = tmp_path / "baits.yaml"
    path.write_text(f"- bait: share\n  paths: [{paths}]\n{extra}")
    return str(path)


def touched(real: dict[str, str]) -> list[str]:
    """The real files no longer as they were (changed, renamed or removed)."""
    changed = []
    for path, digest in real.items():
        try:
            with open(path, "rb") as f:
                same = hashlib.sha256(f.read()).hexdigest() == digest
        except FileNotFoundError:
            same = False
        if not same:
            changed.append(path)
    return changed


@pytest.mark.parametrize("mode", ["in-place", "rename-first", "copy-unlink"])
def test_ransomware_is_killed_at_the_first_bait(tmp_path, mode):
    top = tmp_path / "share"
    real = fill(top)
    with detect.open(rules=(rules_for(tmp_path, top),)) as session:
        assert len(session.baits) == 3 and all(b.planted for b in session.baits)
        run = subprocess.run([sys.executable, str(SIMULATOR), mode, str(top)], capture_output=True, text=True,
                             timeout=60)
        alerts = alerts_within(session, 1.0, BAIT_RULE)
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    assert len(touched(real)) <= 1, touched(real)
    first_bait = str(top / BAIT_NAME)
    assert run.stdout.splitlines()[-1] == first_bait, "it stopped at the first bait it reached"
    assert len(alerts) == 1, alerts
    alert = alerts[0]
    assert (alert.action, alert.event["evt.killed"]) == ("kill", "true")
    assert alert.event["fd.name"] == first_bait and alert.event["bait.name"] == "share"
    assert alert.techniques == ("T1486", "T1485")
    # the planted baits are gone with the session (the first one, renamed, stays as .locked)
    assert not any(name == BAIT_NAME for _, _, files in os.walk(top) for name in files)


def test_ransomware_pid_and_process_are_named(tmp_path):
    top = tmp_path / "share"
    fill(top)
    with detect.open(rules=(rules_for(tmp_path, top),)) as session:
        proc = subprocess.Popen([sys.executable, str(SIMULATOR), "in-place", str(top)], stdout=subprocess.PIPE)
        proc.communicate(timeout=60)
        alerts = alerts_within(session, 1.0, BAIT_RULE)
    assert proc.returncode == -signal.SIGKILL
    assert [a.pid for a in alerts] == [proc.pid]
    assert alerts[0].event["evt.type"] == "openat" and alerts[0].event["proc.name"].startswith("python")


BAIT = "BAIT"  # stands for the bait's path in the commands below
CREAT_X86_64 = 85  # creat(2): glibc's creat() calls openat, so the syscall is made by number
CALLS = {
    "open for writing": ("openat", [sys.executable, "-c", f"open({BAIT!r}, 'ab')"]),
    "open with O_TRUNC": ("openat", [sys.executable, "-c",
                                     f"import os; os.open({BAIT!r}, os.O_RDONLY | os.O_TRUNC)"]),
    "creat": ("creat", [sys.executable, "-c", f"import ctypes; ctypes.CDLL(None).syscall({CREAT_X86_64}, "
                                              f"{BAIT!r}.encode(), 0o644)"]),
    "truncate": ("truncate", [sys.executable, "-c", f"import os; os.truncate({BAIT!r}, 0)"]),
    "truncate(1)": ("openat", ["truncate", "-s", "0", BAIT]),
    "rename from": ("renameat2", ["mv", BAIT, BAIT + ".locked"]),
    "rename onto": ("renameat2", ["mv", "-f", "OTHER", BAIT]),
    "unlink": ("unlinkat", ["rm", "-f", BAIT]),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_each_call_that_changes_a_bait_kills_its_caller(tmp_path, call):
    if call == "creat" and os.uname().machine != "x86_64":
        pytest.skip("creat(2) by its x86_64 number")
    evt_type, argv = CALLS[call]
    other = tmp_path / "other.txt"
    other.write_text("not a bait")
    bait = tmp_path / BAIT_NAME
    argv = [a.replace(BAIT, str(bait)).replace("OTHER", str(other)) for a in argv]
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n')
    with detect.open(rules=(str(rules),)) as session:
        run = subprocess.run(argv, capture_output=True, timeout=30)
        alerts = alerts_within(session, 1.0, BAIT_RULE)
    assert run.returncode == -signal.SIGKILL, (call, run.returncode, run.stderr)
    assert [(a.event["evt.type"], a.event["evt.killed"]) for a in alerts] == [(evt_type, "true")]


def holding_open(bait: Path, code: str) -> subprocess.Popen:
    """A process that opens ``bait`` read-write, says so, and runs ``code`` (fd: the bait's fd)
    when told on its stdin."""
    holder = subprocess.Popen([sys.executable, "-c", f"import os, sys; fd = os.open({str(bait)!r}, os.O_RDWR); "
                               f"print('open', flush=True); sys.stdin.readline(); {code}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "open\n"
    return holder


BEFORE_SESSION = {  # a call through an fd opened before the session, by Python: the code, and
    # whether the bait keeps its bytes (a write sees the pending SIGKILL and writes nothing;
    # ftruncate is made, then its caller dies)
    "ftruncate": ("os.ftruncate(fd, 0)", False),
    "write": ("os.write(fd, b'locked')", True),
    "pwrite64": ("os.pwrite(fd, b'locked', 0)", True),
    "writev": ("os.writev(fd, [b'loc', b'ked'])", True),
    # glibc's pwritev() makes pwritev2: pwritev(2) by its x86_64 number, an iovec built by hand
    "pwritev": ("import ctypes; b = ctypes.create_string_buffer(b'locked'); "
                "iov = (ctypes.c_void_p * 2)(ctypes.addressof(b), 6); ctypes.CDLL(None).syscall(296, fd, iov, 1, 0, 0)",
                True),
    "pwritev2": ("os.pwritev(fd, [b'loc', b'ked'], 0, os.RWF_DSYNC)", True),
}


@pytest.mark.parametrize("call", list(BEFORE_SESSION))
def test_a_call_through_an_fd_opened_before_the_session_kills(tmp_path, call):
    if call == "pwritev" and os.uname().machine != "x86_64":
        pytest.skip("pwritev(2) by its x86_64 number")
    code, intact = BEFORE_SESSION[call]
    bait = tmp_path / BAIT_NAME
    bait.write_bytes(b"x" * 1000)
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n  plant: false\n')
    holder = holding_open(bait, code)
    try:
        with detect.open(rules=(str(rules),)) as session:
            assert [b.planted for b in session.baits] == [False]
            holder.stdin.write("go\n")
            holder.stdin.flush()
            holder.wait(timeout=30)
            alerts = alerts_within(session, 1.0, BAIT_RULE)
    finally:
        holder.kill()
    assert holder.returncode == -signal.SIGKILL
    assert [(a.event["evt.type"], a.event["evt.killed"]) for a in alerts] == [(call, "true")]
    assert bait.exists(), "an adopted bait stays when the session ends"
    assert (bait.read_bytes() == b"x" * 1000) == intact, bait.read_bytes()[:20]


def test_writes_are_reported_once_per_process_and_file(tmp_path):
    """With action alert: a process writing 5 times through an fd opened before the session is
    one alert (its first write); one that opens the bait for writing under the session, then
    writes, is one alert (the open)."""
    bait = tmp_path / BAIT_NAME
    bait.write_bytes(b"x" * 1000)
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n  plant: false\n')
    holder = holding_open(bait, "[os.write(fd, b'y') for _ in range(5)]")
    try:
        with detect.open(rules=(str(rules),), action="alert") as session:
            holder.stdin.write("go\n")
            holder.stdin.flush()
            holder.wait(timeout=30)
            opener = subprocess.Popen([sys.executable, "-c", f"f = open({str(bait)!r}, 'ab')\n"
                                       "for _ in range(5): f.write(b'z'); f.flush()"])
            opener.wait(timeout=30)
            alerts = alerts_within(session, 1.0, BAIT_RULE)
    finally:
        holder.kill()
    assert holder.returncode == 0 and opener.returncode == 0
    assert [(a.pid, a.event["evt.type"]) for a in alerts] == [(holder.pid, "write"), (opener.pid, "openat")]
    assert bait.read_bytes() == b"y" * 5 + b"x" * 995 + b"z" * 5  # at its start, and appended


def test_reading_a_bait_raises_nothing(tmp_path):
    bait = tmp_path / BAIT_NAME
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n')
    with detect.open(rules=(str(rules),)) as session:
        content = bait.read_bytes()
        runs = [subprocess.run(argv, capture_output=True, timeout=30) for argv in
                (["cat", str(bait)], ["stat", str(bait)], ["cp", str(bait), str(tmp_path / "copy")],
                 ["ls", "-l", str(tmp_path)])]
        alerts = alerts_within(session, 1.0, BAIT_RULE)
    assert [r.returncode for r in runs] == [0, 0, 0, 0]
    assert len(content) > 0 and alerts == []


def test_action_alert_reports_without_killing_and_the_cli_says_what_it_watches(tmp_path):
    bait = tmp_path / BAIT_NAME
    missing = tmp_path / "nowhere.xlsx"
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n- bait: adopted\n  paths: ["{missing}"]\n  plant: false\n')
    tool = RunningTool("-v", "--format", "json", "detect", "run", "--rules", str(rules), "--action", "alert")
    try:
        assert bait.exists(), "planted before the banner"
        writer = subprocess.run([sys.executable, "-c", f"open({str(bait)!r}, 'ab').write(b'x')"], timeout=30)
        time.sleep(0.5)
        stdout = tool.stop()
    finally:
        tool.kill()
    assert writer.returncode == 0
    assert tool.returncode == 0, tool.stderr
    alerts = [a for a in map(json.loads, stdout.splitlines()) if a["rule"] == BAIT_RULE]
    assert [(a["action"], a["event"]["evt.killed"], a["event"]["evt.type"]) for a in alerts] == [
        ("alert", "false", "openat")]
    assert f"{missing} does not exist (plant: false): not watched" in tool.stderr
    assert "baits: 1 files (1 planted); alerts only" in tool.stderr
    assert not bait.exists(), "the planted bait is removed at the end"


KILL_RULE = "Kill victims"


def victim_rules(tmp_path) -> tuple[str, str]:
    """A copy of sleep named ekvictim, and a rule that kills it at its exec: a condition the
    kernel cannot decide alone (proc.name), so user space kills, once the alert is raised."""
    victim = tmp_path / "ekvictim"
    victim.write_bytes(Path("/bin/sleep").read_bytes())
    victim.chmod(0o755)
    rules = tmp_path / "kill.yaml"
    rules.write_text(f"- rule: {KILL_RULE}\n  condition: evt.type = execve and proc.name = ekvictim\n"
                     "  output: victim %proc.pid\n  priority: WARNING\n  action: kill\n")
    return str(victim), str(rules)


@pytest.mark.parametrize("action", [None, "alert"])
def test_a_kill_rule_on_anything_else_kills_from_user_space(tmp_path, action):
    victim, rules = victim_rules(tmp_path)
    with detect.open(rules=(rules,), builtin=False, action=action) as session:
        assert session.killing_here == (set() if action == "alert" else {KILL_RULE})
        target = subprocess.Popen([victim, "30"])
        bystander = subprocess.Popen(["sleep", "30"])
        try:
            alerts = alerts_within(session, 1.5, KILL_RULE)
            if action is None:
                assert target.wait(timeout=5) == -signal.SIGKILL
            assert bystander.poll() is None, "a process no rule matched is left alone"
        finally:
            for proc in (target, bystander):
                proc.kill()
                proc.wait()
    assert [(a.pid, a.action, a.killed) for a in alerts] == (
        [(target.pid, "kill", (target.pid,))] if action is None else [(target.pid, "alert", ())])


def test_a_user_space_kill_in_the_cli(capsys, tmp_path):
    victim, rules = victim_rules(tmp_path)
    assert ek(capsys, "detect", "check", rules)[0] == 0
    tool = RunningTool("-v", "--format", "json", "detect", "run", "--no-builtin", "--rules", rules,
                       "--no-alert-log")
    try:
        target = subprocess.Popen([victim, "30"])
        returncode = target.wait(timeout=30)
        time.sleep(0.3)
        stdout = tool.stop()
    finally:
        tool.kill()
    assert returncode == -signal.SIGKILL
    assert tool.returncode == 0, tool.stderr
    assert f"kill from here, once the alert is raised: {KILL_RULE}" in tool.stderr
    alerts = [a for a in map(json.loads, stdout.splitlines()) if a["rule"] == KILL_RULE]
    assert [(a["pid"], a["action"], a["killed"]) for a in alerts] == [(target.pid, "kill", [target.pid])]


def test_a_bait_that_cannot_be_planted_exits_2(capsys, tmp_path):
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: lost\n  paths: ["{tmp_path}/no/such/dir/{BAIT_NAME}"]\n')
    rc, _, err = ek(capsys, "detect", "run", "--rules", str(rules))
    assert rc == 2
    assert f"bait 'lost' ({rules}:1): cannot plant" in err and "no directory" in err


def test_a_denied_open_is_reported_and_killed_all_the_same(tmp_path):
    """An open the kernel refuses (here by permissions; in the VM by the guard's LSM programs)
    leaves no file to key the bait by: it is matched by name, with the error."""
    import shutil
    import tempfile

    share = tempfile.mkdtemp(prefix="ebpfkit-test-baits-")  # pytest's tmp_path is closed to others
    try:
        os.chmod(share, 0o755)
        bait = os.path.join(share, BAIT_NAME)
        rules = tmp_path / "baits.yaml"
        rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n')
        with detect.open(rules=(str(rules),)) as session:
            run = subprocess.run(["/usr/bin/python3", "-c", f"open({bait!r}, 'r+b')"], user=65534, capture_output=True,
                                 timeout=30)
            alerts = alerts_within(session, 1.0, BAIT_RULE)
    finally:
        shutil.rmtree(share)
    assert run.returncode == -signal.SIGKILL, run.stderr
    assert [(a.event["evt.res"], a.event["evt.killed"], a.event["fd.name"], a.event["user.uid"]) for a in alerts] == [
        ("EACCES", "true", bait, 65534)]


def test_sigkill_with_baits_leaves_nothing_attached_and_the_bait_for_the_next_run(tmp_path):
    from helpers import bpf_objects_held_by, still_in_kernel

    bait = tmp_path / BAIT_NAME
    rules = tmp_path / "baits.yaml"
    rules.write_text(f'- bait: one\n  paths: ["{bait}"]\n')
    tool = RunningTool("detect", "run", "--rules", str(rules))
    try:
        held = bpf_objects_held_by(tool.pid)
        tool.stop(signal.SIGKILL)
    finally:
        tool.kill()
    assert tool.returncode == -signal.SIGKILL
    assert held and still_in_kernel(held) == set()
    assert bait.exists(), "a killed run cannot remove what it planted"
    with detect.open(rules=(str(rules),)) as session:  # the next run adopts it, and leaves it
        assert [b.planted for b in session.baits] == [False]
    assert bait.exists()
