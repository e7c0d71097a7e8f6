"""A pinned guard for VM tests: started with a policy that also trusts an admin shell (a copy
of /bin/sh, `inherit: true`), through which stop, reload and policy edits run, as an
administrator would (see README, guard); the test process itself is an untrusted subject."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from ebpfkit.tools.guard import logfile

PIN_DIR = "/sys/fs/bpf/ebpfkit/guard"


@dataclass
class Guard:
    state: Path   # EBPFKIT_GUARD_STATE: state.json, guard.log
    policy: Path
    admin: Path   # the trusted admin shell

    def env(self) -> dict:
        return {**os.environ, "EBPFKIT_GUARD_STATE": str(self.state)}

    def cli(self, *args, check=True):
        """`ebpfkit guard ...` as the untrusted test process."""
        result = subprocess.run([sys.executable, "-m", "ebpfkit", "guard", *args], env=self.env(),
                                capture_output=True, text=True, timeout=900)
        if check:
            assert result.returncode == 0, result.stderr + result.stdout
        return result

    def as_admin(self, script: str, check=True):
        """A shell command run by the trusted admin shell (its children inherit trust)."""
        result = subprocess.run([str(self.admin), "-c", script], env=self.env(), capture_output=True,
                                text=True, timeout=900)
        if check:
            assert result.returncode == 0, result.stderr + result.stdout
        return result

    def admin_cli(self, *args, check=True):
        return self.as_admin(" ".join(["exec", sys.executable, "-m", "ebpfkit", "guard", *args]), check)

    def lines(self, minimum=1, timeout=10.0, where=lambda line: True):
        return log_lines(self.state, minimum, timeout, where)

    def reloaded(self, after: int, result: str, timeout=60.0, text="") -> list:
        """Policy-reload lines, once one after the first ``after`` has ``result`` (an edit in
        place may first be seen half-written: logged as rejected, then applied)."""
        def done(lines):
            return any(line["verdict"] == result and text in line.get("error", "") for line in lines[after:])

        deadline = time.monotonic() + timeout
        while True:
            lines = log_lines(self.state, 0, 0, lambda line: line.get("event") == "policy-reload")
            if done(lines) or time.monotonic() > deadline:
                assert done(lines), lines
                return lines
            time.sleep(0.3)


def with_admin(policy_text: str, admin: Path) -> str:
    doc = yaml.safe_load(policy_text)
    doc.setdefault("trust", [])
    doc["trust"] = list(doc["trust"] or []) + [{"path": str(admin), "inherit": True}]
    return yaml.safe_dump(doc)


@contextlib.contextmanager
def guard(tmp_path, policy_text, *flags):
    admin = tmp_path / "admin" / "guard-admin"
    admin.parent.mkdir(exist_ok=True)
    if not admin.exists():
        shutil.copy("/bin/sh", admin)
    g = Guard(tmp_path / "state", tmp_path / "policy.yaml", admin)
    g.policy.write_text(with_admin(policy_text, admin))
    g.cli("start", str(g.policy), *flags)
    try:
        yield g
    except BaseException:
        _debug_dump(g, policy_text)  # a CLI run costs ~20 s in the guest: only when it helps
        raise
    finally:
        g.admin_cli("stop", check=False)
        assert not os.path.exists(PIN_DIR)


def _debug_dump(g, policy_text):
    """What stat() says vs the keys the guard uses: shown when a test fails. (The maps
    themselves are closed to this untrusted process.)"""
    from ebpfkit.tools.guard import core

    print("status:", g.cli("status", check=False).stdout)
    doc = yaml.safe_load(policy_text)
    for entry in (doc.get("protect") or []) + (doc.get("processes") or []):
        path = entry["path"] if isinstance(entry, dict) else entry
        with contextlib.suppress(OSError):
            st = os.stat(path)
            print("stat", path, "dev", os.major(st.st_dev), os.minor(st.st_dev), "ino", st.st_ino,
                  "key", core.key_of(path))
    with contextlib.suppress(OSError):
        print("log:", (g.state / "guard.log").read_text()[-6000:])
    with contextlib.suppress(OSError):
        print("agent.err:", (g.state / "agent.err").read_text()[-3000:])


def log_lines(state, minimum=1, timeout=10.0, where=lambda line: True):
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in logfile.records(str(state / "guard.log")) if where(line)]
        if len(lines) >= minimum or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)
