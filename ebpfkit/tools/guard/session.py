"""guard's session side: start the pinned guard and read what it counts, as plain documents.
No click, no printing, no formats: the CLI, the exporter and a notebook read it the same way::

    from ebpfkit.tools import guard
    guard.start("/etc/ebpfkit/guard.yaml")      # load, pin, start the agent (as `guard start`)
    guard.status()                               # mode, policy, agent, counters (`guard status`)
    counters = guard.attached()                  # a running guard's counters, read from its pins
    counters.sample()                            # {"mode": "enforce", "denied": 3, "audited": 0, "lost": 0}

The guard always runs pinned, with its agent as a separate process (``agent.py``): its
protection must outlive whoever started it, and it guards its own pins, maps and agent
against untrusted subjects. So there is no foreground ``open()`` that a ``with`` block would
undo: a guard that went away with a notebook's kernel process would protect nothing, and
the process holding it would become a subject the guard trusts. Stop it with `guard stop`
from a trusted context (see README, guard).

The counters are the kernel's totals since start, summed over CPUs: ``denied`` (enforce
mode), ``audited`` (audit mode: what enforce would deny), ``lost`` (log events dropped, the
ring buffer full). The BPF side counts per verdict, not per hook: per hook is in the log.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from ...errors import EbpfkitError, NotSupportedError
from ...output.settings import DEFAULT_LOG_BACKUP, DEFAULT_LOG_SIZE
from ..session import ToolSession
from . import core

START_TIMEOUT = 600.0  # seconds for the agent to load (compiles are slow under emulation)


class NotRunningError(EbpfkitError):
    """``attached()`` found no guard pinned (exit 1, like the CLI's other "not running")."""


class Counters(ToolSession):
    """A running guard's counters, read through read-only fds (granted to any subject) at
    each sample; it holds nothing open, and ``close()`` leaves the guard running."""

    def sample(self) -> dict:
        """{"mode", "denied", "audited", "lost"}: totals since the guard started."""
        if not _pinned():
            raise NotRunningError("the guard is not running any more (its pins are gone)")
        record = core.PINS.record() or {}
        return {"mode": record.get("mode"), **counters()}

    def close(self) -> None:
        pass


def attached() -> Counters:
    """The counters of the guard `guard start` pinned; NotRunningError when there is none."""
    if not _pinned():
        raise NotRunningError("the guard is not running", hint="ebpfkit guard start POLICY")
    return Counters()


def _pinned() -> bool:
    return os.path.isdir(core.PIN_DIR)


def counters() -> dict:
    """Denied/audited/lost counts, through read-only fds (granted to anyone)."""
    out = {}
    with core.pinned("counters", readonly=True) as m:
        for idx, name in enumerate(("denied", "audited")):
            out[name] = m[idx].sum()
    with core.pinned("events_lost", readonly=True) as m:
        out["lost"] = m[0].sum()
    return out


def status() -> dict:
    """What `guard status` shows. Works from any context: map entry counts come from the
    state (the maps themselves are closed to untrusted subjects), the counters through
    read-only fds."""
    state = core.read_state()
    if state is None:
        return {"state": "stopped"}
    record = {"state": "running", "pins": core.PIN_DIR, "mode": state.get("mode"),
              "policy": state.get("policy"), "agent_pid": state.get("agent_pid"),
              "agent": "running" if core.agent_alive(state.get("agent_pid")) else "not running",
              "links": sorted(n for n in os.listdir(core.PIN_DIR) if n.startswith("link_")),
              "log": core.LOG_FILE}
    with contextlib.suppress(core.GuardError):
        record.update(counters())
    for name in ("protected_entries", "trusted_entries", "protected_exe_entries"):
        if name in state:
            record[name] = state[name]
    return record


def require_lsm() -> None:
    """NotSupportedError (exit 3), saying how to get BPF-LSM, when the guard cannot run here."""
    reason = core.refuse_reason()
    if reason:
        raise NotSupportedError("bpf-lsm", f"guard cannot start: {reason}")


def start(policy: str, audit: bool = False, timeout: float = START_TIMEOUT,
          log_size: int = DEFAULT_LOG_SIZE, log_backup: int = DEFAULT_LOG_BACKUP) -> dict:
    """Start the agent on the policy file ``policy`` (it loads, attaches, pins, then logs and
    watches the file) and return the status once protection is on. ``audit``: allow
    everything, log what enforce mode would deny. The policy is checked by the agent; parse
    it first (``policy.load_guard_policy``) for errors with their line."""
    require_lsm()
    if core.read_state() is not None:
        raise EbpfkitError("the guard is already running",
                           hint="`ebpfkit guard reload POLICY` to change the policy, "
                                "`ebpfkit guard stop` to remove it")
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, "-m", "ebpfkit.tools.guard.agent", os.path.abspath(policy), "--ready-fd", str(write_fd),
           "--log-size", str(log_size), "--log-backup", str(log_backup)]
    if audit:
        cmd.append("--audit")
    os.makedirs(core.STATE_DIR, exist_ok=True)
    with open(os.path.join(core.STATE_DIR, "agent.err"), "ab") as err:
        proc = subprocess.Popen(cmd, pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    os.close(write_fd)
    message = _read_ready(read_fd, timeout)
    if message != "ok":
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(core.GuardError):
            core.stop()
        raise EbpfkitError(f"guard agent failed: {message or 'no answer'}",
                           hint=f"its output is in {core.STATE_DIR}/agent.err")
    return status()


def _read_ready(fd: int, timeout: float) -> str:
    """The agent's one line on its ready pipe ("ok" or the error), or what came by ``timeout``."""
    import select

    deadline, data = time.monotonic() + timeout, b""
    try:
        while b"\n" not in data and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    return data.decode(errors="replace").strip()
