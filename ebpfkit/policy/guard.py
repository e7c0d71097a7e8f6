"""The guard policy: protected paths, trusted programs, protected processes, mode.

    mode: enforce            # or audit: allow everything, log the same lines
    protect:
      - /etc/shadow          # the default operations: write, unlink, rename, link, setattr
      - path: /srv/config    # directories recursively
        deny: [read]         # added to the defaults
      - path: /srv/drop
        deny: [read]
        allow: [write]       # taken from them: only what `allow` does not name is denied
    trust:
      - path: /usr/sbin/backup
        inherit: true        # children (fork/exec) are trusted too
    processes:
      - /usr/sbin/sshd       # cannot be killed, ptraced, or have /proc/PID/mem written
    baits:                   # rules files of `ebpfkit detect`: their `- bait:` files are
      - /etc/ebpfkit/baits.yaml   # protected as `protect:` entries (start the guard after detect,
                                  # which plants them)
    interpreters:            # programs that run a file by reading it, beyond the known ones
      - /opt/python/bin/python3.12   # (shells, python, perl, ruby, node, php, ld.so ...)
    log:                     # the agent's own log, rotated by size (default: the
      size: 10M              # --log-size and --log-backup given to `guard start`)
      backups: 3
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import click
import yaml

from ..output.sizes import parse_size
from .loader import PolicyError, load_yaml, node_line, read_text
from .rules import read_baits

# bit per operation; the same values are in ebpfkit/tools/guard/guard.h
OPERATIONS = {"write": 1, "unlink": 2, "rename": 4, "link": 8, "setattr": 16, "read": 32, "exec": 64}
DEFAULT_DENY = ("write", "unlink", "rename", "link", "setattr")
MODES = ("enforce", "audit")
TOP_KEYS = ("mode", "protect", "trust", "processes", "interpreters", "baits", "log")


@dataclass(frozen=True)
class ProtectRule:
    path: str
    deny: tuple[str, ...] = DEFAULT_DENY  # what is denied: the defaults + `deny:` - `allow:`
    line: int = 0

    @property
    def mask(self) -> int:
        return sum(OPERATIONS[op] for op in self.deny)


@dataclass(frozen=True)
class TrustRule:
    path: str
    inherit: bool = False
    line: int = 0


@dataclass(frozen=True)
class ProcessRule:
    path: str
    line: int = 0


@dataclass
class GuardPolicy:
    mode: str = "enforce"
    protect: list[ProtectRule] = field(default_factory=list)
    trust: list[TrustRule] = field(default_factory=list)
    processes: list[ProcessRule] = field(default_factory=list)
    interpreters: list[str] = field(default_factory=list)  # beyond the known ones (core.py)
    log_size: int | None = None      # bytes before the agent's log is rotated (None: its option)
    log_backups: int | None = None   # rotated files kept
    source: str = "<policy>"

    def to_dict(self) -> dict:
        return {"mode": self.mode,
                "protect": [{"path": r.path, "deny": list(r.deny)} for r in self.protect],
                "trust": [{"path": r.path, "inherit": r.inherit} for r in self.trust],
                "processes": [r.path for r in self.processes],
                "interpreters": list(self.interpreters),
                "log": {"size": self.log_size, "backups": self.log_backups}}


class _Parser:
    def __init__(self, source: str):
        self.source = source

    def error(self, node, message: str) -> PolicyError:
        return PolicyError(message, node_line(node) if node is not None else None, self.source)

    def scalar(self, node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, f"{what} must be a single value, not a {_kind(node)}")
        return node.value

    def path(self, node, what: str) -> str:
        value = self.scalar(node, what)
        if not value or not value.startswith("/"):
            raise self.error(node, f"{what} must be an absolute path, got {value!r}")
        if "\0" in value:
            raise self.error(node, f"{what} contains a NUL byte")
        return os.path.normpath(value)

    def boolean(self, node, what: str) -> bool:
        value = self.scalar(node, what).lower()
        if value in ("true", "yes", "on"):
            return True
        if value in ("false", "no", "off"):
            return False
        raise self.error(node, f"{what} must be true or false, got {value!r}")

    def mapping(self, node, what: str, allowed: tuple[str, ...]) -> dict:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping, not a {_kind(node)}")
        items = {}
        for key, value in node.value:
            name = self.scalar(key, f"a key in {what}")
            if name not in allowed:
                raise self.error(key, f"unknown key {name!r} in {what} (allowed: {', '.join(allowed)})")
            if name in items:
                raise self.error(key, f"duplicate key {name!r} in {what}")
            items[name] = (key, value)
        return items

    def size(self, node, what: str) -> int:
        try:
            return parse_size(self.scalar(node, what))
        except click.BadParameter as exc:
            raise self.error(node, f"{what}: {exc.message}") from None

    def count(self, node, what: str) -> int:
        value = self.scalar(node, what)
        if not value.isdigit():
            raise self.error(node, f"{what} must be a whole number (0 or more), got {value!r}")
        return int(value)

    def sequence(self, node, what: str) -> list:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{what} must be a list, not a {_kind(node)}")
        return node.value

    def entry(self, node, what: str, allowed: tuple[str, ...]) -> tuple[str, dict]:
        """Either a bare path or a mapping with a 'path' key."""
        if isinstance(node, yaml.ScalarNode):
            return self.path(node, f"{what} path"), {}
        items = self.mapping(node, f"a {what} entry", allowed)
        if "path" not in items:
            raise self.error(node, f"a {what} entry needs a 'path'")
        return self.path(items["path"][1], f"{what} path"), items

    def operations(self, node, what: str) -> list[str]:
        ops = []
        for op_node in self.sequence(node, what):
            op = self.scalar(op_node, "an operation")
            if op not in OPERATIONS:
                raise self.error(op_node, f"unknown operation {op!r} in {what} (known: {', '.join(OPERATIONS)})")
            if op not in ops:
                ops.append(op)
        return ops

    def denied(self, item, fields: dict) -> tuple[str, ...]:
        """The defaults, plus `deny:`, less `allow:`: a rule that adds read or exec keeps the
        file from being changed, unless it says otherwise."""
        deny = self.operations(fields["deny"][1], "deny") if "deny" in fields else []
        allow = self.operations(fields["allow"][1], "allow") if "allow" in fields else []
        if "deny" in fields and not deny:
            raise self.error(fields["deny"][1], "deny must list at least one operation "
                             "(leave it out for the defaults)")
        both = [op for op in deny if op in allow]
        if both:
            raise self.error(fields["allow"][1], f"{', '.join(both)} both denied and allowed")
        ops = tuple(op for op in OPERATIONS if (op in DEFAULT_DENY or op in deny) and op not in allow)
        if not ops:
            raise self.error(item, "this rule denies nothing: allow takes away every operation")
        return ops

    def parse(self, root) -> GuardPolicy:
        policy = GuardPolicy(source=self.source)
        if root is None:
            raise PolicyError("empty policy: nothing to protect", None, self.source)
        top = self.mapping(root, "the policy", TOP_KEYS)
        if "mode" in top:
            key, node = top["mode"]
            policy.mode = self.scalar(node, "mode")
            if policy.mode not in MODES:
                raise self.error(node, f"mode must be one of {', '.join(MODES)}, got {policy.mode!r}")
        for item in self.sequence(top["protect"][1], "protect") if "protect" in top else []:
            path, fields = self.entry(item, "protect", ("path", "deny", "allow"))
            policy.protect.append(ProtectRule(path, self.denied(item, fields), node_line(item)))
        for item in self.sequence(top["baits"][1], "baits") if "baits" in top else []:
            rules_file = self.path(item, "a baits rules file")
            for bait in read_baits(rules_file):
                policy.protect.extend(ProtectRule(os.path.normpath(p), DEFAULT_DENY, node_line(item))
                                      for p in bait.paths)
        for item in self.sequence(top["trust"][1], "trust") if "trust" in top else []:
            path, fields = self.entry(item, "trust", ("path", "inherit"))
            inherit = self.boolean(fields["inherit"][1], "inherit") if "inherit" in fields else False
            policy.trust.append(TrustRule(path, inherit, node_line(item)))
        for item in self.sequence(top["processes"][1], "processes") if "processes" in top else []:
            path, _ = self.entry(item, "processes", ("path",))
            policy.processes.append(ProcessRule(path, node_line(item)))
        for item in self.sequence(top["interpreters"][1], "interpreters") if "interpreters" in top else []:
            policy.interpreters.append(self.path(item, "an interpreter"))
        if "log" in top:
            fields = self.mapping(top["log"][1], "log", ("size", "backups"))
            if "size" in fields:
                policy.log_size = self.size(fields["size"][1], "log size")
            if "backups" in fields:
                policy.log_backups = self.count(fields["backups"][1], "log backups")
        if not policy.protect and not policy.processes:
            raise self.error(root, "the policy protects nothing: add 'protect:', 'processes:' or 'baits:' entries")
        return policy


def _kind(node) -> str:
    return {yaml.ScalarNode: "single value", yaml.SequenceNode: "list",
            yaml.MappingNode: "mapping"}.get(type(node), "value")


def parse_guard_policy(text: str, source: str = "<policy>") -> GuardPolicy:
    """Parse and validate; PolicyError (with a line) for anything wrong. Paths are not
    resolved here: resolve() in ebpfkit.tools.guard does that at load and on every reload."""
    return _Parser(source).parse(load_yaml(text, source))


def load_guard_policy(path: str) -> GuardPolicy:
    return parse_guard_policy(read_text(path), path)
