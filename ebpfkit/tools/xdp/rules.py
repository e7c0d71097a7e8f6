"""Filter rules: parsing (flags, rule strings, YAML files), validation, and the map entries
each rule becomes in xdp_filter.bpf.c's tables.

A rule matches on at most one CIDR (source or destination), optionally narrowed by an L4
protocol and one port; or on a protocol and/or port alone. Every rule has the same action:
drop, or under ``default: deny`` allow. Examples (flag form and YAML form say the same)::

    src 10.0.0.0/8                      - src: 10.0.0.0/8
    dst 2001:db8::/32 proto tcp dport 22  - {dst: "2001:db8::/32", proto: tcp, dport: 22}
    proto icmp                          - proto: icmp
    udp sport 53  (= proto udp sport 53)  - {proto: udp, sport: 53}

Two CIDRs of the same trie (direction and family) may not nest: the kernel would only ever
see the longer one, so the shorter rule would silently stop matching part of its range.
Such rules, and duplicates, are refused. Across tables the order is: source CIDR, then
destination CIDR, then port/protocol; the first rule that matches counts the packet.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from ...errors import EbpfkitError

PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51, "icmpv6": 58,
             "ipv6-icmp": 58, "sctp": 132, "udplite": 136}
PROTO_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 47: "gre", 50: "esp", 51: "ah", 58: "icmpv6",
               132: "sctp", 136: "udplite"}
PORT_PROTOCOLS = (6, 17, 132, 136)  # what "a port, any protocol" means
TABLES = ("src4", "dst4", "src6", "dst6", "ports")

# Rules are checked and turned into map entries before any program is loaded, so these
# constants of xdp_filter.h are needed without its BTF: a test compares them with the
# object's enums (rule_port_dir, active_bits). Map keys and values are dicts of the
# header's struct fields, encoded through the maps' BTF.
PORT_NONE, PORT_DST, PORT_SRC = 0, 1, 2
HAS_SRC4, HAS_DST4, HAS_SRC6, HAS_DST6 = 1 << 1, 1 << 2, 1 << 3, 1 << 4
HAS_PORT_DST, HAS_PORT_SRC, HAS_PROTO = 1 << 5, 1 << 6, 1 << 7
_CIDR_FLAGS = {(True, 4): HAS_SRC4, (False, 4): HAS_DST4, (True, 6): HAS_SRC6, (False, 6): HAS_DST6}
_PORT_FLAGS = {PORT_DST: HAS_PORT_DST, PORT_SRC: HAS_PORT_SRC, PORT_NONE: HAS_PROTO}


def _net_key(net) -> tuple | None:
    return None if net is None else (net.version, int(net.network_address), net.prefixlen)


def table_flags(rules) -> int:
    """The active_bits saying which tables ``rules`` use."""
    flags = 0
    for r in rules:
        flags |= r.flags
    return flags


class RuleError(EbpfkitError):
    """A rule that cannot be used as written: bad CIDR, conflicting fields, overlap."""

    exit_code = 2  # a usage error


@dataclass(frozen=True)
class Rule:
    src: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    dst: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    proto: int | None = None
    dport: int | None = None
    sport: int | None = None
    comment: str = field(default="", compare=False)

    def __post_init__(self):
        if self.src is not None and self.dst is not None:
            raise RuleError(f"rule '{self}': match a source or a destination CIDR, not both "
                            "(write two rules)")
        if self.dport is not None and self.sport is not None:
            raise RuleError(f"rule '{self}': match one port, dport or sport, not both")
        if self.port is not None and self.proto is not None and self.proto not in PORT_PROTOCOLS:
            raise RuleError(f"rule '{self}': {proto_name(self.proto)} has no ports "
                            "(ports work with tcp, udp, sctp, udplite)")
        if not any(v is not None for v in (self.src, self.dst, self.proto, self.port)):
            raise RuleError("an empty rule would match everything: give src, dst, proto or a port")

    @property
    def cidr(self):
        return self.src if self.src is not None else self.dst

    @property
    def port(self) -> int | None:
        return self.dport if self.dport is not None else self.sport

    @property
    def port_dir(self) -> int:
        return PORT_DST if self.dport is not None else PORT_SRC if self.sport is not None else PORT_NONE

    @property
    def match_key(self) -> tuple:
        """What the rule matches (its identity for duplicates), without the comment."""
        return (_net_key(self.src), _net_key(self.dst), self.proto, self.dport, self.sport)

    @property
    def flags(self) -> int:
        """The bit of xdp_filter.h's active_bits for the table the rule lives in."""
        net = self.cidr
        if net is not None:
            return _CIDR_FLAGS[(self.src is not None, net.version)]
        return _PORT_FLAGS[self.port_dir]

    def __str__(self) -> str:
        parts = []
        if self.src is not None:
            parts += ["src", str(self.src)]
        if self.dst is not None:
            parts += ["dst", str(self.dst)]
        if self.proto is not None:
            parts += ["proto", proto_name(self.proto)]
        if self.dport is not None:
            parts += ["dport", str(self.dport)]
        if self.sport is not None:
            parts += ["sport", str(self.sport)]
        return " ".join(parts)

    def to_dict(self) -> dict:
        d = {k: v for k, v in (("src", self.src), ("dst", self.dst)) if v is not None}
        d = {k: str(v) for k, v in d.items()}
        if self.proto is not None:
            d["proto"] = proto_name(self.proto)
        for k in ("dport", "sport"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d


def proto_name(num: int) -> str:
    return PROTO_NAMES.get(num, str(num))


# --- parsing -----------------------------------------------------------------------------------

def parse_cidr(text: str, what: str = "CIDR"):
    """An IPv4/IPv6 network; a bare address is a /32 or /128. Host bits set is an error."""
    text = str(text).strip()
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        hint = ""
        try:
            net = ipaddress.ip_network(text, strict=False)
            hint = f" (did you mean {net}?)"
        except ValueError:
            pass
        raise RuleError(f"bad {what} '{text}': {exc}{hint}") from None


def parse_proto(text) -> int:
    if isinstance(text, int) or str(text).isdigit():
        num = int(text)
        if not 0 <= num <= 255:
            raise RuleError(f"bad protocol number {num}: 0-255")
        return num
    try:
        return PROTOCOLS[str(text).lower()]
    except KeyError:
        raise RuleError(f"unknown protocol '{text}' (use {', '.join(sorted(PROTOCOLS))} or a "
                        "number)") from None


def parse_port(text, what: str = "port") -> int:
    try:
        port = int(str(text).strip())
    except ValueError:
        raise RuleError(f"bad {what} '{text}': a number 1-65535") from None
    if not 1 <= port <= 65535:
        raise RuleError(f"bad {what} {port}: 1-65535")
    return port


def parse_proto_port(text: str, what: str) -> tuple[int | None, int]:
    """``22``, ``tcp:22`` or ``tcp/22``: (protocol or None, port)."""
    m = re.fullmatch(r"\s*(?:([A-Za-z0-9-]+)\s*[:/])?\s*(\S+)\s*", str(text))
    proto, port = m.groups() if m else (None, str(text))
    return (parse_proto(proto) if proto else None), parse_port(port, what)


_FIELDS = ("src", "dst", "proto", "dport", "sport", "comment")


def rule_from_dict(d: dict, where: str = "") -> Rule:
    """A rule from a mapping (a YAML list item, or parsed flags)."""
    if not isinstance(d, dict):
        raise RuleError(f"{where}a rule must be a mapping like {{src: 10.0.0.0/8}}, not {d!r}")
    unknown = set(d) - set(_FIELDS)
    if unknown:
        raise RuleError(f"{where}unknown rule field(s) {', '.join(sorted(map(str, unknown)))} "
                        f"(known: {', '.join(_FIELDS)})")
    try:
        return Rule(src=parse_cidr(d["src"], "source CIDR") if d.get("src") is not None else None,
                    dst=parse_cidr(d["dst"], "destination CIDR") if d.get("dst") is not None else None,
                    proto=parse_proto(d["proto"]) if d.get("proto") is not None else None,
                    dport=parse_port(d["dport"], "dport") if d.get("dport") is not None else None,
                    sport=parse_port(d["sport"], "sport") if d.get("sport") is not None else None,
                    comment=str(d.get("comment") or ""))
    except RuleError as exc:
        raise RuleError(f"{where}{exc}") from None


def parse_rule(text: str) -> Rule:
    """A rule string: ``src 10.0.0.0/8 proto tcp dport 22``, ``src=10.0.0.0/8,dport=22`` or
    ``tcp dport 22`` (a bare protocol name is ``proto NAME``)."""
    tokens = [t for t in re.split(r"[\s,=]+", text.strip()) if t]
    d: dict = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i].lower()
        if tok in ("src", "dst", "proto", "dport", "sport"):
            if i + 1 >= len(tokens):
                raise RuleError(f"rule '{text}': '{tok}' needs a value")
            if tok in d:
                raise RuleError(f"rule '{text}': '{tok}' given twice")
            d[tok] = tokens[i + 1]
            i += 2
        elif tok in PROTOCOLS and "proto" not in d:
            d["proto"] = tok
            i += 1
        else:
            raise RuleError(f"rule '{text}': unexpected '{tokens[i]}' "
                            "(fields: src, dst, proto, dport, sport)")
    if not d:
        raise RuleError("empty rule")
    return rule_from_dict(d, f"rule '{text}': ")


def rules_from_flags(src=(), dst=(), proto=(), dport=(), sport=(), rule=()) -> list[Rule]:
    """One rule per flag value: --src/--dst CIDR, --proto P, --dport/--sport [PROTO:]PORT,
    and --rule 'full rule string'."""
    rules = [Rule(src=parse_cidr(c, "source CIDR")) for c in src]
    rules += [Rule(dst=parse_cidr(c, "destination CIDR")) for c in dst]
    rules += [Rule(proto=parse_proto(p)) for p in proto]
    for value in dport:
        p, port = parse_proto_port(value, "dport")
        rules.append(Rule(proto=p, dport=port))
    for value in sport:
        p, port = parse_proto_port(value, "sport")
        rules.append(Rule(proto=p, sport=port))
    rules += [parse_rule(r) for r in rule]
    return rules


@dataclass
class RuleFile:
    rules: list[Rule]
    default: str | None = None  # "allow" or "deny" if the file says
    dry_run: bool | None = None


def load_rule_file(path: str) -> RuleFile:
    """A YAML rule file::

        default: allow          # optional: allow (rules drop) or deny (rules allow)
        dry_run: false          # optional
        rules:
          - src: 192.0.2.0/24
          - {dst: 2001:db8::/32, proto: tcp, dport: 22, comment: ssh}

    A plain list of rules is accepted too.
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise RuleError(f"cannot read rule file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RuleError(f"rule file {path} is not valid YAML: {exc}") from None
    if doc is None:
        doc = {}
    if isinstance(doc, list):
        doc = {"rules": doc}
    if not isinstance(doc, dict):
        raise RuleError(f"rule file {path}: expected a mapping with 'rules:' or a list of rules")
    unknown = set(doc) - {"rules", "default", "dry_run"}
    if unknown:
        raise RuleError(f"rule file {path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    default = doc.get("default")
    if default is not None and default not in ("allow", "deny"):
        raise RuleError(f"rule file {path}: default must be allow or deny, not {default!r}")
    items = doc.get("rules") or []
    if not isinstance(items, list):
        raise RuleError(f"rule file {path}: 'rules' must be a list")
    rules = [rule_from_dict(item, f"{path}: rule {n}: ") for n, item in enumerate(items, 1)]
    dry = doc.get("dry_run")
    return RuleFile(rules, default, bool(dry) if dry is not None else None)


# --- map entries -------------------------------------------------------------------------------

def entries(rule: Rule, rule_id: int) -> list[tuple[str, dict, dict]]:
    """(table, key, value) for each map element the rule needs: struct lpm4_key/lpm6_key or
    port_key, and struct rule_val, as dicts of their fields."""
    value = {"id": rule_id, "proto": rule.proto or 0, "port_dir": rule.port_dir, "port": rule.port or 0}
    net = rule.cidr
    if net is not None:
        table = ("src" if rule.src is not None else "dst") + ("4" if net.version == 4 else "6")
        return [(table, {"prefixlen": net.prefixlen, "addr": net.network_address.packed}, value)]
    protos = [rule.proto] if rule.proto is not None else list(PORT_PROTOCOLS)
    return [("ports", {"proto": p, "dir": rule.port_dir, "port": rule.port or 0}, value) for p in protos]


def decode_entries(items: list[tuple[str, dict, dict]]) -> dict[int, Rule]:
    """The rules behind table entries (the inverse of ``entries``), by rule id."""
    by_id: dict[int, list] = {}
    for table, key, value in items:
        by_id.setdefault(value["id"], []).append((table, key, value))
    rules = {}
    for rid, parts in by_id.items():
        table, key, value = parts[0]
        proto, port_dir, port = value["proto"], value["port_dir"], value["port"]
        fields: dict = {}
        if table == "ports":
            protos = sorted(k["proto"] for _, k, _ in parts)
            fields["proto"] = None if protos == sorted(PORT_PROTOCOLS) and port_dir else protos[0]
        else:
            fields[table[:3]] = ipaddress.ip_network((bytes(key["addr"]), key["prefixlen"]))
            fields["proto"] = proto or None
        if port_dir == PORT_DST:
            fields["dport"] = port
        elif port_dir == PORT_SRC:
            fields["sport"] = port
        rules[rid] = Rule(**fields)
    return rules


# --- validation --------------------------------------------------------------------------------

def check_rules(new: list[Rule], existing: dict[int, Rule] | None = None) -> None:
    """Refuse duplicates and nesting CIDRs (within ``new`` and against ``existing``).

    Each rule is looked at once and named only in an error: a million rules are checked in
    about the time it takes to sort their CIDRs."""
    old = list((existing or {}).items())
    tagged = [r for _, r in old] + list(new)

    def label(i: int) -> str:
        name = f"rule {old[i][0]}" if i < len(old) else f"new rule {i - len(old) + 1}"
        return f"{name} ('{tagged[i]}')"

    seen: dict[tuple, int] = {}
    ports: dict[tuple, int] = {}
    tries: dict[tuple, list] = {}
    for i, rule in enumerate(tagged):
        net = rule.src if rule.src is not None else rule.dst
        if net is None:
            _check_port_rule(rule, i, seen, ports, label)
            continue
        start, prefixlen = int(net.network_address), net.prefixlen
        side = (rule.src is not None, net.version)
        key = (side, start, prefixlen, rule.proto, rule.dport, rule.sport)  # match_key, in short
        if key in seen:
            raise RuleError(f"duplicate rule '{rule}': same as {label(seen[key])}")
        seen[key] = i
        end = start | ((1 << (net.max_prefixlen - prefixlen)) - 1)
        tries.setdefault(side, []).append((start, prefixlen, end, i))
    for nets in tries.values():
        # CIDRs either nest or are disjoint: sorted by start (outer first), a block overlaps an
        # earlier one exactly when it starts before the furthest end seen so far
        nets.sort()
        far_end, far = -1, -1
        for start, _, end, i in nets:
            if start <= far_end:
                raise RuleError(f"rule '{tagged[i]}' overlaps {label(far)}: CIDRs of one "
                                "direction may not nest (the longer prefix would hide the other)")
            if end > far_end:
                far_end, far = end, i


def _check_port_rule(rule: Rule, i: int, seen: dict, ports: dict, label) -> None:
    key = rule.match_key
    if key in seen:
        raise RuleError(f"duplicate rule '{rule}': same as {label(seen[key])}")
    seen[key] = i
    for p in ([rule.proto] if rule.proto is not None else PORT_PROTOCOLS):
        pk = (p, rule.port_dir, rule.port)
        if pk in ports:
            raise RuleError(f"rule '{rule}' overlaps {label(ports[pk])}: both match "
                            f"{proto_name(p)} packets on that port")
        ports[pk] = i
