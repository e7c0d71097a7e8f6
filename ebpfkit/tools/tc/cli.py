"""`ebpfkit tc`: a node's fast path between its endpoints (namespaces behind veths, as pods
are) and out of it. `redirect run` runs it in the foreground until Ctrl-C and pins nothing;
`redirect attach` leaves it running, pinned under /sys/fs/bpf/ebpfkit/tc/ (tcx links, 6.6+);
`endpoint`, `steer`, `status`, `stats` and `detach` work on what attach left. `ratelimit run`
and `ratelimit attach|stats|detach` pace a device's egress (EDT with fq). --netns names the
node's namespace (default: this one)."""

from __future__ import annotations

import time

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import interval_arguments, live_intervals, usage_errors

EXAMPLES = """\b
Examples:
  ebpfkit tc redirect run -e pod1:eth0 -e pod2:eth0 -u eth1 1       foreground, counters every second
  ebpfkit tc redirect attach --netns node -e pod1:eth0 -u up0       pinned: runs on after the command
  ebpfkit tc endpoint add --netns node pod3:eth0                    served from now on
  ebpfkit tc endpoint list --netns node
  ebpfkit tc steer add --netns node udp:53=pod2:eth0                DNS to the node-local cache
  ebpfkit tc ratelimit run --netns node -d up0 -r 'endpoint pod1:eth0 rate 10mbit' 1
  ebpfkit tc ratelimit attach --netns node -d up0 -r 'src 10.77.2.2 rate 100mbit horizon 50ms'
  ebpfkit tc stats --netns node 1 5
  ebpfkit tc detach --netns node
"""


@click.group(epilog=EXAMPLES)
def tc():
    """tc fast paths: pod-to-pod and pod-to-outside without the node's stack (bpf_redirect_peer,
    bpf_redirect_neigh), and ports steered to an endpoint or device."""


def node_option(func):
    return click.option("--netns", metavar="NAME", help="The node is this network namespace (`ip netns`); "
                        "default: the caller's.")(func)


def endpoint_spec(ctx, param, values):
    """NETNS:DEV -> (netns, dev)."""
    specs = []
    for value in values:
        netns, sep, device = value.partition(":")
        if not sep or not netns or not device:
            raise click.BadParameter(f"'{value}' is not NETNS:DEV (an endpoint's namespace and its veth there)",
                                     ctx=ctx, param=param)
        specs.append((netns, device))
    return tuple(specs)


def redirect_options(func):
    options = [
        node_option,
        click.option("-e", "--endpoint", "endpoints", multiple=True, metavar="NETNS:DEV", callback=endpoint_spec,
                     help="An endpoint: its namespace and its end of the veth pair to the node (repeatable)."),
        click.option("-u", "--uplink", "uplinks", multiple=True, metavar="DEV",
                     help="A device of the node to the outside; what arrives there for an endpoint goes "
                          "straight to it (repeatable)."),
        click.option("--no-route", is_flag=True,
                     help="Only between endpoints: what is for elsewhere takes the node's stack."),
        click.option("-s", "--steer", "steering", multiple=True, metavar="PROTO:PORT=TARGET",
                     help="What goes to that port goes to TARGET, an endpoint NETNS:DEV or a node device "
                          "DEV, whatever its address: udp:53=pod2:eth0 (repeatable)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@tc.group()
def redirect():
    """Hand packets for an endpoint straight into its namespace, and the rest straight out."""


def _open(netns, endpoints, uplinks, no_route, steering, persistent: bool):
    from .session import RedirectConfig, RedirectSession

    with usage_errors():
        config = RedirectConfig(endpoints=endpoints, uplinks=uplinks, netns=netns, route=not no_route,
                                steering=steering)
        return RedirectSession(config, persistent=persistent)


@redirect.command("run")
@redirect_options
@tool_options
@interval_arguments
def redirect_run(netns, endpoints, uplinks, no_route, steering, interval, count):
    """Run in the foreground until Ctrl-C; the counters every INTERVAL seconds."""
    out = Output.from_context()
    with _open(netns, endpoints, uplinks, no_route, steering, persistent=False) as session:
        banner = f"Redirecting for {len(session.endpoints)} endpoints and {len(uplinks)} uplinks..."
        _show_intervals(out, session, interval, count, banner)


@redirect.command("attach")
@redirect_options
@tool_options
def redirect_attach(netns, endpoints, uplinks, no_route, steering):
    """Attach and pin: it runs on after this command, until `ebpfkit tc detach`."""
    session = _open(netns, endpoints, uplinks, no_route, steering, persistent=True)
    try:
        _show_status(netns, session, pinned_at=session.pinned_at)
    finally:
        session.close()


@tc.group()
def endpoint():
    """The endpoints an attached redirect serves, changed live."""


def _on_attached(netns):
    from .session import attached_redirect

    return attached_redirect(netns)


@endpoint.command("add")
@node_option
@click.argument("endpoints", nargs=-1, required=True, metavar="NETNS:DEV...", callback=endpoint_spec)
@tool_options
def endpoint_add(netns, endpoints):
    """Serve these endpoints too."""
    with _on_attached(netns) as session, usage_errors():
        for ns, device in endpoints:
            found = session.add_endpoint(ns, device)
            Output.from_context().info("endpoint %s:%s (%s) added", ns, device, ", ".join(found.addresses))


@endpoint.command("del")
@node_option
@click.argument("endpoints", nargs=-1, required=True, metavar="NETNS:DEV...", callback=endpoint_spec)
@tool_options
def endpoint_del(netns, endpoints):
    """Stop serving these endpoints: their packets take the node's stack again."""
    with _on_attached(netns) as session, usage_errors():
        for ns, device in endpoints:
            session.remove_endpoint(ns, device)
            Output.from_context().info("endpoint %s:%s removed", ns, device)


@endpoint.command("list")
@node_option
@tool_options
def endpoint_list(netns):
    """The endpoints served, their addresses and node-side devices."""
    with _on_attached(netns) as session:
        Output.from_context().table(_endpoint_table(session))


def _endpoint_table(session) -> ResultTable:
    rows = []
    for (ns, device), found in sorted(session.endpoints.items()):
        rows.append({"netns": ns, "device": device, "addresses": " ".join(found.addresses) if found else "(gone)",
                     "node_device": found.node_device if found else "", "mac": found.mac if found else ""})
    columns = [Column("netns", align="left"), Column("device", align="left"), Column("addresses", align="left"),
               Column("node_device", align="left"), Column("mac", align="left")]
    return ResultTable(columns, rows, title="endpoints")


@tc.group()
def ratelimit():
    """EDT rate limiting of what leaves a device (fq holds each packet until its departure time)."""


def device_option(func):
    return click.option("-d", "--dev", "device", required=True, metavar="DEV",
                        help="The node's device whose egress is paced.")(func)


def ratelimit_options(func):
    options = [
        node_option,
        device_option,
        click.option("-r", "--rule", "rules", multiple=True, required=True, metavar="RULE",
                     help="'src ADDR|endpoint NETNS:DEV|cgroup PATH rate R [horizon T]': R in bit, kbit, mbit, "
                          "gbit (or bps, kbps, mbps, gbps), T in s, ms, us (default 2s) (repeatable)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _ratelimit(netns, device, rules, persistent: bool):
    from .ratelimit import RateLimitConfig, RateLimitSession

    with usage_errors():
        return RateLimitSession(RateLimitConfig(device=device, rules=rules, netns=netns), persistent=persistent)


def _rules_table(rows: list) -> ResultTable:
    columns = [Column("rule", align="left"), Column("key", align="left"), "rate_bps", "horizon_ms", "passed",
               "delayed", "dropped", "bytes"]
    return ResultTable(columns, rows, title="rules")


@ratelimit.command("run")
@ratelimit_options
@tool_options
@interval_arguments
def ratelimit_run(netns, device, rules, interval, count):
    """Pace in the foreground until Ctrl-C (fq on DEV meanwhile); the rules' counters every INTERVAL."""
    out = Output.from_context()
    with _ratelimit(netns, device, rules, persistent=False) as session:
        for _ in live_intervals(out, interval, count, f"Pacing {len(rules)} rules on {device}..."):
            rows = session.sample()
            out.document({"rules": rows}, [_rules_table(rows)])


@ratelimit.command("attach")
@ratelimit_options
@tool_options
def ratelimit_attach(netns, device, rules):
    """Attach and pin (fq stays on DEV): it runs on after this command, until `tc ratelimit detach`."""
    session = _ratelimit(netns, device, rules, persistent=True)
    try:
        rows = session.sample()
        Output.from_context().document({"device": device, "netns": netns, "pinned_at": session.pinned_at,
                                        "rules": rows}, [_rules_table(rows)])
    finally:
        session.close()


@ratelimit.command("stats")
@node_option
@device_option
@tool_options
@interval_arguments
def ratelimit_stats(netns, device, interval, count):
    """The counters of what attach left on DEV: once, or every INTERVAL seconds."""
    from .ratelimit import attached_ratelimit

    out = Output.from_context()
    with attached_ratelimit(device, netns) as session:
        for _ in (live_intervals(out, interval, count) if interval is not None else [None]):
            rows = session.sample()
            out.document({"rules": rows}, [_rules_table(rows)])


@ratelimit.command("detach")
@node_option
@device_option
def ratelimit_detach(netns, device):
    """Detach what attach left on DEV, put its qdisc back and remove its pins."""
    from .ratelimit import detach_ratelimit

    out = Output.from_context()
    if detach_ratelimit(device, netns):
        out.info("detached from %s", device)
    else:
        out.warn("tc ratelimit was not attached to %s%s", device, f" in namespace '{netns}'" if netns else "")


@tc.group()
def steer():
    """Ports steered to an endpoint or a node device, changed live on an attached redirect."""


@steer.command("add")
@node_option
@click.argument("rules", nargs=-1, required=True, metavar="PROTO:PORT=TARGET...")
@tool_options
def steer_add(netns, rules):
    """Steer these ports (TARGET: an endpoint NETNS:DEV or a node device DEV)."""
    with _on_attached(netns) as session, usage_errors():
        for rule in rules:
            Output.from_context().info("steering %s", session.steer(rule))


@steer.command("del")
@node_option
@click.argument("ports", nargs=-1, required=True, metavar="PROTO:PORT...")
@tool_options
def steer_del(netns, ports):
    """Stop steering these ports."""
    from .steering import parse_port

    with _on_attached(netns) as session, usage_errors():
        for port in ports:
            session.unsteer(*parse_port(port))


@steer.command("list")
@node_option
@tool_options
def steer_list(netns):
    """The ports steered and where to."""
    with _on_attached(netns) as session:
        Output.from_context().table(_steering_table(session))


def _steering_table(session) -> ResultTable:
    rows = [{"protocol": r.protocol, "port": r.port, "target": r.target} for _, r in sorted(session.steering.items())]
    return ResultTable(["protocol", "port", Column("target", align="left")], rows, title="steering")


@tc.command()
@node_option
@tool_options
def status(netns):
    """What is attached in the node's namespace: program, uplinks, endpoints, counters."""
    with _on_attached(netns) as session:
        _show_status(netns, session)


def _show_status(netns, session, **more) -> None:
    info = {"netns": netns, "prog_id": session.prog_id, "uplinks": list(session.uplinks),
            "endpoints": [f"{ns}:{dev}" for ns, dev in sorted(session.endpoints)],
            "steering": [str(r) for _, r in sorted(session.steering.items())], **more,
            "counters": session.sample()}
    summary = ResultTable([Column("attached", align="left"), Column("value", align="left")],
                          [(k, " ".join(v) if isinstance(v, list) else v) for k, v in info.items()
                           if k != "counters"])
    Output.from_context().document(info, [summary, _endpoint_table(session), _steering_table(session),
                                          _counter_table(info["counters"])])


@tc.command()
@node_option
@tool_options
@interval_arguments
def stats(netns, interval, count):
    """The counters of what attach left: once, or every INTERVAL seconds with rates."""
    out = Output.from_context()
    with _on_attached(netns) as session:
        if interval is None:
            counters = session.sample()
            out.document({"counters": counters}, [_counter_table(counters)])
            return
        _show_intervals(out, session, interval, count)


@tc.command()
@node_option
def detach(netns):
    """Detach what attach left in the node's namespace and remove its pins."""
    from .session import detach_redirect

    out = Output.from_context()
    if detach_redirect(netns):
        out.info("detached")
    else:
        out.warn("tc redirect was not attached%s", f" in namespace '{netns}'" if netns else "")


def _show_intervals(out, session, interval, count, banner=None) -> None:
    before, then = session.sample(), time.monotonic()
    for _ in live_intervals(out, interval, count, banner):
        now, counters = time.monotonic(), session.sample()
        seconds = max(now - then, 1e-9)
        for name, c in counters.items():
            c["pps"] = round((c["packets"] - before[name]["packets"]) / seconds, 1)
            c["bps"] = round(8 * (c["bytes"] - before[name]["bytes"]) / seconds, 1)
        out.document({"counters": counters}, [_counter_table(counters)])
        before, then = {k: dict(v) for k, v in counters.items()}, now


def _counter_table(counters: dict) -> ResultTable:
    rates = any("pps" in c for c in counters.values())
    columns = ["verdict", "packets", "bytes"] + (["pps", "bps"] if rates else [])
    rows = [{"verdict": name, **c} for name, c in counters.items()]
    return ResultTable(columns, rows, title="counters")
