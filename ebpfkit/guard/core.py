"""Pins, maps and state of the guard.

Everything lives in /sys/fs/bpf/ebpfkit/guard/ (links and maps, so protection survives the
agent) and /run/ebpfkit/guard/ (state.json for display, guard.log for violations)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import stat
import struct
import time

from ..engine import _libbpf as L
from ..engine import features, mounts
from ..engine.maps import possible_cpu_count
from ..policy import OPERATIONS, GuardPolicy

TOOL = "guard"
PIN_DIR = os.path.join(mounts.PIN_ROOT, TOOL)
STATE_DIR = os.environ.get("EBPFKIT_GUARD_STATE", "/run/ebpfkit/guard")
STATE_FILE = os.path.join(STATE_DIR, "state.json")
LOG_FILE = os.path.join(STATE_DIR, "guard.log")

KEY = struct.Struct("=QQ")         # struct guard_key
VALUE = struct.Struct("=I")
TRUST_SELF, TRUST_INHERIT = 1, 2
SELF_SHIFT = 16  # GUARD_SELF_SHIFT: self-only operations of an ancestor
MAPS = ("protected", "trusted", "protected_exe")


class GuardError(Exception):
    """A user-facing failure; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def kernel_dev(st_dev: int) -> int:
    """st_dev (user encoding) -> the kernel's s_dev (MKDEV: major << 20 | minor)."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def key_of(path: str) -> tuple[int, int]:
    """(dev, ino) of what ``path`` resolves to: symlinks followed, so the object is keyed."""
    st = os.stat(path)
    return kernel_dev(st.st_dev), st.st_ino


def resolve(policy: GuardPolicy) -> tuple[dict, dict, dict, list[str]]:
    """Map contents for ``policy``: {key: value} for protected, trusted, protected_exe, and
    warnings for paths that do not exist (skipped). Trusting a directory trusts every
    executable regular file below it."""
    protected, trusted, exe, warnings = {}, {}, {}, []

    def add(table, path, value, merge=lambda a, b: a | b):
        try:
            k = key_of(path)
        except OSError as exc:
            warnings.append(f"{path}: {exc.strerror}; skipped")
            return
        table[k] = merge(table[k], value) if k in table else value

    for rule in policy.protect:
        add(protected, rule.path, rule.mask)
        # its ancestors cannot be renamed (that would move it out of reach of its path)
        parent = os.path.dirname(os.path.realpath(rule.path))
        while parent != "/" and os.path.exists(rule.path):
            add(protected, parent, OPERATIONS["rename"] << SELF_SHIFT)
            parent = os.path.dirname(parent)
    for rule in policy.trust:
        value = TRUST_SELF | (TRUST_INHERIT if rule.inherit else 0)
        for path in _executables(rule.path):
            add(trusted, path, value)
    for rule in policy.processes:
        add(exe, rule.path, 1)
    return protected, trusted, exe, warnings


def _executables(path: str):
    if not os.path.isdir(path):
        yield path
        return
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with contextlib.suppress(OSError):
                st = os.stat(full)
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                    yield full


# --- pinned maps ------------------------------------------------------------------------

@contextlib.contextmanager
def pinned(name: str):
    fd = L.lib.bpf_obj_get(os.fsencode(os.path.join(PIN_DIR, name)))
    if fd < 0:
        raise GuardError(f"guard pin {PIN_DIR}/{name} is missing: {os.strerror(-fd)}")
    try:
        yield fd
    finally:
        os.close(fd)


def _keys(fd: int) -> list[bytes]:
    out, key, nxt = [], ctypes.create_string_buffer(KEY.size), ctypes.create_string_buffer(KEY.size)
    err = L.lib.bpf_map_get_next_key(fd, None, nxt)
    while err == 0:
        out.append(nxt.raw)
        ctypes.memmove(key, nxt, KEY.size)
        err = L.lib.bpf_map_get_next_key(fd, key, nxt)
    return out


def swap(fd: int, wanted: dict) -> None:
    """Make the map hold exactly ``wanted``: add and update first, delete stale keys last,
    so an object protected before and after is never unprotected in between."""
    for (dev, ino), value in wanted.items():
        if L.lib.bpf_map_update_elem(fd, KEY.pack(dev, ino), VALUE.pack(value), 0):
            raise GuardError(f"cannot update guard map: {os.strerror(L.errno())}")
    keep = {KEY.pack(*k) for k in wanted}
    for raw in _keys(fd):
        if raw not in keep:
            L.lib.bpf_map_delete_elem(fd, raw)


def apply(policy: GuardPolicy, fds: dict[str, int]) -> list[str]:
    protected, trusted, exe, warnings = resolve(policy)
    # trust first, protection last: a reload never denies a newly trusted program
    swap(fds["trusted"], trusted)
    swap(fds["protected_exe"], exe)
    swap(fds["protected"], protected)
    return warnings


def reload(policy: GuardPolicy, policy_path: str) -> list[str]:
    state = read_state()
    if not state:
        raise GuardError("the guard is not running: `ebpfkit guard start POLICY` first")
    if policy.mode != state.get("mode"):
        raise GuardError(f"the policy's mode ({policy.mode}) differs from the running guard's "
                         f"({state.get('mode')}): `guard stop` and `guard start` to change it")
    with pinned("protected") as p, pinned("trusted") as t, pinned("protected_exe") as e:
        warnings = apply(policy, {"protected": p, "trusted": t, "protected_exe": e})
    state.update(policy=os.path.abspath(policy_path), rules=policy.to_dict())
    write_state(state)
    return warnings


# --- state ------------------------------------------------------------------------------

def read_state() -> dict | None:
    if not os.path.isdir(PIN_DIR):
        return None
    try:
        with open(STATE_FILE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_state(state: dict) -> None:
    os.makedirs(STATE_DIR, exist_ok=True)
    tmp = STATE_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, STATE_FILE)


def counters() -> dict:
    ncpus = possible_cpu_count()
    out = {}
    with pinned("counters") as fd:
        for idx, name in enumerate(("denied", "audited")):
            buf = ctypes.create_string_buffer(8 * ncpus)
            L.lib.bpf_map_lookup_elem(fd, struct.pack("=I", idx), buf)
            out[name] = sum(struct.unpack(f"={ncpus}Q", buf.raw))
    with pinned("events_lost") as fd:
        buf = ctypes.create_string_buffer(8 * ncpus)
        L.lib.bpf_map_lookup_elem(fd, struct.pack("=I", 0), buf)
        out["lost"] = sum(struct.unpack(f"={ncpus}Q", buf.raw))
    return out


def agent_alive(pid) -> bool:
    """The agent process exists and is not a zombie nobody reaped yet."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def status() -> dict:
    state = read_state()
    if state is None:
        return {"state": "stopped"}
    record = {"state": "running", "pins": PIN_DIR, "mode": state.get("mode"),
              "policy": state.get("policy"), "agent_pid": state.get("agent_pid"),
              "agent": "running" if agent_alive(state.get("agent_pid")) else "not running",
              "links": sorted(n for n in os.listdir(PIN_DIR) if n.startswith("link_")),
              "log": LOG_FILE}
    with contextlib.suppress(GuardError):
        record.update(counters())
    for name in MAPS:
        with contextlib.suppress(GuardError), pinned(name) as fd:
            record[f"{name}_entries"] = len(_keys(fd))
    return record


def stop() -> bool:
    """Detach every link, unpin everything, stop the agent. False when nothing was there."""
    state = read_state()
    if state is None:
        return False
    pid = state.get("agent_pid")
    for name in os.listdir(PIN_DIR):
        if name.startswith("link_"):
            fd = L.lib.bpf_obj_get(os.fsencode(os.path.join(PIN_DIR, name)))
            if fd >= 0:  # detach now, even if the agent still holds the link
                L.lib.bpf_link_detach(fd)
                os.close(fd)
    mounts.remove_pin_dir(TOOL)
    # the agent exits when it sees its pins gone, dropping the last references
    deadline = time.monotonic() + 15
    while agent_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if agent_alive(pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.unlink(STATE_FILE)
    return True


def refuse_reason() -> str | None:
    """Why BPF-LSM cannot enforce here, with how to enable it; None when it can."""
    active = features.lsm_active()
    if not active.supported:
        return (f"BPF-LSM is not active ({active.reason}; /sys/kernel/security/lsm lacks 'bpf'). "
                f"Enable it: {features.HINTS.get('lsm_active')}")
    lsm = features.probe("lsm")
    if not lsm.supported:
        return (f"BPF-LSM is active (bpf is listed in /sys/kernel/security/lsm) but this kernel "
                f"refuses LSM programs: {lsm.reason}. Use a kernel that allows BPF LSM "
                f"attachment, or run in the VM harness: `ebpfkit vm run`")
    return None
