"""The XDP filter: load xdp_filter.bpf.c with a rule set, attach and pin it, and change its
rules while it runs (see the program's header comment for the double-buffered tables).

    obj, tables = load_filter(rules)                  # for BPF_PROG_TEST_RUN, no device
    att = attach("eth1", rules=rules, netns="lab")    # attached and pinned; att.close()
    with open_pinned("eth1", "lab") as tables:        # another process, later
        tables.apply(add=[parse_rule("src 192.0.2.0/24")], delete=[3])
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ...engine.maps import PerCpu
from ...errors import ConfigError
from ..config import ToolConfig, check_choice
from . import pins
from .counters import ZERO, as_pair, counter, slot_names
from .rules import TABLES, Rule, RuleError, check_rules, decode_entries, entries, table_flags
from .modes import MODES, mode_enumerator, mode_name
from .tables import Tables

PROGRAM = os.path.join(os.path.dirname(__file__), "xdp_filter.bpf.c")
DEFAULT_MAX_RULES = 65536
MAX_RULES = 1 << 24
TOTALS = ("passed", "dropped", "would_drop", "matched", "malformed", "control")
RETIRED = 0  # the rule_stats slot keeping the counts of deleted rules
_CONTROL_MAPS = ("active", "set_gen", "barrier", "filter_conf", "rule_stats", "totals")
MAP_NAMES = tuple(f"{t}_{s}" for t in TABLES for s in "ab") + _CONTROL_MAPS


@dataclass(frozen=True)
class FilterConfig(ToolConfig):
    """How the filter runs (its rules are apart: they change while it runs); checked the same
    from the CLI, YAML or a notebook (ConfigError, exit 2)."""

    default_deny: bool = False
    dry_run: bool = False
    max_rules: int = DEFAULT_MAX_RULES
    mode: str = "auto"

    def validate(self) -> None:
        if not 1 <= self.max_rules <= MAX_RULES:
            raise ConfigError("max_rules", f"must be in 1..{MAX_RULES}, got {self.max_rules}")
        check_choice("mode", self.mode, MODES)

    def to_dict(self) -> dict:
        return {"default": "deny" if self.default_deny else "allow", "dry_run": self.dry_run,
                "max_rules": self.max_rules, "mode": self.mode}


class FilterTables(Tables):
    """The maps of one filter (its own fds): rules, counters, configuration."""

    MAP_NAMES = MAP_NAMES
    KIND = "XDP filter"
    COMMAND = "filter"
    PROGRAM = "xdp_filter"
    _texts: tuple | None = None  # ((active set, generation), rule_texts()) last decoded

    # --- configuration ---

    def write_config(self, conf: FilterConfig) -> None:
        self.maps["filter_conf"][0] = {"default_deny": conf.default_deny, "dry_run": conf.dry_run,
                                       "max_rules": conf.max_rules, "xdp_mode": mode_enumerator(conf.mode)}

    def config(self) -> FilterConfig:
        conf = self.maps["filter_conf"][0]
        return FilterConfig(bool(conf.default_deny), bool(conf.dry_run), conf.max_rules,
                            mode_name(conf.xdp_mode))

    @property
    def max_rules(self) -> int:
        return self.maps["rule_stats"].max_entries - 1

    # --- the two sets ---

    def active_set(self) -> int:
        return self.maps["active"][0] & 1

    def _gen(self, s: int) -> int:
        return self.maps["set_gen"][s]

    def _set_gen(self, s: int, gen: int) -> None:
        self.maps["set_gen"][s] = gen

    def _set_entries(self, s: int) -> list[tuple[str, dict, dict]]:
        suffix = "ab"[s]
        return [(t, k, v) for t in TABLES for k, v in self.maps[f"{t}_{suffix}"].items()]

    def rules(self, s: int | None = None) -> dict[int, Rule]:
        """The rules in effect (or of set ``s``), by id."""
        return decode_entries(self._set_entries(self.active_set() if s is None else s))

    def rule_texts(self) -> Mapping[int, str]:
        """The text of each rule in effect, by id, in id order. Decoded again only after a
        change (each bumps the generation of the set it makes active): a 5000-rule filter
        takes tens of ms to decode, and an exporter reads it at every scrape."""
        seen = self._rules_seen()
        if self._texts is not None and self._texts[0] == seen:
            return self._texts[1]
        texts = MappingProxyType({rid: str(r) for rid, r in sorted(self.rules(seen[0]).items())})
        if self._rules_seen() == seen:  # no change landed while we read: safe to keep
            self._texts = seen, texts
        return texts

    def _rules_seen(self) -> tuple[int, int]:
        """(active set, its generation): which rules are in effect at this moment."""
        active = self.active_set()
        return active, self._gen(active)

    def _write(self, sets, add: list, delete: list) -> None:
        """Delete and add (table, key, value) entries in each set of ``sets`` (0, 1 or both)."""
        sets = [sets] if isinstance(sets, int) else sets
        for s in sets:
            for table, key, _ in delete:
                self.maps[f"{table}_{'ab'[s]}"].delete(key)
        by_table: dict[str, list] = {}
        for table, key, value in add:
            by_table.setdefault(table, []).append((key, value))
        for table, pairs in by_table.items():
            encoded = self.maps[f"{table}_a"].encode_pairs(pairs)  # the sets' tables share types
            for s in sets:
                self.maps[f"{table}_{'ab'[s]}"].raw.update_many(encoded)

    def _clear_set(self, s: int) -> None:
        for t in TABLES:
            self.maps[f"{t}_{'ab'[s]}"].clear()

    def barrier(self) -> None:
        """Return once no XDP program that may have read the old ``active`` is still running:
        updating a map-in-map element waits for an RCU grace period."""
        self.maps["barrier"][0] = self.maps["active"].fd

    def _flip(self, to: int, flags: int) -> None:
        self.maps["active"][0] = to | flags
        self.barrier()

    def _resync(self) -> int:
        """The active set; if a crash left the other one behind, copy the active one over."""
        cur = self.active_set()
        if self._gen(cur) != self._gen(1 - cur):
            self._clear_set(1 - cur)
            self._write(1 - cur, self._set_entries(cur), [])
            self._set_gen(1 - cur, self._gen(cur))
        return cur

    # --- changing rules ---

    def load_initial(self, rules: list[Rule]) -> list[int]:
        """Fill both sets of a freshly loaded (not yet attached) filter."""
        check_rules(rules)
        self._check_room(len(rules))
        ids = list(range(1, len(rules) + 1))
        add = [e for rid, r in zip(ids, rules) for e in entries(r, rid)]
        self._write((0, 1), add, [])
        for s in (0, 1):
            self._set_gen(s, 1)
        self._set_gen(2, len(rules))
        self.maps["active"][0] = table_flags(rules)
        return ids

    def _check_room(self, count: int) -> None:
        if count > self.max_rules:
            raise RuleError(f"{count} rules do not fit: this filter holds at most {self.max_rules} "
                            "(attach again with a larger --max-rules)")

    def apply(self, add: list[Rule] = (), delete: list[int] = ()) -> list[int]:
        """Add and delete rules as one change: packets see all of it or none of it.
        Returns the ids given to the added rules."""
        with self._locked():
            return self._apply(list(add), list(dict.fromkeys(delete)))

    def _locked(self):
        return self.locked()

    def _apply(self, add: list[Rule], delete: list[int]) -> list[int]:
        cur = self._resync()
        existing = self.rules(cur)
        unknown = [rid for rid in delete if rid not in existing]
        if unknown:
            raise RuleError(f"no rule with id {', '.join(map(str, unknown))} "
                            f"(see `rules list`)")
        remaining = {rid: r for rid, r in existing.items() if rid not in set(delete)}
        check_rules(add, remaining)
        self._check_room(len(remaining) + len(add))
        ids = self._new_ids(len(add), existing)
        if not add and not delete:
            return []
        add_e = [e for rid, r in zip(ids, add) for e in entries(r, rid)]
        del_e = [e for rid in delete for e in entries(existing[rid], rid)]
        stats = self.maps["rule_stats"]
        stats.update_many([(rid, ZERO) for rid in ids])
        other, gen = 1 - cur, self._gen(cur) + 1
        self._write(other, add_e, del_e)
        self._set_gen(other, gen)
        self._flip(other, table_flags(list(remaining.values()) + add))  # packets use the new set
        self._retire(delete)
        self._write(cur, add_e, del_e)
        self._set_gen(cur, gen)
        return ids

    def _retire(self, ids: list[int]) -> None:
        """Fold the counts of deleted rules into the RETIRED slot, which keeps them in the
        totals, and zero their slots for reuse. Called after the flip: no packet can reach
        these rules any more, and the program never counts in the RETIRED slot."""
        if not ids:
            return
        stats = self.maps["rule_stats"]
        counts = self.rule_counters([RETIRED, *ids]).values()
        packets, nbytes = sum(c[0] for c in counts), sum(c[1] for c in counts)
        # the sum in the first CPU's value, nothing in the others'
        first = {"packets": packets, "bytes": nbytes}
        stats[RETIRED] = PerCpu([first] + [ZERO] * (stats.raw.ncpus - 1))
        stats.update_many([(rid, ZERO) for rid in ids])

    def _new_ids(self, count: int, existing) -> list[int]:
        """Ids after the last one handed out (wrapping), never one in use: an id being
        deleted by this change may still be counted until the flip."""
        last, top, ids = self._gen(2), self.max_rules, []
        candidate = last
        while len(ids) < count:
            candidate = candidate % top + 1
            if candidate not in existing:
                ids.append(candidate)
        if ids:
            self._set_gen(2, ids[-1])
        return ids

    def replace(self, rules: list[Rule]) -> tuple[list[int], list[int]]:
        """Make the rule set exactly ``rules`` (kept rules keep their ids and counters)."""
        with self._locked():
            return self._replace(rules)

    def _replace(self, rules: list[Rule]) -> tuple[list[int], list[int]]:
        current = self.rules(self._resync())
        by_match = {r.match_key: rid for rid, r in current.items()}
        wanted = {r.match_key for r in rules}
        delete = [rid for key, rid in by_match.items() if key not in wanted]
        add = [r for r in rules if r.match_key not in by_match]
        seen: set = set()
        for r in rules:
            if r.match_key in seen:
                raise RuleError(f"duplicate rule '{r}'")
            seen.add(r.match_key)
        return self._apply(add, delete), delete

    # --- counters ---

    def rule_counters(self, ids) -> dict[int, tuple[int, int]]:
        """(packets, bytes) per rule id, summed over CPUs."""
        stats = self.maps["rule_stats"]
        ids = list(ids)
        if len(ids) > 512:  # one batch read of the slots up to the highest id in use
            values = dict(stats.head(max(ids) + 1))
            return {rid: as_pair(values[rid]) if rid in values else (0, 0) for rid in ids}
        return {rid: counter(stats, rid) for rid in ids}

    def totals(self, counters: dict | None = None) -> dict[str, tuple[int, int]]:
        """(packets, bytes) per action taken, and why. The program counts a packet no rule
        matched under its action; a matched one only under its rule (one counter update per
        packet). Matched packets all take the action opposite the default, so their sum is
        added there. ``counters``: rule_counters() of every rule in effect, if already read."""
        m = self.maps["totals"]
        counts = {name: counter(m, i) for i, name in enumerate(slot_names(m, "filter_stat", "FS_"))}
        if counters is None:
            counters = self.rule_counters(self.rules())
        matched = [*counters.values(), self.rule_counters([RETIRED])[RETIRED]]
        counts["matched"] = sum(c[0] for c in matched), sum(c[1] for c in matched)
        conf = self.config()
        fate = "passed" if conf.default_deny else "would_drop" if conf.dry_run else "dropped"
        counts[fate] = counts[fate][0] + counts["matched"][0], counts[fate][1] + counts["matched"][1]
        return {name: counts[name] for name in TOTALS}


# --- loading and attaching -----------------------------------------------------------------------

def load_filter(rules: list[Rule] = (), config: FilterConfig = FilterConfig()):
    """Compile and load the filter with ``rules`` in both sets (nothing attached):
    returns (engine Object, FilterTables). Close both."""
    from ...engine import compile as compile_bpf

    rules = list(rules)
    if len(rules) > config.max_rules:
        raise RuleError(f"{len(rules)} rules do not fit in --max-rules {config.max_rules}")
    spec = compile_bpf(PROGRAM)
    spec.rodata.update({"default_deny": int(config.default_deny), "dry_run": int(config.dry_run)})
    for t in TABLES:
        # a port rule without protocol is 4 entries; 64k entries cover every port of a protocol
        size = config.max_rules if t != "ports" else min(4 * config.max_rules, 65536)
        for s in "ab":
            spec.maps[f"{t}_{s}"].max_entries = max(size, 1)
    spec.maps["rule_stats"].max_entries = config.max_rules + 1
    obj = spec.load()
    try:
        tables = FilterTables.of_object(obj)
        tables.write_config(config)
        tables.load_initial(rules)
    except BaseException:
        obj.close()
        raise
    return obj, tables


def attach(iface_name: str, rules: list[Rule] = (), config: FilterConfig = FilterConfig(),
           netns: str | None = None, persistent: bool = True) -> pins.Attachment:
    """Load the filter with ``rules`` and attach it to the interface; pinned if ``persistent``."""
    iface = pins.lookup_iface(iface_name, netns)
    return pins.attach(lambda: load_filter(rules, config), "xdp_filter", iface, config.mode, "filter",
                       persistent)


def open_pinned(iface_name: str, netns: str | None = None) -> FilterTables:
    """The tables of the filter attached to the interface (by another process)."""
    return FilterTables.open_attached(iface_name, netns)


def detach(iface_name: str, netns: str | None = None) -> bool:
    """Detach the filter from the interface and remove its pins (see pins.detach_iface)."""
    return pins.detach_iface(iface_name, netns)
