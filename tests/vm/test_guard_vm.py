"""guard in a VM kernel with BPF-LSM (one boot for the module): the pinned guard denies
(EPERM) and logs every file operation on protected objects to untrusted subjects, trust
follows (dev, ino) and inheritance, protected processes survive, audit mode only logs,
and the pins outlive a SIGKILLed agent until `guard stop`."""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.vm(lsm=True, timeout=1800)

PIN_DIR = "/sys/fs/bpf/ebpfkit/guard"


def cli(state, *args, check=True):
    env = {**os.environ, "EBPFKIT_GUARD_STATE": str(state)}
    result = subprocess.run([sys.executable, "-m", "ebpfkit", "guard", *args], env=env,
                            capture_output=True, text=True, timeout=900)
    if check:
        assert result.returncode == 0, result.stderr + result.stdout
    return result


@contextlib.contextmanager
def guard(tmp_path, policy_text, *flags):
    state = tmp_path / "state"
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text)
    cli(state, "start", str(policy), *flags)
    try:
        yield state
    finally:
        _debug_dump(state, policy_text)
        cli(state, "stop", check=False)
        assert not os.path.exists(PIN_DIR)


def _debug_dump(state, policy_text):
    """What the kernel holds vs what stat() says: shown when a test fails."""
    import yaml
    from ebpfkit.guard import core

    print("status:", cli(state, "status", check=False).stdout)
    with contextlib.suppress(Exception), core.pinned("protected") as fd:
        print("protected keys:", [core.KEY.unpack(k) for k in core._keys(fd)])
    doc = yaml.safe_load(policy_text)
    for path in doc.get("protect", []) + doc.get("processes", []):
        st = os.stat(path)
        print("stat", path, "dev", os.major(st.st_dev), os.minor(st.st_dev), "ino", st.st_ino,
              "key", core.key_of(path))
    print(subprocess.run(["sh", "-c", "grep -E ' /tmp | / ' /proc/mounts"], capture_output=True, text=True).stdout)
    with contextlib.suppress(OSError):
        print("log:", (state / "guard.log").read_text()[:4000])


def log_lines(state, minimum=1, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            lines = [json.loads(line) for line in (state / "guard.log").read_text().splitlines()]
        except FileNotFoundError:
            lines = []
        if len(lines) >= minimum or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


@pytest.fixture
def fs(tmp_path):
    """A fresh tmpfs: the guest's /tmp is a non-samefs overlay, where stat()'s (st_dev,
    st_ino) are not the kernel inode's (s_dev, i_ino) the hooks see."""
    path = tmp_path / "fs"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "guardtest", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def denied(fn, *args):
    with pytest.raises(PermissionError) as exc:
        fn(*args)
    assert exc.value.errno == errno.EPERM


def test_file_operations_denied_and_logged(tmp_path, fs):
    base = fs / "data"
    d = base / "dir"
    (d / "sub").mkdir(parents=True)
    f = base / "file"
    f.write_text("secret")
    inner = d / "sub" / "inner"
    inner.write_text("inner")
    (base / "hard").hardlink_to(f)
    (fs / "sym").symlink_to(f)
    early = os.open(f, os.O_RDWR)  # opened before the guard: writes go through file_permission
    bind = fs / "bind"
    bind.mkdir()
    try:
        with guard(tmp_path, f"protect: [{f}, {d}]\n") as state:
            for target in (f, inner, base / "hard", fs / "sym", f"/proc/self/root{f}"):
                denied(os.open, target, os.O_WRONLY)
            denied(os.open, f, os.O_RDONLY | os.O_TRUNC)
            denied(os.truncate, f, 0)
            denied(os.truncate, inner, 0)
            denied(os.unlink, f)
            denied(os.unlink, inner)
            denied(os.rename, f, base / "moved")
            denied(os.rename, d, base / "moved")        # a protected directory
            denied(os.rename, base, fs / "moved")  # an ancestor of both
            denied(os.rename, fs / "sym", f)       # replacing it (rename target)
            denied(os.link, f, base / "hard2")
            denied(os.chmod, f, 0o777)
            denied(os.chown, inner, 1, 1)
            denied(os.write, early, b"x")
            with pytest.raises(PermissionError):
                mmap.mmap(early, 0, mmap.MAP_SHARED, mmap.PROT_WRITE | mmap.PROT_READ)
            subprocess.run(["mount", "--bind", str(d), str(bind)], check=True)
            try:
                denied(os.open, bind / "sub" / "inner", os.O_WRONLY)
            finally:
                subprocess.run(["umount", str(bind)], check=True)
            # not protected: reads, and files next to the protected ones
            assert f.read_text() == "secret"
            (base / "free").write_text("ok")
            os.unlink(base / "free")
            lines = log_lines(state, 20)
            out = cli(state, "status").stdout
            assert "running" in out and "lost" in out
        hooks = {line["hook"] for line in lines}
        assert {"file_open", "path_truncate", "inode_unlink", "inode_rename", "inode_link",
                "inode_setattr", "file_permission", "mmap_file"} <= hooks, hooks
        assert all(line["verdict"] == "denied" for line in lines)
        assert len(lines) >= 20, lines
        first = lines[0]
        assert first["pid"] == os.getpid() and first["exe"] == os.readlink("/proc/self/exe")
        assert first["object"] == str(f) and first["operation"] == "write"
        assert {"time", "comm"} <= set(first)
        assert f.read_text() == "secret" and inner.read_text() == "inner"
    finally:
        os.close(early)


def test_trust_by_inode_and_inheritance(tmp_path, fs):
    f = fs / "target"
    f.write_text("")
    bins = fs / "bins"
    bins.mkdir()
    tee, sh_inherit, sh_plain = bins / "tee", bins / "sh-inherit", bins / "sh-plain"
    shutil.copy("/usr/bin/tee", tee)
    shutil.copy("/bin/sh", sh_inherit)
    shutil.copy("/bin/sh", sh_plain)
    copy = fs / "tee-copy"
    shutil.copy(tee, copy)
    policy = (f"protect: [{f}]\ntrust:\n  - {tee}\n  - path: {sh_inherit}\n    inherit: true\n"
              f"  - {sh_plain}\n")

    def writes(*argv) -> bool:
        return subprocess.run(list(argv), input=b"x\n", stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0

    with guard(tmp_path, policy):
        assert writes(str(tee), "-a", str(f))                        # trusted
        assert not writes(str(copy), "-a", str(f))                   # same bytes, other inode
        assert not writes("/usr/bin/tee", "-a", str(f))
        script = fs / "script.sh"
        script.write_text(f"#!/bin/sh\n/usr/bin/tee -a {f}\ntrue\n")
        script.chmod(0o755)
        assert writes(str(sh_inherit), str(script))                  # a script run by it inherits
        # `|| exit 1; true`: a forked child (not exec'd in place), and its failure shows
        assert writes(str(sh_inherit), "-c", f"/usr/bin/tee -a {f} || exit 1; true")
        assert not writes(str(sh_plain), "-c", f"/usr/bin/tee -a {f} || exit 1; true")  # no inherit
        assert not writes("/bin/sh", "-c", f"{tee} -a {f} >/dev/null; /usr/bin/tee -a {f}")
    assert f.read_text().count("x") == 4


def test_protected_process_survives(tmp_path, fs):
    exe = fs / "sleeper"
    shutil.copy("/bin/sleep", exe)
    victim = subprocess.Popen([str(exe), "300"])
    try:
        with guard(tmp_path, f"processes: [{exe}]\n") as state:
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                denied(os.kill, victim.pid, sig)
            os.kill(victim.pid, 0)  # existence checks still work
            ptrace = subprocess.run([sys.executable, "-c", f"""
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.exit(0 if libc.ptrace(16, {victim.pid}, 0, 0) == -1 else 1)  # PTRACE_ATTACH
"""])
            assert ptrace.returncode == 0
            with pytest.raises(PermissionError):  # mm_access: EACCES
                open(f"/proc/{victim.pid}/mem", "r+b")
            time.sleep(0.5)
            assert victim.poll() is None
            lines = log_lines(state, 4)
            assert {"task_kill", "ptrace_access_check"} <= {line["hook"] for line in lines}
            assert any(line.get("target_pid") == victim.pid and line.get("signal") == 9 for line in lines)
        os.kill(victim.pid, signal.SIGKILL)  # after stop: allowed again
        assert victim.wait(timeout=10) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def test_audit_mode_then_agent_killed_then_stop(tmp_path, fs):
    f = fs / "file"
    f.write_text("a")
    with guard(tmp_path, f"protect: [{f}]\n", "--audit") as state:
        with open(f, "a") as w:
            w.write("b")
        lines = log_lines(state, 1)
        assert lines and lines[0]["verdict"] == "allowed (audit)" and lines[0]["hook"] == "file_open"
    assert f.read_text() == "ab"

    killer = fs / "kill"
    shutil.copy(shutil.which("kill") or "/bin/kill", killer)
    with guard(tmp_path, f"protect: [{f}]\ntrust: [{killer}]\n") as state:
        pid = json.loads((state / "state.json").read_text())["agent_pid"]
        denied(os.kill, pid, signal.SIGKILL)  # the agent is protected from untrusted subjects
        subprocess.run([str(killer), "-9", str(pid)], check=True)  # a trusted subject may
        deadline = time.monotonic() + 10
        while "not running" not in cli(state, "status").stdout:
            assert time.monotonic() < deadline, "the agent survived a trusted SIGKILL"
            time.sleep(0.2)
        links = [n for n in os.listdir(PIN_DIR) if n.startswith("link_")]
        assert len(links) == 13, links
        denied(os.open, f, os.O_WRONLY)  # the pins alone keep enforcing
    assert not os.path.exists(PIN_DIR)
    with open(f, "a") as w:  # stop removed every hook
        w.write("c")
