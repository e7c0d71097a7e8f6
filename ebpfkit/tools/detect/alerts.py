"""From matching events to alerts: rules matched, fused and rate-limited.

A rule with ``fuse: FIELD`` raises one alert per value of the field (for the reverse-shell
rule, the network socket: the process that got it and every process it passed it to): the
first matching event opens a group, the events that match within ``window`` seconds join it,
and the alert, naming every event type and process seen, goes out when the window ends; later
matches of the same value are counted, not raised. Every rule is limited
to ``rate_limit`` alerts a second for each process (a token bucket holding one second's worth):
a process flooding a rule uses up its own alerts, not another's (a reverse shell started beside
a flood of decoy connects still raises its own). What the limit holds back is counted per rule.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

FUSE_WINDOW = 0.2        # seconds a fused group gathers events before its alert goes out
FUSED_KEYS_KEPT = 65536  # values of fused rules remembered (oldest forgotten first)
BUCKETS_KEPT = 65536     # (rule, process) rate limits remembered (least recently used forgotten)
EVENT_FIELDS = ("evt.type", "proc.pid", "thread.tid", "proc.name", "proc.exepath", "proc.cmdline", "proc.ppid",
                "proc.pname", "user.uid", "proc.stdin.type", "proc.stdout.type", "proc.stderr.type",
                "fd.num", "fd.oldnum", "fd.type", "fd.name", "socket.ino", "bait.name", "evt.arg.path",
                "evt.arg.newpath", "evt.killed", "evt.res", "fd.directory", "fd.filename")


@dataclass(frozen=True)
class Alert:
    time_ns: int                  # the (first) matching event's time, ns since the epoch
    rule: str
    priority: str
    techniques: tuple[str, ...]
    output: str                   # the rule's output, filled from the first event
    action: str
    pid: int
    container: str
    process_tree: tuple[tuple[int, str], ...]   # (pid, name) from the process up to its ancestors
    event: dict                   # the first event's fields that the rule and the alert use
    signals: tuple[str, ...] = ()  # a fused alert: each matching event's type, in order
    pids: tuple[int, ...] = ()     # a fused alert: the processes of those events, each once
    killed: tuple[int, ...] = ()   # a kill rule user space carried out: the processes it SIGKILLed

    def to_dict(self) -> dict:
        return {"time": self.time_ns / 1e9, "rule": self.rule, "priority": self.priority,
                "techniques": list(self.techniques), "output": self.output, "action": self.action,
                "pid": self.pid, "container": self.container,
                "process_tree": [{"pid": p, "name": n} for p, n in self.process_tree],
                "signals": list(self.signals), "pids": list(self.pids), "killed": list(self.killed),
                "event": self.event}


@dataclass
class _Group:
    rule: object
    first: Mapping             # the first event (its alert is built only if it goes out)
    deadline: float
    signals: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)

    def add(self, event: Mapping) -> None:
        self.signals.append(event.get("evt.type", "?"))
        pid = event.get("proc.pid")
        if pid not in self.pids:
            self.pids.append(pid)


class _Bucket:
    def __init__(self, rate: float):
        self.rate, self.tokens, self.at = rate, rate, None

    def take(self, now: float) -> bool:
        if self.at is not None:
            self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class Matcher:
    """``feed(event, now)``: the alerts this event raises now; ``due(now)``: fused alerts whose
    window has ended. ``now`` is a monotonic time in seconds. ``actions``: each rule's action as
    carried out (the kernel's kill, or an alert), where it differs from what the rule says."""

    def __init__(self, rules, window: float = FUSE_WINDOW, actions: Mapping[str, str] | None = None,
                 can_match=None):
        self.rules = [r for r in rules if r.enabled]
        self.window = window
        self.actions = actions or {}
        # can_match(rule, evt_type): False where its condition can never hold for that type;
        # an event is then matched against its type's rules only (a connect flood meets 3
        # rules, not 25)
        self._can_match = can_match
        self._by_type: dict[object, list] = {}
        self.suppressed: dict[str, int] = {}   # rule -> matches not raised (rate limit or fused)
        self._groups: dict[tuple[str, object], _Group] = {}
        self._fused: OrderedDict = OrderedDict()  # (rule, value) whose alert went out
        self._buckets: OrderedDict = OrderedDict()  # (rule, pid) -> _Bucket, least recently used first

    def feed(self, event: Mapping, now: float) -> list[Alert]:
        raised = []
        for rule in self._rules_for(event.get("evt.type")):
            if not rule.condition.match(event):
                continue
            if rule.fuse is None:
                if self._allowed(rule, now, event.get("proc.pid")):
                    raised.append(_alert(rule, event, self.actions.get(rule.name, rule.action)))
                continue
            key = (rule.name, event.get(rule.fuse))
            group = self._groups.get(key)
            if group is None and key in self._fused:
                self._count(rule.name)
                self._fused.move_to_end(key)
                continue
            if group is None:
                group = self._groups[key] = _Group(rule, event, now + self.window)
            group.add(event)
        return raised

    def _rules_for(self, evt_type) -> list:
        rules = self._by_type.get(evt_type)
        if rules is None:
            rules = self._by_type[evt_type] = [r for r in self.rules if self._can_match is None or evt_type is None
                                               or self._can_match(r, evt_type)]
        return rules

    def due(self, now: float, everything: bool = False) -> list[Alert]:
        """Fused alerts whose window ended (``everything``: all of them, at the end). Groups
        open in time order with one window, so they end in the order they were opened."""
        out = []
        while self._groups:
            key, group = next(iter(self._groups.items()))
            if not everything and group.deadline > now:
                break
            del self._groups[key]
            self._fused[key] = True
            if len(self._fused) > FUSED_KEYS_KEPT:
                self._fused.popitem(last=False)
            if self._allowed(group.rule, now, group.first.get("proc.pid")):
                action = self.actions.get(group.rule.name, group.rule.action)
                out.append(replace(_alert(group.rule, group.first, action), signals=tuple(group.signals),
                                   pids=tuple(group.pids)))
        return out

    def next_deadline(self) -> float | None:
        return next(iter(self._groups.values())).deadline if self._groups else None

    def _allowed(self, rule, now: float, pid) -> bool:
        key = (rule.name, pid)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(rule.rate_limit)
            if len(self._buckets) > BUCKETS_KEPT:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        if bucket.take(now):
            return True
        self._count(rule.name)
        return False

    def _count(self, name: str) -> None:
        self.suppressed[name] = self.suppressed.get(name, 0) + 1


_SHOWN: dict[str, tuple[str, ...]] = {}


def _shown(rule) -> tuple[str, ...]:
    """The fields an alert of ``rule`` carries: the usual ones and every one the rule reads."""
    if rule.name not in _SHOWN:
        _SHOWN[rule.name] = tuple(sorted(set(EVENT_FIELDS) | rule.fields))
    return _SHOWN[rule.name]


def _alert(rule, event: Mapping, action: str) -> Alert:
    fields = {name: value for name in _shown(rule) if (value := event.get(name)) is not None}
    tree = [(event.get("proc.pid"), event.get("proc.name"))]
    for i in range(1, 5):
        if event.get(f"proc.apid[{i}]") is None:
            break
        tree.append((event.get(f"proc.apid[{i}]"), event.get(f"proc.aname[{i}]")))
    return Alert(time_ns=event.get("evt.time", 0), rule=rule.name, priority=rule.priority,
                 techniques=rule.techniques, output=rule.render(event), action=action,
                 pid=event.get("proc.pid", 0), container=event.get("container.id", "host"),
                 process_tree=tuple(tree), event=fields)
