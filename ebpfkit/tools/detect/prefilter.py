"""What the kernel may drop: for each kind of event, a condition every rule that can match
such an event needs, in terms the BPF program checks before it builds the event.

The rules are read as they are: a sound over-approximation of what they can match, per kind,
in a small language: nothing (no rule can match), anything, or "fd.num <= N or proc.name in
{...}" (fd.num and proc.name are what the program knows at a syscall's entry without reading
more). And keeps the condition of one of its parts, Or joins its parts', Not and every other
check keep anything. A rule file that matches connect() only on fd 0-2 or from shells thus
spares the kernel building an event for every other connect().
"""

from __future__ import annotations

from dataclasses import dataclass

from ...policy.condition import And, Check, Node, Not, Or
from .fields import FILE_CALLS

COMM_LEN = 15  # a task's comm: 16 bytes with the NUL; proc.name is that


@dataclass(frozen=True)
class Need:
    """What an event must satisfy to matter: ``never``; ``anything``; else fd.num <= fd_max
    (-1: no fd is enough) or proc.name in comms."""

    never: bool = False
    anything: bool = False
    fd_max: int = -1
    comms: frozenset = frozenset()


NEVER, ANYTHING = Need(never=True), Need(anything=True)
# "connect": the socket calls, which share one filter in the kernel
KINDS = {"execve": {"execve"}, "connect": {"connect", "bind", "accept", "accept4"}, "dup": {"dup", "dup2", "dup3", "fcntl"},
         "file": set(FILE_CALLS.values()), "privilege": {"setuid", "setreuid", "setresuid", "capset"},
         "ptrace": {"ptrace"}, "module": {"init_module", "finit_module"}, "bpf": {"bpf"},
         "mount": {"mount", "fsopen"}}
BAIT_FIELDS = frozenset({"bait.name", "fd.name", "evt.killed"})  # every bait event has them


def need(node: Node, types: set[str]) -> Need:
    """What ``node`` needs of an event whose evt.type is one of ``types``."""
    if isinstance(node, Check):
        return _check(node, types)
    if isinstance(node, And):
        parts = [need(c, types) for c in node.children]
        if any(p.never for p in parts):
            return NEVER
        return next((p for p in parts if not p.anything), ANYTHING)
    if isinstance(node, Or):
        parts = [p for p in (need(c, types) for c in node.children) if not p.never]
        if not parts:
            return NEVER
        if any(p.anything for p in parts):
            return ANYTHING
        return Need(fd_max=max(p.fd_max for p in parts), comms=frozenset().union(*(p.comms for p in parts)))
    if isinstance(node, Not):
        return ANYTHING
    return ANYTHING


def _check(check: Check, types: set[str]) -> Need:
    values = check.value if isinstance(check.value, tuple) else (check.value,)
    if check.field == "evt.type":
        if check.op in ("=", "=="):
            return ANYTHING if check.value in types else NEVER
        if check.op == "in":
            return ANYTHING if types & set(values) else NEVER
        return ANYTHING
    if check.field == "fd.num" and check.op in ("<=", "<", "=", "==", "in"):
        limit = max(values) - (1 if check.op == "<" else 0)
        return Need(fd_max=limit)
    if check.field == "proc.name" and check.op in ("=", "==", "in"):
        return Need(comms=frozenset(str(v)[:COMM_LEN] for v in values))
    return ANYTHING


def can_match(rule, evt_type: str) -> bool:
    """Whether ``rule``'s condition can hold for an event of ``evt_type`` (what its evt.type
    checks allow)."""
    return not need(rule.condition, {evt_type}).never


def for_kind(rules, kind: str) -> Need:
    """What an event of ``kind`` (a key of KINDS) needs for any enabled rule to match it."""
    return need(Or(tuple(r.condition for r in rules if r.enabled)), KINDS[kind])


def holds_for_every(node: Node, evt_type: str, present: frozenset = BAIT_FIELDS) -> bool:
    """Whether ``node`` is true of every event of ``evt_type`` that has the fields ``present``:
    what a rule must be for the kernel to act on it without asking user space (a kill). An
    under-approximation: only evt.type checks, ``exists`` of those fields, and and/or of them
    count; anything else (a Not, an exception, another field) is "not sure"."""
    if isinstance(node, Check):
        if node.field == "evt.type":
            values = node.value if isinstance(node.value, tuple) else (node.value,)
            if node.op in ("=", "=="):
                return node.value == evt_type
            if node.op == "in":
                return evt_type in values
            if node.op == "!=":
                return node.value != evt_type
            return False
        return node.op == "exists" and node.field in present
    if isinstance(node, And):
        return all(holds_for_every(c, evt_type, present) for c in node.children)
    if isinstance(node, Or):
        return any(holds_for_every(c, evt_type, present) for c in node.children)
    return False


def killing_calls(rules, action: str | None = None) -> set[str]:
    """The file calls (evt.type) on a bait that kill from the kernel: those some enabled rule
    whose action is kill (every rule's, with ``action`` "kill"; none with "alert") holds for."""
    if action == "alert":
        return set()
    killers = [r for r in rules if r.enabled and (action == "kill" or r.action == "kill")]
    return {call for call in FILE_CALLS.values() if any(holds_for_every(r.condition, call) for r in killers)}


def named_paths(rules) -> tuple[set[str], set[str]]:
    """The absolute paths enabled rules compare fd.name with (= or in: files) and fd.directory
    with (directories): what the kernel watches besides the baits. Where in a condition does
    not matter: watching a path no rule ends up matching costs only its events."""
    files: set[str] = set()
    dirs: set[str] = set()

    def walk(node: Node) -> None:
        if isinstance(node, Check):
            if node.field in ("fd.name", "fd.directory") and node.op in ("=", "==", "in"):
                values = node.value if isinstance(node.value, tuple) else (node.value,)
                target = files if node.field == "fd.name" else dirs
                target.update(str(v).rstrip("/") or "/" for v in values if str(v).startswith("/"))
        elif isinstance(node, (And, Or)):
            for child in node.children:
                walk(child)
        elif isinstance(node, Not):
            walk(node.child)

    for rule in rules:
        if rule.enabled:
            walk(rule.condition)
    return files, dirs
