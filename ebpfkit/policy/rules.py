"""Detection rules: a Falco-compatible subset of its rules files.

A file is a YAML list of items, each one of::

    - list: shell_binaries
      items: [bash, sh, dash]
    - macro: spawned_shell
      condition: evt.type = execve and proc.name in (shell_binaries)
    - rule: Shell spawned by a web server
      desc: ...
      condition: spawned_shell and proc.pname in (nginx, httpd)
      output: "Shell under a web server (proc=%proc.name pid=%proc.pid parent=%proc.pname)"
      priority: WARNING
      tags: [process, mitre_execution, T1059.004]
      exceptions:
        - name: trusted_scripts
          fields: [proc.name, proc.pname]
          values: [[sh, nginx]]
      enabled: true
      action: alert            # ebpfkit: or kill (the process: on a bait, from the kernel)
      fuse: proc.pid           # ebpfkit: one alert per value, gathering the events that match
      rate_limit: 20           # ebpfkit: alerts a second per process (default 20), the rest counted
    - bait: finance canaries   # ebpfkit: files kept as canaries (RuleSet.baits); the caller
      paths: [/srv/share/!0000-budget.xlsx]   # plants the missing ones (plant: false: adopts
      plant: true                             # only files that exist)

Falco's ``append: true`` extends a list, a macro or a rule's condition or exceptions defined
earlier (in this file or one loaded before it), and ``- rule: NAME`` with only ``enabled:``
switches one; conditions are parsed once every file is read, so a list extended by a later
file counts everywhere it is used. ``required_engine_version`` and ``required_plugin_versions``
items are accepted and ignored. Every error names the file and line. The fields a condition
may use are the caller's (``fields``): the policy layer knows rules, not events.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import yaml

from .condition import FIELD_NAME, And, ConditionError, FieldSpec, Node, Not, Or, Parser
from .loader import PolicyError, load_yaml, node_line, read_text

PRIORITIES = ("EMERGENCY", "ALERT", "CRITICAL", "ERROR", "WARNING", "NOTICE", "INFORMATIONAL", "DEBUG")
_PRIORITY_ALIASES = {"INFO": "INFORMATIONAL"}
ACTIONS = ("alert", "kill")
DEFAULT_RATE_LIMIT = 20.0
TECHNIQUE = re.compile(r"^T\d{4}(\.\d{3})?$")
_IGNORED_ITEMS = ("required_engine_version", "required_plugin_versions")
_KEYS = {
    "list": {"list", "items", "append"},
    "macro": {"macro", "condition", "append"},
    "rule": {"rule", "desc", "condition", "output", "priority", "tags", "exceptions", "enabled", "append",
             "action", "source", "warn_evttypes", "skip-if-unknown-filter", "fuse", "rate_limit"},
    "bait": {"bait", "paths", "plant", "append"},
}
KINDS = tuple(_KEYS)
_OUTPUT_FIELD = re.compile(r"%([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+(?:\[[^\]\s]+\])?)")


@dataclass(frozen=True)
class Rule:
    name: str
    condition: Node            # with its exceptions folded in
    output: str
    priority: str
    desc: str = ""
    tags: tuple[str, ...] = ()
    enabled: bool = True
    action: str = "alert"
    fuse: str | None = None    # a field: one alert per value of it
    rate_limit: float = DEFAULT_RATE_LIMIT   # alerts a second, for each process
    source: str = "<rules>"
    line: int = 0

    @property
    def techniques(self) -> tuple[str, ...]:
        """The MITRE ATT&CK technique ids among its tags (T1059, T1059.004, ...)."""
        return tuple(t for t in self.tags if TECHNIQUE.match(t))

    @cached_property
    def fields(self) -> frozenset[str]:
        """Every field its condition and output read."""
        return frozenset(self.condition.fields() | set(_OUTPUT_FIELD.findall(self.output)))

    def render(self, event: Mapping) -> str:
        """The output with each %field replaced by the event's value (<NA> when it has none)."""
        def value(m):
            v = event.get(m.group(1))
            return "<NA>" if v is None else str(v)
        return _OUTPUT_FIELD.sub(value, self.output)

    def matches(self, event: Mapping) -> bool:
        return self.enabled and self.condition.match(event)


@dataclass(frozen=True)
class Bait:
    """Canary files: nothing legitimate writes, renames or removes them (ransomware does)."""

    name: str
    paths: tuple[str, ...]     # absolute
    plant: bool = True         # create the missing ones; False: only files that exist are kept
    source: str = "<rules>"
    line: int = 0


@dataclass(frozen=True)
class _Where:
    source: str
    line: int | None


@dataclass(frozen=True)
class _Exception:
    label: str
    fields: tuple[str, ...]
    comps: tuple[str, ...]
    rows: tuple[tuple[tuple, _Where], ...]   # (values, where), a value a tuple for in-style comps


@dataclass
class _RuleDef:
    """A rule as written, kept until every file is read: a list appended to in a later file
    changes what its condition means (as in Falco)."""

    name: str
    condition: str
    condition_at: _Where
    output: str
    priority: str
    desc: str
    tags: tuple[str, ...]
    enabled: bool
    action: str
    fuse: str | None
    rate_limit: float
    at: _Where
    appended: list[tuple[str, str, _Where]] = field(default_factory=list)   # ("and"|"or", text, where)
    exceptions: list[_Exception] = field(default_factory=list)


@dataclass
class RuleSet:
    """Lists, macros and rules of one or more files; ``rules`` are compiled from them as they
    stand after the last file (``compile()``, which the loaders call)."""

    lists: dict[str, tuple] = field(default_factory=dict)
    macros: dict[str, tuple[str, _Where]] = field(default_factory=dict)   # name -> (condition text, where)
    definitions: dict[str, _RuleDef] = field(default_factory=dict)
    rules: dict[str, Rule] = field(default_factory=dict)                 # in the order defined
    baits: dict[str, Bait] = field(default_factory=dict)
    fields: Mapping[str, FieldSpec] | None = None

    def enabled(self) -> list[Rule]:
        return [r for r in self.rules.values() if r.enabled]

    def compile(self) -> "RuleSet":
        self.rules = _Compiler(self).rules()
        return self


def load_rules(paths, fields: Mapping[str, FieldSpec] | None = None, base: RuleSet | None = None) -> RuleSet:
    """The rules of these files, in order, each able to extend what the ones before defined."""
    ruleset = base or RuleSet(fields=fields)
    for path in paths:
        _Reader(path, ruleset).read(read_text(path, "the rules file"))
    return ruleset.compile()


def parse_rules(text: str, source: str = "<rules>", fields: Mapping[str, FieldSpec] | None = None,
                ruleset: RuleSet | None = None) -> RuleSet:
    ruleset = ruleset or RuleSet(fields=fields)
    _Reader(source, ruleset).read(text)
    return ruleset.compile()


def read_baits(path: str) -> list[Bait]:
    """The ``- bait:`` items of one rules file, alone: what another reader (the guard, which
    denies changes to them) needs of it. Its rules, lists and macros are not read (they may
    extend the built-in ones of the detector, which this reader does not have)."""
    ruleset = RuleSet()
    _Reader(path, ruleset, only=("bait",)).read(read_text(path, "the rules file"))
    return list(ruleset.baits.values())


class _Reader:
    """One file's items into the rule set, checked for shape (conditions are the compiler's);
    ``only``: the kinds of item to read, the others skipped."""

    def __init__(self, source: str, ruleset: RuleSet, only: tuple[str, ...] = KINDS):
        self.source, self.ruleset, self.only = source, ruleset, only

    def at(self, node) -> _Where:
        return _Where(self.source, node_line(node))

    def error(self, message: str, node: yaml.Node | None) -> PolicyError:
        return PolicyError(message, None if node is None else node_line(node), self.source)

    def read(self, text: str) -> None:
        root = load_yaml(text, self.source)
        if root is None:
            return
        if not isinstance(root, yaml.SequenceNode):
            raise self.error("a rules file is a list of items (- rule:, - macro:, - list:)", root)
        for item in root.value:
            if not isinstance(item, yaml.MappingNode):
                raise self.error("each item is a mapping (- rule: NAME, - macro: NAME or - list: NAME)", item)
            keys = {self._key(k): (k, v) for k, v in item.value}
            kind = next((k for k in KINDS if k in keys), None)
            if kind is None:
                if any(k in keys for k in _IGNORED_ITEMS):
                    continue
                raise self.error(f"an item must be a rule, a macro, a list or a bait; found "
                                 f"{', '.join(keys) or 'nothing'}", item)
            if kind not in self.only:
                continue
            unknown = sorted(set(keys) - _KEYS[kind])
            if unknown:
                raise self.error(f"{kind} {self._scalar(keys[kind][1], kind)!r}: unknown key {unknown[0]!r} "
                                 f"(known: {', '.join(sorted(_KEYS[kind]))})", keys[unknown[0]][0])
            {"list": self._list, "macro": self._macro, "rule": self._rule, "bait": self._bait}[kind](
                {k: v for k, (_, v) in keys.items()}, item)

    # --- values ---

    def _key(self, node) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error("a key must be a plain word", node)
        return node.value

    def _scalar(self, node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.value == "" and node.tag.endswith("null"):
            raise self.error(f"{what} must be a single value", node)
        return node.value

    def _bool(self, node, what: str) -> bool:
        value = self._scalar(node, what).lower()
        if value not in ("true", "false", "yes", "no"):
            raise self.error(f"{what} must be true or false, got {value!r}", node)
        return value in ("true", "yes")

    def _strings(self, node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith("null"):
            return ()
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(f"{what} must be a list, as [a, b]", node)
        return tuple(self._scalar(n, f"each of {what}") for n in node.value)

    def _appends(self, keys) -> bool:
        return "append" in keys and self._bool(keys["append"], "append")

    # --- items ---

    def _list(self, keys, item) -> None:
        name = self._scalar(keys["list"], "list")
        if "items" not in keys:
            raise self.error(f"list {name!r} has no items", item)
        values = self._strings(keys["items"], f"list {name!r}'s items")
        expanded: list[str] = []
        for v in values:  # a list may name lists defined before it
            expanded.extend(self.ruleset.lists.get(v, (v,)))
        if self._appends(keys):
            if name not in self.ruleset.lists:
                raise self.error(f"list {name!r}: append: true, but no list {name!r} comes before it", item)
            expanded = [*self.ruleset.lists[name], *expanded]
        self.ruleset.lists[name] = tuple(expanded)

    def _macro(self, keys, item) -> None:
        name = self._scalar(keys["macro"], "macro")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise self.error(f"macro name {name!r}: letters, digits and _ only", keys["macro"])
        if "condition" not in keys:
            raise self.error(f"macro {name!r} has no condition", item)
        condition = self._scalar(keys["condition"], f"macro {name!r}'s condition")
        where = self.at(keys["condition"])
        if self._appends(keys):
            if name not in self.ruleset.macros:
                raise self.error(f"macro {name!r}: append: true, but no macro {name!r} comes before it", item)
            before, where = self.ruleset.macros[name][0], self.ruleset.macros[name][1]
            condition = f"({before}) {condition}"
        self.ruleset.macros[name] = (condition, where)

    def _bait(self, keys, item) -> None:
        import os

        name = self._scalar(keys["bait"], "bait")
        if "paths" not in keys:
            raise self.error(f"bait {name!r} has no paths", item)
        paths = self._strings(keys["paths"], f"bait {name!r}'s paths")
        for path in paths:
            if not os.path.isabs(path) or path.endswith("/"):
                raise self.error(f"bait {name!r}: {path!r} is not an absolute path of a file", keys["paths"])
        plant = self._bool(keys["plant"], "plant") if "plant" in keys else True
        baits = self.ruleset.baits
        if self._appends(keys):
            if name not in baits:
                raise self.error(f"bait {name!r}: append: true, but no bait {name!r} comes before it", item)
            before = baits[name]
            baits[name] = Bait(name, tuple(dict.fromkeys(before.paths + paths)), before.plant, before.source,
                               before.line)
            return
        if not paths:
            raise self.error(f"bait {name!r} has no paths", keys["paths"])
        where = self.at(item)
        baits[name] = Bait(name, paths, plant, where.source, where.line or 0)

    def _rule(self, keys, item) -> None:
        name = self._scalar(keys["rule"], "rule")
        defs = self.ruleset.definitions
        if self._appends(keys) or set(keys) == {"rule", "enabled"}:
            if name not in defs:
                what = "append: true" if self._appends(keys) else "sets enabled"
                raise self.error(f"rule {name!r} {what}, but no rule {name!r} comes before it", item)
            self._amend(defs[name], keys)
            return
        for required in ("condition", "output", "priority"):
            if required not in keys:
                raise self.error(f"rule {name!r} has no {required}", item)
        action = self._scalar(keys["action"], "action") if "action" in keys else "alert"
        if action not in ACTIONS:
            raise self.error(f"rule {name!r}: action must be {' or '.join(ACTIONS)}, got {action!r}", keys["action"])
        source = self._scalar(keys["source"], "source") if "source" in keys else "syscall"
        if source != "syscall":
            raise self.error(f"rule {name!r}: only syscall rules are supported, not source {source!r}",
                             keys["source"])
        output = self._scalar(keys["output"], f"rule {name!r}'s output").strip()  # a folded > ends in \n
        self._check_output(name, output, keys["output"])
        fuse = self._fuse(name, keys["fuse"]) if "fuse" in keys else None
        rate_limit = self._rate_limit(name, keys["rate_limit"]) if "rate_limit" in keys else DEFAULT_RATE_LIMIT
        defs.pop(name, None)  # a rule defined again replaces the first, and moves to the end
        defs[name] = _RuleDef(
            name=name, condition=self._scalar(keys["condition"], f"rule {name!r}'s condition"),
            condition_at=self.at(keys["condition"]), output=output, priority=self._priority(name, keys["priority"]),
            desc=self._scalar(keys["desc"], "desc") if "desc" in keys else "",
            tags=self._strings(keys["tags"], f"rule {name!r}'s tags") if "tags" in keys else (),
            enabled=self._bool(keys["enabled"], "enabled") if "enabled" in keys else True,
            action=action, fuse=fuse, rate_limit=rate_limit, at=self.at(item))
        if "exceptions" in keys:
            defs[name].exceptions.extend(self._exceptions(name, keys["exceptions"]))

    def _amend(self, rule: _RuleDef, keys) -> None:
        if "enabled" in keys:
            rule.enabled = self._bool(keys["enabled"], "enabled")
        if "condition" in keys:
            text = self._scalar(keys["condition"], f"rule {rule.name!r}'s condition")
            first, _, rest = text.strip().partition(" ")
            if first not in ("and", "or") or not rest.strip():
                raise self.error(f"rule {rule.name!r}: an appended condition starts with and or or, "
                                 f"then a condition", keys["condition"])
            rule.appended.append((first, rest, self.at(keys["condition"])))
        if "exceptions" in keys:
            rule.exceptions.extend(self._exceptions(rule.name, keys["exceptions"]))

    def _fuse(self, name: str, node) -> str:
        value = self._scalar(node, f"rule {name!r}'s fuse")
        fields = self.ruleset.fields
        if not FIELD_NAME.match(value) or fields is not None and value.partition("[")[0] not in fields:
            raise self.error(f"rule {name!r}: fuse names {value!r}, which is not a known field", node)
        return value

    def _rate_limit(self, name: str, node) -> float:
        value = self._scalar(node, f"rule {name!r}'s rate_limit")
        try:
            rate = float(value)
        except ValueError:
            rate = -1.0
        if not rate > 0:
            raise self.error(f"rule {name!r}: rate_limit is alerts a second, more than 0; got {value!r}", node)
        return rate

    def _priority(self, name: str, node) -> str:
        value = self._scalar(node, f"rule {name!r}'s priority").upper()
        value = _PRIORITY_ALIASES.get(value, value)
        if value not in PRIORITIES:
            raise self.error(f"rule {name!r}: priority {node.value!r} is not one of {', '.join(PRIORITIES)}", node)
        return value

    def _check_output(self, name: str, output: str, node) -> None:
        fields = self.ruleset.fields
        for f in _OUTPUT_FIELD.findall(output):
            if fields is not None and f.partition("[")[0] not in fields:
                raise self.error(f"rule {name!r}: its output names unknown field %{f}", node)

    def _exceptions(self, name: str, node) -> list[_Exception]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(f"rule {name!r}: exceptions must be a list", node)
        result = []
        for exc in node.value:
            if not isinstance(exc, yaml.MappingNode):
                raise self.error(f"rule {name!r}: each exception is a mapping with name, fields and values", exc)
            keys = {self._key(k): v for k, v in exc.value}
            unknown = sorted(set(keys) - {"name", "fields", "comps", "values"})
            if unknown or "name" not in keys or "fields" not in keys:
                what = f"unknown key {unknown[0]!r}" if unknown else "needs a name and fields"
                raise self.error(f"rule {name!r}: an exception {what}", exc)
            label = f"rule {name!r}, exception {self._scalar(keys['name'], 'name')!r}"
            single = isinstance(keys["fields"], yaml.ScalarNode)
            fields = (self._scalar(keys["fields"], "fields"),) if single else self._strings(keys["fields"], "fields")
            if "comps" in keys:
                comps = (self._scalar(keys["comps"], "comps"),) if single else self._strings(keys["comps"], "comps")
            else:
                comps = ("in",) if single else ("=",) * len(fields)
            if len(comps) != len(fields):
                raise self.error(f"{label}: {len(fields)} fields but {len(comps)} comps", keys["comps"])
            rows = self._exception_rows(label, keys.get("values"), len(fields), single)
            result.append(_Exception(label, fields, comps, tuple(rows)))
        return result

    def _exception_rows(self, label: str, node, width: int, single: bool) -> list:
        if node is None or isinstance(node, yaml.ScalarNode) and node.tag.endswith("null"):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(f"{label}: values must be a list", node)
        if single:  # fields: one field, values: the items it is compared with (by `in`)
            return [((tuple(self._scalar(n, "a value") for n in node.value),), self.at(node))]
        rows = []
        for row in node.value:
            values = self._strings(row, f"{label}'s values")
            if len(values) != width:
                raise self.error(f"{label}: a row of values has {len(values)} items for {width} fields", row)
            rows.append((values, self.at(row)))
        return rows


class _Compiler:
    """Conditions parsed with the lists and macros as they stand after the last file."""

    def __init__(self, ruleset: RuleSet):
        self.ruleset = ruleset
        self._trees: dict[str, Node] = {}
        self._expanding: list[str] = []

    def rules(self) -> dict[str, Rule]:
        compiled = {}
        for d in self.ruleset.definitions.values():
            condition = self.parse(d.condition, d.condition_at, f"rule {d.name!r}")
            for joiner, text, where in d.appended:
                extra = self.parse(text, where, f"rule {d.name!r}")
                condition = And((condition, extra)) if joiner == "and" else Or((condition, extra))
            if d.exceptions:
                condition = And((condition, Not(Or(tuple(self._exception(e) for e in d.exceptions)))))
            compiled[d.name] = Rule(name=d.name, condition=condition, output=d.output, priority=d.priority,
                                    desc=d.desc, tags=d.tags, enabled=d.enabled, action=d.action,
                                    fuse=d.fuse, rate_limit=d.rate_limit, source=d.at.source,
                                    line=d.at.line or 0)
        for name in self.ruleset.macros:  # a macro no rule uses is still checked
            self.macro(name)
        return compiled

    def parse(self, text: str, where: _Where, what: str) -> Node:
        parser = Parser(self.ruleset.lists, self.macro, self.ruleset.fields)
        try:
            return parser.parse(text)
        except ConditionError as exc:
            raise PolicyError(f"{what}: {exc}", where.line, where.source) from None

    def macro(self, name: str) -> Node:
        if name in self._trees:
            return self._trees[name]
        text, where = self.ruleset.macros[name]  # KeyError: the parser says "unknown macro"
        if name in self._expanding:
            cycle = " -> ".join([*self._expanding[self._expanding.index(name):], name])
            raise PolicyError(f"macros use each other in a cycle: {cycle}", where.line, where.source)
        self._expanding.append(name)
        try:
            self._trees[name] = self.parse(text, where, f"macro {name!r}")
        finally:
            self._expanding.pop()
        return self._trees[name]

    def _exception(self, exc: _Exception) -> Node:
        """True when any row of the exception matches: each field compared as its comp says
        (parsed as a condition, so it is typed and checked alike)."""
        matches: list[Node] = []
        for row, where in exc.rows:
            checks = []
            for f, comp, value in zip(exc.fields, exc.comps, row):
                rhs = f"({', '.join(_quote(v) for v in value)})" if isinstance(value, tuple) else _quote(value)
                checks.append(self.parse(f"{f} {comp} {rhs}", where, exc.label))
            matches.append(checks[0] if len(checks) == 1 else And(tuple(checks)))
        return Or(tuple(matches))


def _quote(value: str) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


__all__ = ["ACTIONS", "PRIORITIES", "Bait", "FieldSpec", "Rule", "RuleSet", "load_rules", "parse_rules",
           "read_baits"]
