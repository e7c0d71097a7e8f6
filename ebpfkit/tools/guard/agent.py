"""The guard agent: load guard.bpf.c, attach every hook, pin links and maps, then follow the
ring buffer writing one JSON line per violation to the log, and reload the policy when its
file changes.

Started detached by `ebpfkit guard start`; it reports readiness (or the error) on --ready-fd.
Killing it leaves the pins, hence the protection, in place: only `guard stop` removes them.
Untrusted subjects cannot signal it (the BPF side knows its tgid), nor write its policy.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from ...engine import features
from ...engine.pinned import link_info
from ...output.logs import get_logger, setup_logging
from ...output.settings import DEFAULT_LOG_BACKUP, DEFAULT_LOG_SIZE
from ...policy import PolicyError, parse_guard_policy
from ...sysinfo import processes
from . import core, logfile

EVENT_TYPE = "struct guard_event"  # guard.h: the records of the `events` ring buffer
# enum bpf_cmd values the bpf hook reports
BPF_CMDS = {29: "BPF_LINK_UPDATE", 34: "BPF_LINK_DETACH"}
POLL_MS, WATCH_SECONDS = 200, 1.0
READABLE_MAPS = ("counters", "events_lost")  # untrusted subjects may open these read-only
TRUSTED_TASKS_MAX = 1 << 18  # before 5.11: tasks with trust at once (more: the rest are untrusted)
messages = get_logger("ebpfkit.tools.guard.agent")  # to stderr, which is agent.err; set up in main()


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


class Logger:
    """Ring buffer records (struct guard_event, decoded through the object's BTF) -> JSON
    lines. Hooks and operations are named by guard.h's enums in ``btf``. ``labels``:
    {(dev, ino): path or {"object": path, "matched": path}}; ``names``:
    {("link"|"prog"|"map", id): name} of the guard's objects."""

    def __init__(self, log, labels: dict, boot_offset: float, btf, names: dict | None = None):
        self.log, self.labels, self.boot_offset = log, labels, boot_offset
        self.names = names or {}
        self.hooks = {v: n for n, v in btf.enum("guard_hook", strip="GUARD_HOOK_").items()}
        self.operations = {v: n for n, v in btf.enum("guard_op", strip="GUARD_OP_").items()}

    def __call__(self, ev) -> None:
        dev, ino, pid, target, sig, cmd, obj_id = (ev.dev, ev.ino, ev.pid, ev.target_pid, ev.sig,
                                                    ev.bpf_cmd, ev.obj_id)
        ops = [n for bit, n in self.operations.items() if ev.op & bit]
        hook_name = self.hooks.get(ev.hook, str(int(ev.hook)))
        record = {"time": round(self.boot_offset + ev.ts_ns / 1e9, 6), "event": "violation",
                  "hook": hook_name, "pid": pid, "comm": ev.comm, "exe": _exe(pid),
                  "operation": ",".join(ops), "verdict": "denied" if ev.verdict else "allowed (audit)"}
        text = ev.name
        if dev or ino:
            label = self.labels.get((dev, ino))
            if isinstance(label, str):
                label = {"object": label}
            record.update(object=(label or {}).get("object"), dev=dev, ino=ino, name=text)
            if label and label.get("matched"):
                record["matched"] = label["matched"]
        if hook_name == "bpf":
            record.update(bpf_cmd=BPF_CMDS.get(cmd, str(cmd)), link_id=obj_id,
                          link=self.names.get(("link", obj_id)))
        elif hook_name == "bpf_map":
            record.update(map=text, map_id=obj_id)
        elif hook_name == "bpf_prog":
            record.update(program=self.names.get(("prog", obj_id), text), prog_id=obj_id)
        if target:
            record.update(target_pid=target, target_exe=_exe(target))
            if sig:
                record["signal"] = sig
        self.write(record)

    def write(self, record: dict) -> None:
        self.log.write(record)


def _boot_offset() -> float:
    """Wall-clock time of boot-time 0, to stamp events (bpf_ktime_get_boot_ns)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def display_paths(policy, policy_path: str | None = None) -> dict:
    """{key: label} for the log, as resolve() names every protected key."""
    return core.resolve(policy, core.self_rules(policy_path)).labels


def match_kernel(spec) -> bool:
    """Load only the programs and maps this kernel takes: inode_setattr's hook has the
    mount's idmap first from 6.12 on (a program for the other signature fails to load); each
    task's trust is in task storage from 5.11, before that in a hash by task address, emptied
    by task_free and sized to pid_max (there cannot be more tasks). True: task storage."""
    idmap = features.kernel_function_arity("bpf_lsm_inode_setattr") == 3
    spec.programs["guard_inode_setattr_idmap"].autoload = idmap
    spec.programs["guard_inode_setattr"].autoload = not idmap
    storage = features.probe("task_storage").supported
    spec.maps["task_trust_by_task" if storage else "task_trust"].autocreate = False
    spec.programs["guard_task_free"].autoload = not storage
    if not storage:
        spec.maps["task_trust_by_task"].max_entries = min(processes.pid_max(), TRUSTED_TASKS_MAX)
    return storage


def load(mode: str, pin_dev: int = 0, cache: bool = True):
    """guard.bpf.c, loaded. Should a kernel's verifier refuse the verdict cache (inode
    storage on a pointer it does not trust), it is loaded without: slower, as safe."""
    import ebpfkit

    spec = ebpfkit.compile(os.path.join(os.path.dirname(__file__), "guard.bpf.c"))
    storage = match_kernel(spec)
    spec.rodata.update({"targ_audit": mode == "audit", "targ_agent_tgid": os.getpid(),
                        "targ_pin_dev": pin_dev, "targ_cache": cache, "targ_task_storage": storage})
    try:
        return spec.load()
    except ebpfkit.EbpfkitError as exc:
        if not cache:
            raise
        messages.warning("guard agent: loading without the verdict cache: %s", exc)
        return load(mode, pin_dev, cache=False)


def start(policy_path: str, audit: bool):
    """Load, attach, pin and fill; returns (obj, labels, names, policy). Cleans up on any failure."""
    try:
        text, sig = core.read_policy(policy_path)
    except OSError as exc:
        raise PolicyError(f"cannot read the policy: {exc.strerror or exc}", None, policy_path) from None
    policy = parse_guard_policy(text, policy_path)
    mode = "audit" if audit else policy.mode
    pins = core.PINS.create(core.TOOL)
    obj = load(mode, core.key_of(pins.path)[0])
    try:
        pins.pin_maps(obj)
        maps = {name: obj.maps[name] for name in core.MAP_NAMES}
        self_ids = obj.maps["self_ids"]
        # task_free first: no trust entry by task address may outlive its task
        programs = sorted((p for p in obj.programs.values() if p.autoload),
                          key=lambda p: p.name != "guard_task_free")
        names = {("prog", p.info().id): p.name for p in programs}
        # maps and programs are registered before any hook runs, links as they are made
        created = {name: m.raw.id for name, m in obj.maps.items() if m.autocreate}
        core.register_self(self_ids, "MAP", [i for n, i in created.items() if n not in READABLE_MAPS])
        core.register_self(self_ids, "MAP", [i for n, i in created.items() if n in READABLE_MAPS], "READABLE")
        core.register_self(self_ids, "PROG", [i for kind, i in names if kind == "prog"])
        for prog in programs:
            link = prog.attach()  # lsm/..., and fexit/vfs_rename
            pins.pin_link("link_" + prog.name, link)
            link_id = link_info(link.fd).id
            names[("link", link_id)] = "link_" + prog.name
            core.register_self(self_ids, "LINK", [link_id])
        pins.seal(mode=mode)
        os.makedirs(core.STATE_DIR, exist_ok=True)
        open(core.LOG_FILE, "a").close()  # exists before it is keyed
        core.write_state({"mode": mode, "mode_forced": audit, "policy": os.path.abspath(policy_path),
                          "agent_pid": os.getpid(), "started": time.time()})
        with core.locked():
            res = core.install(policy, policy_path, sig, maps)
    except BaseException:
        obj.close()
        core.stop()
        raise
    return obj, res.labels, names, policy


class Watcher:
    """Reloads the policy when its file changes (content or inode), or follows a reload
    done by `guard reload`. A policy that does not parse or resolve is logged, and the one
    in force stays: it is only replaced by a valid one."""

    def __init__(self, maps: dict, logger: Logger, log_defaults: tuple[int, int]):
        self.maps, self.logger, self.log_defaults = maps, logger, log_defaults
        self.rejected = None  # the signature of the last bad version, logged once
        self.known = (core.read_state() or {}).get("applied")  # what the labels describe
        self.next = time.monotonic() + WATCH_SECONDS

    def due(self) -> bool:
        return time.monotonic() >= self.next

    def check(self) -> None:
        self.next = time.monotonic() + WATCH_SECONDS
        state = core.read_state() or {}
        path = state.get("policy")
        if not path:
            return
        try:
            text, sig = core.read_policy(path)
        except OSError as exc:
            sig = {"error": exc.strerror}
            if sig != self.rejected:
                self.rejected = sig
                self._log(path, "rejected", error=f"cannot read the policy: {exc.strerror}; "
                                                   f"the policy in force stays")
            return
        if state.get("applied") != self.known:  # `guard reload` swapped it in
            self.known = state.get("applied")
            if sig == self.known:
                self._relabel(text, path)
        if sig == state.get("applied") or sig == self.rejected:
            return
        with core.locked():
            state = core.read_state() or {}
            if sig == state.get("applied"):
                return
            try:
                policy = parse_guard_policy(text, path)
                res = core.install(policy, path, sig, self.maps)
            except (PolicyError, core.GuardError) as exc:
                self.rejected = sig
                self._log(path, "rejected", error=f"{exc}; the policy in force stays")
                return
        self.rejected, self.known = None, sig
        self.logger.labels = res.labels
        self.logger.log.resize(*log_limits(policy, self.log_defaults))
        self._log(path, "applied", warnings=res.warnings)

    def _relabel(self, text: str, path: str) -> None:
        try:
            policy = parse_guard_policy(text, path)
        except PolicyError:
            self.logger.labels = {}
            return
        self.logger.labels = display_paths(policy, path)
        self.logger.log.resize(*log_limits(policy, self.log_defaults))

    def _log(self, path: str, result: str, **extra) -> None:
        self.logger.write(logfile.reload_record(path, result, "agent", **extra))


def log_limits(policy, defaults: tuple[int, int]) -> tuple[int, int]:
    """(size, backups) of the agent's log: the policy's `log:`, else the options'."""
    size, backups = defaults
    return (policy.log_size or size,
            backups if policy.log_backups is None else policy.log_backups)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ebpfkit-guard-agent")
    parser.add_argument("policy")
    parser.add_argument("--audit", action="store_true")
    parser.add_argument("--ready-fd", type=int, default=-1)
    parser.add_argument("--log-size", type=int, default=DEFAULT_LOG_SIZE)
    parser.add_argument("--log-backup", type=int, default=DEFAULT_LOG_BACKUP)
    args = parser.parse_args(argv)
    setup_logging(color=False)

    def ready(message: str) -> None:
        if args.ready_fd >= 0:
            os.write(args.ready_fd, message.encode() + b"\n")
            os.close(args.ready_fd)
            args.ready_fd = -1

    try:
        obj, labels, names, policy = start(args.policy, args.audit)
    except (PolicyError, core.GuardError, Exception) as exc:  # reported to `guard start`
        ready(f"error: {exc}")
        return 1
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    maps = {name: obj.maps[name] for name in core.MAP_NAMES}
    defaults = (args.log_size, args.log_backup)
    log = logfile.RotatingLog(core.LOG_FILE, *log_limits(policy, defaults))
    try:
        logger = Logger(log, labels, _boot_offset(), obj.btf, names)
        watcher = Watcher(maps, logger, defaults)
        reader = obj.ring_buffer("events", logger, event_type=EVENT_TYPE)
        ready("ok")
        marker = os.path.join(core.PIN_DIR, "link_guard_file_open")
        while not stopping and os.path.exists(marker):
            # `guard stop` unpins first: the missing pin is our signal to exit (a signal
            # from an untrusted `guard stop` would be denied while the hooks are live)
            reader.poll(POLL_MS)
            if watcher.due():
                try:
                    watcher.check()
                except Exception as exc:  # never let a reload problem stop the logging
                    messages.warning("guard agent: policy watch: %r", exc)
    finally:
        log.close()
    return 0  # the pins stay: only `guard stop` removes them


if __name__ == "__main__":
    sys.exit(main())
