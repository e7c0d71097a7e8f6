"""xdp: an XDP packet filter and an XDP L4 load balancer (Maglev, direct server return).

`attach` leaves the program running after the command exits (pinned under
/sys/fs/bpf/ebpfkit/xdp/<iface>[@<netns>]/); `rules`, `backend` and `stats` work on those pins
from any later command; `detach` removes it. `run` is the foreground form: attached until
Ctrl-C/SIGTERM; it pins nothing (`rules`, `stats` find it through the program the
interface runs), so the kernel detaches and frees it even after a SIGKILL.
"""

from __future__ import annotations

import contextlib

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, interval_arguments, live_intervals
from .modes import MODES

FILTER_EXAMPLES = """\b
Examples:
  ebpfkit xdp filter attach --iface eth1 --src 192.0.2.0/24 --dport tcp:23
  ebpfkit xdp filter attach --iface eth1 -f rules.yaml --mode generic
  ebpfkit xdp filter attach --iface eth1 --default deny --dport tcp:22 --proto icmp
  ebpfkit xdp filter attach --iface veth0 --netns lab --dry-run -r 'src 10.0.0.0/8 proto udp'
  ebpfkit xdp filter rules add --iface eth1 --src 2001:db8::/32
  ebpfkit xdp filter rules del --iface eth1 3
  ebpfkit xdp filter rules list --iface eth1
  ebpfkit xdp filter stats --iface eth1 1 5
  ebpfkit xdp filter run --iface eth1 --src 198.51.100.0/24 1
  ebpfkit xdp filter detach --iface eth1
"""

LB_EXAMPLES = """\b
Examples:
  ebpfkit xdp lb attach --iface eth1 --vip 10.0.0.100:80/tcp --backend 10.0.0.11 --backend 10.0.0.12
  ebpfkit xdp lb attach --iface eth1 --vip [2001:db8::100]:53/udp --backend 2001:db8::11,weight=2
  ebpfkit xdp lb backend add --iface eth1 10.0.0.13
  ebpfkit xdp lb backend del --iface eth1 10.0.0.11
  ebpfkit xdp lb stats --iface eth1 1 5
  ebpfkit xdp lb detach --iface eth1
"""



XDP_EXAMPLES = """\b
Examples:
  ebpfkit xdp filter attach --iface eth1 --src 192.0.2.0/24     drop a source network
  ebpfkit xdp filter stats --iface eth1 1                        hits per rule, every second
  ebpfkit xdp lb attach --iface eth1 --vip 10.0.0.100:80 -b 10.0.0.11 -b 10.0.0.12
  ebpfkit xdp filter detach --iface eth1
"""


@click.group(epilog=XDP_EXAMPLES)
def xdp():
    """XDP packet filter (CIDR/protocol/port rules) and L4 load balancer (Maglev, DSR)."""


# --- shared options ------------------------------------------------------------------------------

def iface_options(func):
    func = click.option("--netns", metavar="NAME",
                        help="The interface is in this network namespace (`ip netns`); "
                             "default: the caller's.")(func)
    return click.option("-i", "--iface", required=True, metavar="IF", help="The network interface.")(func)


def mode_option(func):
    return click.option("--mode", type=click.Choice(MODES), default="auto", show_default=True,
                        help="XDP mode: native (driver), generic (skb) or auto.")(func)


def rule_options(func):
    options = [
        click.option("-f", "--rules-file", type=click.Path(dir_okay=False), metavar="FILE",
                     help="Rules from a YAML file (see `ebpfkit xdp filter --help`)."),
        click.option("-r", "--rule", multiple=True, metavar="RULE",
                     help="A whole rule: 'src 10.0.0.0/8 proto tcp dport 22' (repeatable)."),
        click.option("--src", multiple=True, metavar="CIDR", help="Source CIDR (repeatable)."),
        click.option("--dst", multiple=True, metavar="CIDR", help="Destination CIDR (repeatable)."),
        click.option("--proto", multiple=True, metavar="PROTO", help="A whole L4 protocol: tcp, udp, "
                     "icmp, icmpv6, sctp or a number (repeatable)."),
        click.option("--dport", multiple=True, metavar="[PROTO:]PORT",
                     help="Destination port; without PROTO: tcp, udp, sctp and udplite (repeatable)."),
        click.option("--sport", multiple=True, metavar="[PROTO:]PORT", help="Source port (repeatable)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _gather_rules(rules_file, rule, src, dst, proto, dport, sport):
    from .rules import load_rule_file, rules_from_flags

    found = load_rule_file(rules_file) if rules_file else None
    rules = (found.rules if found else []) + rules_from_flags(src, dst, proto, dport, sport, rule)
    return rules, found


# --- filter --------------------------------------------------------------------------------------

@xdp.group("filter", epilog=FILTER_EXAMPLES)
def filter_group():
    """Drop packets by source/destination CIDR, L4 protocol and port, at the driver.

    \b
    Every rule has the same action: drop, or with `--default deny` allow (all else is dropped).
    A rule matches one CIDR (src or dst), optionally narrowed by a protocol and one port,
    or a protocol and/or port alone. CIDRs of one direction must not nest (refused).
    First match wins: source CIDR, destination CIDR, then port/protocol.
    Rule file (YAML):
      default: allow            # optional; allow | deny
      rules:
        - src: 192.0.2.0/24
        - {dst: 2001:db8::/32, proto: tcp, dport: 22}
        - {proto: udp, sport: 53}
    """


def _filter_config(default, dry_run, max_rules, mode, found):
    from .filter import FilterConfig

    if default is None:
        default = (found.default if found else None) or "allow"
    if not dry_run and found and found.dry_run:
        dry_run = True
    return build_config(FilterConfig, default_deny=default == "deny", dry_run=dry_run, max_rules=max_rules,
                        mode=mode)


def filter_attach_options(func):
    options = [
        iface_options, mode_option,
        click.option("--default", "default", type=click.Choice(["allow", "deny"]), default=None,
                     help="What no rule matches gets: allow (rules drop; the default) or deny "
                          "(rules allow)."),
        click.option("--dry-run", is_flag=True, help="Count what would be dropped, drop nothing."),
        click.option("--max-rules", type=int, default=65536, show_default=True,
                     help="Room for this many rules (maps are sized at attach)."),
        rule_options,
    ]
    for option in reversed(options):
        func = option(func)
    return func


@filter_group.command("attach")
@filter_attach_options
@tool_options
def filter_attach(iface, netns, mode, default, dry_run, max_rules, **rule_args):
    """Attach the filter to an interface and leave it there (pinned)."""
    from . import filter as xf

    out = Output.from_context()
    rules, found = _gather_rules(**rule_args)
    config = _filter_config(default, dry_run, max_rules, mode, found)
    att = xf.attach(iface, rules, config, netns=netns, persistent=True)
    try:
        _show_attached(out, att, "filter")
    finally:
        att.close()


def _attached_mode(att) -> str:
    from ...net import xdp_attached

    try:
        return xdp_attached(att.iface.netns, att.iface.name).get("mode", "?")
    except Exception:  # only for the report: the attach itself succeeded
        return "?"


def _show_attached(out: Output, att, what: str) -> None:
    info = {"iface": att.iface.name, "netns": att.iface.netns, "mode": _attached_mode(att),
            "prog_id": att.prog_id, "pinned": att.path}
    if what == "filter":
        conf = att.tables.config()
        info.update({k: v for k, v in conf.to_dict().items() if k != "mode"})
        info["rules"] = [{"id": rid, "rule": str(r)} for rid, r in sorted(att.tables.rules().items())]
        items = ResultTable(["id", Column("rule", align="left")], info["rules"], title="rules")
    else:
        info.update({k: v for k, v in att.tables.config().items() if k != "mode"})
        info["backends"] = [_backend_row(b) for b in att.tables.backends()]
        items = ResultTable(["slot", Column("backend", align="left"), "weight", "mac", "ifindex"],
                            info["backends"], title="backends")
    summary = ResultTable([Column("attached", align="left"), Column("value", align="left")],
                          [(k, v) for k, v in info.items() if k not in ("rules", "backends")])
    out.document(info, [summary, items])


@filter_group.command("run")
@filter_attach_options
@tool_options
@interval_arguments
def filter_run(iface, netns, mode, default, dry_run, max_rules, interval, count, **rule_args):
    """Filter in the foreground until Ctrl-C; print statistics every INTERVAL seconds."""
    from .session import open_filter

    rules, found = _gather_rules(**rule_args)
    config = _filter_config(default, dry_run, max_rules, mode, found)
    session = open_filter(config, iface=iface, netns=netns, rules=rules)
    _run(session, f"Filtering on {session.iface.where} ({len(rules)} rules, program id {session.prog_id})...",
         show_filter_stats, interval, count)


def _run(session, banner: str, show, interval, count):
    """A `run`: the session's counters every INTERVAL until Ctrl-C or COUNT, then detach."""
    out = Output.from_context()
    with session:
        for _ in live_intervals(out, interval, count, banner):
            show(out, session.sample())


@filter_group.command("detach")
@iface_options
def filter_detach(iface, netns):
    """Detach the filter (or load balancer) from the interface and remove its pins."""
    _detach(iface, netns)


def _detach(iface, netns):
    from . import pins

    out = Output.from_context()
    if pins.detach_iface(iface, netns):
        out.info("detached from %s", iface)
    else:
        out.warn("nothing was attached to %s%s", iface, f" (netns {netns})" if netns else "")


@filter_group.group("rules")
def rules_group():
    """Show and change the rules of an attached filter, without reloading it: each command is
    one atomic change (packets see all of it or none of it)."""


@contextlib.contextmanager
def _on_attached(kind: str, iface, netns):
    """(output, session) of the filter ("filter") or load balancer ("lb") attached to the
    interface by another command."""
    from .session import attached_filter, attached_lb

    with (attached_filter if kind == "filter" else attached_lb)(iface, netns) as session:
        yield Output.from_context(), session


def _list_command(group, kind: str, show, help: str):
    """`rules list` / `backend list`: ``show(out, tables)`` of the program attached to the interface."""
    @group.command("list", help=help)
    @iface_options
    @tool_options
    def list_command(iface, netns):
        with _on_attached(kind, iface, netns) as (out, session):
            show(out, session.tables)
    return list_command


@contextlib.contextmanager
def _rule_change(iface, netns, rule_args: dict, required: str | None = None):
    """(output, the rules the options give, the attached filter's tables) of a `rules`
    command; ``required``: the error when the options give no rule."""
    from .rules import RuleError

    rules, _ = _gather_rules(**rule_args)
    if required and not rules:
        raise RuleError(required)
    with _on_attached("filter", iface, netns) as (out, session):
        yield out, rules, session.tables


def _print_rules(out, tables, ids=None):
    rules = tables.rules()
    counters = tables.rule_counters(rules)
    rows = [{"id": rid, "rule": str(r), "packets": counters[rid][0], "bytes": counters[rid][1]}
            for rid, r in sorted(rules.items()) if ids is None or rid in ids]
    conf = tables.config()
    out.table(ResultTable(["id", Column("rule", align="left"), "packets", "bytes"], rows,
                          title=f"{len(rules)} rules, default {'deny' if conf.default_deny else 'allow'}"
                                f"{' (dry run)' if conf.dry_run else ''}"))


rules_list = _list_command(rules_group, "filter", _print_rules, "The rules in effect, with their ids.")


@rules_group.command("add")
@iface_options
@rule_options
@tool_options
def rules_add(iface, netns, **rule_args):
    """Add rules (all given at once, atomically)."""
    required = "no rule given: use --src/--dst/--proto/--dport/--sport, -r or -f"
    with _rule_change(iface, netns, rule_args, required) as (out, rules, tables):
        ids = tables.apply(add=rules)
        _print_rules(out, tables, set(ids))


@rules_group.command("del")
@iface_options
@rule_options
@click.argument("ids", nargs=-1, type=click.IntRange(min=1))
@tool_options
def rules_del(iface, netns, ids, **rule_args):
    """Delete rules by id, or by giving the same rule again (all at once, atomically)."""
    from .rules import RuleError

    required = None if ids else "no rule given: rule ids (see `rules list`) or the rule's flags"
    with _rule_change(iface, netns, rule_args, required) as (out, rules, tables):
        current = {r.match_key: rid for rid, r in tables.rules().items()}
        missing = [str(r) for r in rules if r.match_key not in current]
        if missing:
            raise RuleError(f"no such rule: {'; '.join(missing)} (see `rules list`)")
        delete = list(ids) + [current[r.match_key] for r in rules]
        tables.apply(delete=delete)
        out.info("deleted rule(s) %s", ", ".join(map(str, delete)))
        _print_rules(out, tables)


@rules_group.command("replace")
@iface_options
@rule_options
@tool_options
def rules_replace(iface, netns, **rule_args):
    """Make the rules exactly these (kept rules keep their ids and counters), atomically."""
    with _rule_change(iface, netns, rule_args) as (out, rules, tables):
        added, deleted = tables.replace(rules)
        out.info("added %d, deleted %d rule(s)", len(added), len(deleted))
        _print_rules(out, tables)


def show_filter_stats(out: Output, doc: dict) -> None:
    rule_table = ResultTable(["id", Column("rule", align="left", max_width=40), "packets", "bytes",
                              "pps", "bps"], doc["rules"], title="rules")
    total_table = ResultTable(["counter", "packets", "bytes", "pps", "bps"], doc["totals"], title="totals")
    out.document(doc, [rule_table, total_table])


def _stats_command(group, kind: str, show, help: str):
    """`filter stats` / `lb stats`: ``show(out, document)`` of the counters of the program
    attached to the interface once, or every INTERVAL with rates (measured from a first sample)."""
    @group.command("stats", help=help)
    @iface_options
    @tool_options
    @interval_arguments
    def stats_command(iface, netns, interval, count):
        with _on_attached(kind, iface, netns) as (out, session):
            if interval is None:
                show(out, session.sample())
                return
            session.sample()
            for _ in live_intervals(out, interval, count):
                show(out, session.sample())
    return stats_command


filter_stats = _stats_command(filter_group, "filter", show_filter_stats,
                              "Per-rule packet/byte hits, per-action totals and, per INTERVAL, pps/bps.")


# --- load balancer -------------------------------------------------------------------------------

@xdp.group("lb", epilog=LB_EXAMPLES)
def lb_group():
    """L4 load balancer: packets for a VIP go to a backend picked by Maglev hashing of their
    5-tuple, forwarded at L2 (direct server return: backends hold the VIP on loopback and
    answer clients directly)."""


def lb_attach_options(func):
    options = [
        iface_options, mode_option,
        click.option("--vip", required=True, metavar="IP:PORT[/PROTO]",
                     help="The service: 10.0.0.100:80/tcp or [2001:db8::100]:53/udp."),
        click.option("-b", "--backend", "backends", multiple=True, metavar="IP[,weight=N][,mac=MAC]",
                     help="A backend on a directly connected network (repeatable)."),
        click.option("--table-size", type=int, default=65537, show_default=True,
                     help="Maglev table size M (a prime, much larger than the backend count)."),
        click.option("--max-backends", type=int, default=256, show_default=True,
                     help="Room for this many backends."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _lb_config(mode, vip, backends, table_size, max_backends):
    from .lb import LbConfig

    return build_config(LbConfig, vip=vip, backends=backends, table_size=table_size,
                        max_backends=max_backends, mode=mode)


@lb_group.command("attach")
@lb_attach_options
@tool_options
def lb_attach(iface, netns, mode, vip, backends, table_size, max_backends):
    """Attach the load balancer to an interface and leave it there (pinned)."""
    from . import lb

    out = Output.from_context()
    config = _lb_config(mode, vip, backends, table_size, max_backends)
    att = lb.attach(iface, config, netns=netns, persistent=True)
    try:
        _show_attached(out, att, "lb")
    finally:
        att.close()


@lb_group.command("run")
@lb_attach_options
@tool_options
@interval_arguments
def lb_run(iface, netns, mode, vip, backends, table_size, max_backends, interval, count):
    """Balance in the foreground until Ctrl-C; print statistics every INTERVAL seconds."""
    from .session import open_lb

    config = _lb_config(mode, vip, backends, table_size, max_backends)
    session = open_lb(config, iface=iface, netns=netns)
    _run(session, f"Balancing {vip} on {session.iface.where} over {len(backends)} backends...",
         show_lb_stats, interval, count)


@lb_group.command("detach")
@iface_options
def lb_detach(iface, netns):
    """Detach the load balancer from the interface and remove its pins."""
    _detach(iface, netns)


@lb_group.group("backend")
def backend_group():
    """Add, remove and list backends; each change rebuilds the Maglev table and swaps it in
    atomically. Established flows stay on their backend unless it is removed."""


def _backend_row(b, share: int | None = None) -> dict:
    row = {"slot": b.slot, "backend": b.name, "weight": b.weight, "mac": b.dmac, "ifindex": b.ifindex}
    if share is not None:
        row["table_slots"] = share
    return row


def _print_backends(out, tables):
    table = tables.table()
    owned: dict[int, int] = {}
    for slot in table:
        owned[slot] = owned.get(slot, 0) + 1
    rows = [_backend_row(b, owned.get(b.slot, 0)) for b in tables.backends()]
    conf = tables.config()
    out.table(ResultTable(["slot", Column("backend", align="left"), "weight", "mac", "ifindex",
                           "table_slots"],
                          rows, title=f"{len(rows)} backends for {conf['vip']} "
                                      f"(Maglev table of {conf['table_size']})"))


backend_list = _list_command(backend_group, "lb", _print_backends,
                             "The live backends and how many table entries each owns.")


@backend_group.command("add")
@iface_options
@click.argument("backends", nargs=-1, required=True, metavar="IP[,weight=N][,mac=MAC]...")
@tool_options
def backend_add(iface, netns, backends):
    """Add backends (MACs resolved in the interface's namespace)."""
    from . import lb, pins

    specs = [lb.parse_backend(b) for b in backends]
    with _on_attached("lb", iface, netns) as (out, session):
        where = pins.lookup_iface(iface, netns)
        session.tables.change(add=[lb.resolve(where, s) for s in specs], xdp_ifindex=where.ifindex)
        _print_backends(out, session.tables)


@backend_group.command("del")
@iface_options
@click.argument("backends", nargs=-1, required=True, metavar="IP...")
@tool_options
def backend_del(iface, netns, backends):
    """Remove backends: only the flows they served move."""
    from . import lb, pins

    for b in backends:
        lb.parse_backend(b)  # a clear error for a non-address
    with _on_attached("lb", iface, netns) as (out, session):
        where = pins.lookup_iface(iface, netns)
        session.tables.change(delete=[b.split(",")[0] for b in backends], xdp_ifindex=where.ifindex)
        _print_backends(out, session.tables)


def show_lb_stats(out: Output, doc: dict) -> None:
    out.document(doc, [
        ResultTable(["slot", Column("backend", align="left"), "weight", "packets", "bytes", "pps",
                     "bps"], doc["backends"], title="backends"),
        ResultTable(["counter", "packets", "bytes", "pps", "bps"], doc["totals"], title="totals")])


lb_stats = _stats_command(lb_group, "lb", show_lb_stats,
                          "Per-backend packets and bytes, totals and, per INTERVAL, pps/bps.")
