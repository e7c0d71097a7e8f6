"""The guard agent: load guard.bpf.c, attach every hook, pin links and maps, then follow the
ring buffer writing one JSON line per violation to the log.

Started detached by `ebpfkit guard start`; it reports readiness (or the error) on --ready-fd.
Killing it leaves the pins, hence the protection, in place: only `guard stop` removes them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import sys
import time

from ..policy import OPERATIONS, PolicyError, load_guard_policy
from . import core

# struct guard_event (programs/guard.h)
EVENT = struct.Struct("=QQQIIIIiI16s128s")
HOOKS = {1: "file_open", 2: "file_permission", 3: "inode_unlink", 4: "inode_rename", 5: "inode_link",
         6: "inode_setattr", 7: "path_truncate", 8: "mmap_file", 9: "task_kill",
         10: "ptrace_access_check", 11: "bpf"}
OP_NAMES = {**{v: k for k, v in OPERATIONS.items()}, 128: "kill", 256: "ptrace", 512: "bpf"}


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


class Logger:
    def __init__(self, log, paths: dict, boot_offset: float):
        self.log, self.paths, self.boot_offset = log, paths, boot_offset

    def __call__(self, raw: bytes) -> None:
        ts, dev, ino, pid, target, hook, op, verdict, sig, comm, name = EVENT.unpack(raw[:EVENT.size])
        ops = [n for bit, n in OP_NAMES.items() if op & bit]
        record = {"time": round(self.boot_offset + ts / 1e9, 6), "hook": HOOKS.get(hook, str(hook)),
                  "pid": pid, "comm": comm.split(b"\0")[0].decode(errors="replace"), "exe": _exe(pid),
                  "operation": ",".join(ops), "verdict": "denied" if verdict else "allowed (audit)"}
        if dev or ino:
            record.update(object=self.paths.get((dev, ino)), dev=dev, ino=ino,
                          name=name.split(b"\0")[0].decode(errors="replace"))
        if target:
            record.update(target_pid=target, target_exe=_exe(target))
            if sig:
                record["signal"] = sig
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()


def _boot_offset() -> float:
    """Wall-clock time of boot-time 0, to stamp events (bpf_ktime_get_boot_ns)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def display_paths(policy) -> dict:
    out = {}
    for rule in list(policy.protect) + list(policy.processes):
        try:
            out[core.key_of(rule.path)] = rule.path
        except OSError:
            pass
    return out


def start(policy_path: str, audit: bool):
    """Load, attach, pin and fill; returns (obj, policy). Cleans up on any failure."""
    import ebpfkit

    policy = load_guard_policy(policy_path)
    mode = "audit" if audit else policy.mode
    spec = ebpfkit.compile("guard.bpf.c")
    spec.rodata.update({"targ_audit": mode == "audit", "targ_agent_tgid": os.getpid()})
    obj = spec.load()
    try:
        from ..engine import mounts
        directory = mounts.pin_dir(core.TOOL)
        obj.pin_maps(directory)
        fds = {name: obj.maps[name].fd for name in core.MAPS}
        warnings = core.apply(policy, fds)
        # the watched policy file itself is protected
        pkey = core.key_of(policy_path)
        from ..engine import _libbpf as L
        L.lib.bpf_map_update_elem(fds["protected"], core.KEY.pack(*pkey), core.VALUE.pack(
            OPERATIONS["write"] | OPERATIONS["unlink"] | OPERATIONS["rename"] | OPERATIONS["setattr"]), 0)
        for prog in obj.programs.values():
            link = prog.attach_lsm()
            link.pin(os.path.join(directory, "link_" + prog.name))
        core.write_state({"mode": mode, "policy": os.path.abspath(policy_path), "agent_pid": os.getpid(),
                          "started": time.time(), "rules": policy.to_dict(), "warnings": warnings})
    except BaseException:
        obj.close()
        core.stop()
        raise
    return obj, policy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ebpfkit-guard-agent")
    parser.add_argument("policy")
    parser.add_argument("--audit", action="store_true")
    parser.add_argument("--ready-fd", type=int, default=-1)
    args = parser.parse_args(argv)

    def ready(message: str) -> None:
        if args.ready_fd >= 0:
            os.write(args.ready_fd, message.encode() + b"\n")
            os.close(args.ready_fd)
            args.ready_fd = -1

    try:
        obj, policy = start(args.policy, args.audit)
    except (PolicyError, core.GuardError, Exception) as exc:  # reported to `guard start`
        ready(f"error: {exc}")
        return 1
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    os.makedirs(core.STATE_DIR, exist_ok=True)
    with open(core.LOG_FILE, "a") as log:
        reader = obj.ring_buffer("events", Logger(log, display_paths(policy), _boot_offset()), decode=False)
        ready("ok")
        marker = os.path.join(core.PIN_DIR, "link_guard_file_open")
        while not stopping and os.path.exists(marker):
            # `guard stop` unpins first: the missing pin is our signal to exit (a signal
            # from an untrusted `guard stop` would be denied while the hooks are live)
            reader.poll(200)
    return 0  # the pins stay: only `guard stop` removes them


if __name__ == "__main__":
    sys.exit(main())
