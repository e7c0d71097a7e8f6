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
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ...errors import ConfigError
from ..config import ToolConfig
from ..session import ToolSession
from . import prefilter
from .alerts import Alert, Matcher
from .fields import EXEC, FIELDS, EventFields

PROGRAM = os.path.join(os.path.dirname(__file__), "detect.bpf.c")
BUILTIN_RULES = os.path.join(os.path.dirname(__file__), "builtin_rules.yaml")
HOOK = "raw tracepoint sched_process_exec, syscall tracepoints connect/dup/dup2/dup3/fcntl"
LOST_RULE = "Events lost"


@dataclass(frozen=True)
class Config(ToolConfig):
    rules: tuple = ()          # rule files or directories of *.yaml, read after the built-in ones
    builtin: bool = True       # read the built-in rules first

    def validate(self) -> None:
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
        self._matcher = Matcher(self.ruleset.rules.values())
        self._obj = None
        spec = compile_bpf(PROGRAM)
        connect = prefilter.for_kind(self.ruleset.rules.values(), "connect")
        spec.rodata.update({
            "want_exec": not prefilter.for_kind(self.ruleset.rules.values(), "execve").never,
            "want_dup": not prefilter.for_kind(self.ruleset.rules.values(), "dup").never,
            "want_connect": not connect.never, "connect_any": connect.anything, "connect_fd_max": connect.fd_max})
        self._obj = spec.load()
        try:
            comms = self._obj.maps["connect_comms"]
            for comm in connect.comms:
                comms[comm.encode()] = 1
            self._obj.attach()
            self._reader = self._obj.ring_buffer("events", event_type="detect_event")
        except BaseException:
            self.close()
            raise
        self._epoch_offset_ns = time.time_ns() - time.monotonic_ns()
        self._processes: dict[int, dict] = {}
        self._containers: dict[int, str] = {}
        self._lost_seen = 0

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
        if self.lost > self._lost_seen:
            out.append(self._lost_alert(self.lost - self._lost_seen))
            self._lost_seen = self.lost
        return out

    def _fields(self, record) -> EventFields:
        fields = EventFields(record, record.ts + self._epoch_offset_ns, self._container, self._processes)
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

    def _lost_alert(self, count: int) -> Alert:
        return Alert(time_ns=time.time_ns(), rule=LOST_RULE, priority="WARNING", techniques=(),
                     output=f"{count} events lost (the ring buffer was full): rules did not see them",
                     action="alert", pid=0, container="host", process_tree=(), event={"lost": count})

    def close(self) -> None:
        if self._obj is not None:
            self._obj.close()
            self._obj = None


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start detecting with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
