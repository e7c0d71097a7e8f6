"""detect's session: load detect.bpf.c, attach it, match its events against the rules, and hand
out alerts. No click, no printing, no formats::

    from ebpfkit.tools import detect
    with detect.open(rules=("my_rules.yaml",)) as session:
        for alert in session.alerts(timeout=60):    # Alert dataclasses, as they are raised
            print(alert.rule, alert.pid, alert.output)
        session.suppressed                           # rule -> matches the rate limit or fusing held back
        session.lost                                 # events the kernel dropped (ring buffer full)

The built-in rules (builtin_rules.yaml) come first unless ``builtin=False``; files given in
``rules`` (a file, or a directory of *.yaml) are read after them, in order, and may extend
them. Events lost in the kernel are raised as an alert of their own ("Events lost").

Bait files (``- bait:`` in a rules file) are planted or adopted when the session opens
(``session.baits``) and the planted ones removed when it closes. A rule whose action is kill
(or every rule, with ``action="kill"``; none, with ``action="alert"``) and whose condition the
kernel can decide alone (evt.type, and fields every bait event has) kills the process touching
a bait from the kernel, before the call returns: ``session.killing`` names those calls. Any
other rule whose action is kill (``session.killing_here``; none with ``action="alert"``) kills
from here when its alert is raised: SIGKILL to the alert's processes (``alert.killed``), after
their events, so what they did in between is done.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, replace

from ...errors import ConfigError
from ...sysinfo.processes import ancestors
from ..config import ToolConfig
from ..session import ToolSession
from . import baits as bait_files, prefilter, watch
from .alerts import Alert, Matcher
from .fields import EXEC, FIELDS, FILE_CALLS, EventFields

PROGRAM = os.path.join(os.path.dirname(__file__), "detect.bpf.c")
BUILTIN_RULES = os.path.join(os.path.dirname(__file__), "builtin_rules.yaml")
HOOK = ("raw tracepoint sched_process_exec, syscall tracepoints connect/bind/accept/accept4/dup/dup2/dup3/fcntl, "
        "setuid/setreuid/setresuid/capset, ptrace, init_module/finit_module, bpf, mount/fsopen")
FILE_HOOK = ("and, for watched files (baits, paths rules name), the exits of open/openat/openat2/creat, "
             "ftruncate, truncate, rename*, unlink*, write/pwrite64/writev/pwritev/pwritev2")
WATCH_MAX = 4096  # DETECT_WATCH_MAX
LOST_RULE = "Events lost"
THROTTLED_RULE = "Events throttled"
ACTIONS = ("alert", "kill")
# the BPF programs of each file call, and the syscall they hook (missing on some architectures)
FILE_PROGRAMS = {"open": ("detect_open_exit",), "openat": ("detect_openat_exit",),
                 "openat2": ("detect_openat2_exit",), "creat": ("detect_creat_exit",),
                 "truncate": ("detect_truncate",), "ftruncate": ("detect_ftruncate",), "rename": ("detect_rename",),
                 "renameat": ("detect_renameat",), "renameat2": ("detect_renameat2",), "unlink": ("detect_unlink",),
                 "unlinkat": ("detect_unlinkat",), "write": ("detect_write",), "pwrite64": ("detect_pwrite64",),
                 "writev": ("detect_writev",), "pwritev": ("detect_pwritev",), "pwritev2": ("detect_pwritev2",)}
WATCHED_CALLS = ("setuid", "setreuid", "setresuid", "capset", "ptrace", "init_module", "finit_module", "bpf",
                 "mount", "fsopen")


@dataclass(frozen=True)
class Config(ToolConfig):
    rules: tuple = ()          # rule files or directories of *.yaml, read after the built-in ones
    builtin: bool = True       # read the built-in rules first
    action: str | None = None  # "alert": nothing kills; "kill": every rule on bait files kills too; None: as each says
    throttle: int = 2000       # events a second one process may send; the rest are counted (0: no limit)

    def validate(self) -> None:
        if self.action is not None and self.action not in ACTIONS:
            raise ConfigError("action", f"must be alert or kill, not {self.action!r}")
        if not isinstance(self.throttle, int) or self.throttle < 0:
            raise ConfigError("throttle", f"must be a number of events a second (0: no limit), not {self.throttle!r}")
        if isinstance(self.rules, (str, bytes)) or not all(isinstance(r, str) for r in self.rules):
            raise ConfigError("rules", "must be a list of paths (files or directories)")
        for path in self.rules:
            if not os.path.exists(path):
                raise ConfigError("rules", f"{path} does not exist")
        if not self.builtin and not self.rules:
            raise ConfigError("rules", "no rules: give a rules file, or keep the built-in rules")

    def rule_files(self) -> list[str]:
        """The files to read, in order: the built-in ones, then each given (a directory's
        *.yaml/*.yml in name order)."""
        files = [BUILTIN_RULES] if self.builtin else []
        for path in self.rules:
            if os.path.isdir(path):
                files += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith((".yaml", ".yml")))
            else:
                files.append(path)
        return files


def load_ruleset(config: Config):
    """The rules a session would run (PolicyError, exit 2, for a bad file)."""
    from ...policy.rules import load_rules

    return load_rules(config.rule_files(), fields=FIELDS)


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    hook = HOOK

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        self.ruleset = load_ruleset(config)   # a bad rule file fails before anything is loaded
        rules = self.ruleset.rules.values()
        self.killing = prefilter.killing_calls(rules, config.action)
        kill_rules = {r.name for r in rules if any(prefilter.holds_for_every(r.condition, c) for c in self.killing)}
        # the other kill rules kill from here, once their alert is raised
        self.killing_here = set() if config.action == "alert" else {
            r.name for r in rules if r.enabled and r.action == "kill" and r.name not in kill_rules}
        self._matcher = Matcher(rules, actions={r.name: "kill" if r.name in kill_rules | self.killing_here
                                                else "alert" for r in rules}, can_match=prefilter.can_match)
        self._spared = set(ancestors(os.getpid()))  # never killed: this process and its ancestors
        self._obj = None
        self.watching: list[watch.Entry] = []  # baits first, then the paths rules name
        self.unwatched: list[str] = []         # paths rules name that do not exist here
        self.warnings: list[str] = []
        self.missing: list[str] = []           # watched calls this kernel has no tracepoint for
        if not prefilter.for_kind(rules, "file").never:
            self._plan_watching(rules)
        self.hook = HOOK + (f"; {FILE_HOOK}" if self.watching else "")
        try:
            spec = compile_bpf(PROGRAM)
            connect = prefilter.for_kind(rules, "connect")
            spec.rodata.update({
                "want_exec": not prefilter.for_kind(rules, "execve").never,
                "want_dup": not prefilter.for_kind(rules, "dup").never,
                "want_connect": not connect.never, "connect_any": connect.anything,
                "connect_fd_max": connect.fd_max, "bait_kill": _call_bits(self.killing),
                "watch_dirs": any(e.is_dir for e in self.watching), "throttle_per_s": config.throttle,
                **{f"want_{kind}": not prefilter.for_kind(rules, kind).never
                   for kind in ("privilege", "ptrace", "module", "bpf", "mount")}})
            self.missing = select_programs(spec, files=bool(self.watching))
            self._obj = spec.load()
            if self.missing:
                self.hook += f" (no tracepoint here for {', '.join(self.missing)}: not watched)"
            comms = self._obj.maps["connect_comms"]
            for comm in connect.comms:
                comms[comm.encode()] = 1
            self._watch()
            self._obj.attach()
            self._reader = self._obj.ring_buffer("events", event_type="detect_event")
        except BaseException:
            self.close()
            raise
        self._epoch_offset_ns = time.time_ns() - time.monotonic_ns()
        self._processes: dict[int, dict] = {}
        self._containers: dict[int, str] = {}
        self._lost_seen = 0
        self._throttled_seen = 0
        self._held: dict[int, tuple] = {}  # tgid -> (held back, second first seen, comm), not reported yet
        self._held_seen: dict[int, int] = {}  # tgid -> the kernel's running total at the last look

    def _plan_watching(self, rules) -> None:
        """The baits (planted now, before anything is attached: detect's own writes are not
        events) and the paths the rules name."""
        baits, self.warnings = bait_files.place(self.ruleset.baits.values())
        files, dirs = prefilter.named_paths(rules)
        named, self.unwatched = watch.resolve(files - {b.path for b in baits}, dirs)
        if len(baits) + len(named) > WATCH_MAX:
            bait_files.remove_planted(baits)
            raise ConfigError("rules", f"{len(baits) + len(named)} files and directories to watch, "
                                       f"more than {WATCH_MAX}")
        self.watching = baits + named

    def _watch(self) -> None:
        keys, names, dir_names, flags = (self._obj.maps[m] for m in
                                         ("watch_keys", "watch_names", "watch_dir_names", "watch_flags"))
        self._watched = watch.Watched(self.watching)
        for index, entry in enumerate(self.watching):
            keys[{"dev": entry.key[0], "ino": entry.key[1]}] = {"id": index}
            (dir_names if entry.is_dir else names)[entry.name_key] = {"id": index}
            flags[index] = entry.flags

    @property
    def baits(self) -> list[watch.Entry]:
        """The bait files watched (planted or adopted)."""
        return [e for e in self.watching if e.bait]

    @property
    def lost(self) -> int:
        return self._reader.lost or 0

    @property
    def suppressed(self) -> dict[str, int]:
        return dict(self._matcher.suppressed)

    def alerts(self, timeout: float | None = None):
        """Yield alerts as they are raised, for ``timeout`` seconds (None: until Ctrl-C)."""
        end = None if timeout is None else time.monotonic() + timeout
        while end is None or time.monotonic() < end:
            wait = 0.1 if end is None else max(0.0, min(0.1, end - time.monotonic()))
            yield from self.poll(int(wait * 1000))
        yield from self._matcher.due(time.monotonic(), everything=True)

    def poll(self, timeout_ms: int = 100) -> list[Alert]:
        """The alerts raised by the events available now (waiting up to ``timeout_ms`` for
        the first), and the fused alerts whose window ended."""
        deadline = self._matcher.next_deadline()
        if deadline is not None:
            timeout_ms = max(0, min(timeout_ms, int((deadline - time.monotonic()) * 1000) + 1))
        out: list[Alert] = []
        # the kernel wakes this reader only when events pile up (detect.bpf.c's submit()):
        # what came without a wakeup is read once the wait is over
        records = self._reader.read_batch(timeout_ms)
        records += self._reader.read_batch(0)
        for record in records:
            out += self._matcher.feed(self._fields(record), time.monotonic())
        out += self._matcher.due(time.monotonic())
        out = [replace(a, killed=self._kill(a.pids or (a.pid,))) if a.rule in self.killing_here else a
               for a in out]
        if self._held or self.throttled > self._throttled_seen:
            out += self._throttled_alerts()
        if self.lost > self._lost_seen:
            out.append(self._lost_alert(self.lost - self._lost_seen))
            self._lost_seen = self.lost
        return out

    def _kill(self, pids) -> tuple[int, ...]:
        """SIGKILL to each of ``pids`` that is still there (never init, never this process or its
        ancestors); those it reached. From user space, so after the events: what a process did
        in between is done (a bait's kill, in the kernel, comes before its call returns)."""
        killed = []
        for pid in pids:
            if pid <= 1 or pid in self._spared:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # gone already; not ours to kill
                continue
            killed.append(pid)
        return tuple(killed)

    def _fields(self, record) -> EventFields:
        fields = EventFields(record, record.ts + self._epoch_offset_ns, self._container, self._processes,
                             self._watched)
        if record.kind == EXEC:  # what later events of the process will say of it (whatever reads it)
            if len(self._processes) > 65536:
                self._processes.clear()
            fields.process()
        return fields

    def _container(self, cgroup_id: int) -> str:
        if cgroup_id not in self._containers:
            from ...sysinfo.cgroups import cgroup_path
            from ...sysinfo.containers import parse_container

            path = cgroup_path(cgroup_id)
            container = parse_container(path) if path else None
            self._containers[cgroup_id] = container.short_id if container else "host"
        return self._containers[cgroup_id]

    @property
    def throttled(self) -> int:
        """Events held back (counted, not sent) because their process was over its budget."""
        return int(self._obj.maps["throttled"][0].sum()) if self._obj is not None else 0

    def _throttled_alerts(self) -> list[Alert]:
        """Per process with events held back, an alert at the first poll of a second after the
        one it was first seen holding some: what was held since its last alert, so a flood
        that goes on is reported about once a second, and no second is missed when detect falls
        behind (the kernel keeps each process's running total)."""
        from ...sysinfo.processes import name_of

        if self.throttled > self._throttled_seen:
            self._throttled_seen = self.throttled
            now = time.monotonic_ns() // 1_000_000_000  # the kernel's clock, in seconds
            totals = {int(tgid): int(t.held_total) for tgid, t in self._obj.maps["throttles"].items()}
            for tgid, total in totals.items():
                seen = self._held_seen.get(tgid, 0)
                if total < seen:  # evicted from the LRU map and back: counting from 0
                    seen = 0
                if total > seen:  # the name is read once, while the process is likely still there
                    held, since, comm = self._held.get(tgid, (0, now, None))
                    self._held[tgid] = (held + total - seen, since, comm or name_of(tgid) or "?")
                    self._held_seen[tgid] = total
            for gone in self._held_seen.keys() - totals.keys():
                del self._held_seen[gone]
        alerts, this_second = [], time.monotonic_ns() // 1_000_000_000  # the kernel's clock
        for tgid, (held, since, comm) in list(self._held.items()):
            if since >= this_second:
                continue
            del self._held[tgid]
            alerts.append(Alert(
                time_ns=time.time_ns(), rule=THROTTLED_RULE, priority="WARNING", techniques=(),
                output=f"{comm} (pid {tgid}) sent more than {self.config.throttle} events a second: {held} "
                       f"more were counted, not matched (a flood, or a process hiding in one)",
                action="alert", pid=tgid, container="host", process_tree=((tgid, comm),),
                event={"held": held, "limit": self.config.throttle}))
        return alerts

    def _lost_alert(self, count: int) -> Alert:
        return Alert(time_ns=time.time_ns(), rule=LOST_RULE, priority="WARNING", techniques=(),
                     output=f"{count} events lost (the ring buffer was full): rules did not see them",
                     action="alert", pid=0, container="host", process_tree=(), event={"lost": count})

    def close(self) -> None:
        if self._obj is not None:
            self._obj.close()
            self._obj = None
        bait_files.remove_planted(self.watching)
        self.watching = []


def select_programs(spec, files: bool) -> list[str]:
    """Leave out of ``spec`` what is not attached here: the file programs unless files are
    watched, and those of calls this kernel has no tracepoint for (open(2) and friends on
    arm64; init_module and finit_module without CONFIG_MODULES). The watched calls left out."""
    from ...engine import features

    for call, programs in FILE_PROGRAMS.items():
        exists = files and features.have_tracepoint("syscalls", f"sys_enter_{call}")
        for name in programs:
            spec.programs[name].autoload = exists
    missing = [call for call in WATCHED_CALLS if not features.have_tracepoint("syscalls", f"sys_enter_{call}")]
    for call in missing:
        spec.programs[f"detect_{call}"].autoload = False
    return missing


def _call_bits(calls) -> int:
    """bait_kill's bits: 1 << enum detect_file_call of each call."""
    return sum(1 << number for number, name in FILE_CALLS.items() if name in calls)


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start detecting with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
