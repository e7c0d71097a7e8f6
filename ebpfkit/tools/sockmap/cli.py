"""sockmap: accelerate TCP between local sockets (sockops + sk_msg redirect into the peer)."""

from __future__ import annotations

import os
import platform
import time

import click

from ...output import Column, Output, ResultTable, tool_options
from ..common import build_config, interval_arguments, live_intervals

EXAMPLES = """\b
Examples:
  ebpfkit sockmap enable --cgroup /sys/fs/cgroup/unified/web   accelerate that cgroup, return
  ebpfkit sockmap enable --cgroup CG --port 8080 --port 8081   only connections with these ports
  ebpfkit sockmap status                                        where, sockets, bytes redirected
  ebpfkit sockmap --format json status
  ebpfkit sockmap disable --cgroup CG                           new connections: normal TCP again
  ebpfkit sockmap run --cgroup CG 1 10                          foreground, status every second
  ebpfkit sockmap bench                                         plain vs accelerated, side by side
"""

cgroup_option = click.option("--cgroup", "cgroup", type=click.Path(), metavar="PATH",
                             help="cgroup v2 directory (default: the cgroup v2 root).")


def accel_options(func):
    options = [
        cgroup_option,
        click.option("--port", "ports", type=int, multiple=True, metavar="P",
                     help="Only connections with this local or remote port (repeatable)."),
        click.option("--ipv6/--no-ipv6", default=True, show_default=True,
                     help="Also accelerate IPv6 connections (IPv4 and IPv4-mapped always)."),
        click.option("--skb-verdict", type=click.Choice(["auto", "on", "off"]), default="auto",
                     show_default=True,
                     help="Pass-through sk_skb verdict on the map, the workaround for the "
                          "FIONREAD/epoll regression (auto: when a probe finds it)."),
        click.option("--max-sockets", type=int, default=65535, show_default=True,
                     help="Size of the socket map."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _options(ports, ipv6, skb_verdict, max_sockets):
    from . import Options

    return build_config(Options, ports=ports, ipv6=ipv6, skb_verdict=skb_verdict, max_sockets=max_sockets)


@click.group(epilog=EXAMPLES)
def sockmap():
    """Socket-level acceleration between TCP sockets on this host.

    sockops stores each established socket of a cgroup in a SOCKHASH; sk_msg hands every
    sendmsg straight to the peer socket's receive queue, skipping TCP/IP between them.
    Connections with a peer elsewhere keep the normal path.
    """


@sockmap.command(epilog=EXAMPLES)
@accel_options
@tool_options
def enable(cgroup, ports, ipv6, skb_verdict, max_sockets):
    """Attach to a cgroup and pin: acceleration goes on after this command returns."""
    from . import AlreadyEnabled, enable as do_enable

    out = Output.from_context()
    try:
        enabled = do_enable(cgroup, _options(ports, ipv6, skb_verdict, max_sockets))
    except AlreadyEnabled as exc:
        record = exc.enablement.status()
        out.warn("sockmap acceleration is already enabled on %s (ports: %s); "
                 "`ebpfkit sockmap disable --cgroup %s` first to change it",
                 record["cgroup"], _ports(record["ports"]), record["cgroup"])
        out.document({"state": "already enabled", **record})
        return
    record = enabled.status()
    _report(out, "enabled", record)


def _report(out: Output, state: str, record: dict) -> None:
    out.document({"state": state, **record})  # printed in JSON; the messages below say it to people
    verdict = "attached" if record["skb_verdict"] else "not attached"
    why = " (FIONREAD/epoll regression found on this kernel)" if record["regression"] else ""
    out.banner(f"sockmap acceleration {state} on {record['cgroup']}: ports {_ports(record['ports'])}, "
               f"IPv6 {'on' if record['ipv6'] else 'off'}, sk_skb verdict {verdict}{why}")
    if not record["fionread_counts_redirected"]:
        out.warn("on this kernel FIONREAD does not count bytes redirected into a socket (it has no "
                 "tcp_bpf_ioctl): programs that size their reads by FIONREAD see 0 for them")


@sockmap.command(epilog=EXAMPLES)
@cgroup_option
@click.option("--all", "all_cgroups", is_flag=True, help="Every cgroup sockmap is enabled on.")
@tool_options
def disable(cgroup, all_cgroups):
    """Detach and unpin. Connections already accelerated keep working (until they close)."""
    from . import disable as do_disable, enablements
    from .cgroups import require_privileges

    out = Output.from_context()
    if all_cgroups and cgroup:
        raise click.UsageError("give --cgroup or --all, not both")
    require_privileges()
    removed = []
    if all_cgroups:
        for e in enablements():
            removed.append(e.cgroup or f"(removed cgroup id {e.cgroup_id})")
            e.remove()
    else:
        found = do_disable(cgroup)
        if found is not None:
            removed.append(found.cgroup)
    out.document({"disabled": removed})  # printed in JSON; the messages below say it to people
    for where in removed:
        out.banner(f"sockmap acceleration disabled on {where}")
    if not removed:
        out.warn("sockmap acceleration was not enabled %s", "anywhere" if all_cgroups else
                 f"on {cgroup or 'the cgroup v2 root'}")


COLUMNS = [Column("CGROUP", key="cgroup", max_width=30), Column("PORTS", key="ports_text", max_width=14),
           Column("SOCKETS", key="sockets"), Column("REDIR MSGS", key="msgs_redirected"),
           Column("REDIR BYTES", key="bytes_redirected"), Column("FALLBACK", key="msgs_fallback"),
           Column("FB BYTES", key="bytes_fallback"), Column("ADD FAIL", key="add_failed"),
           Column("SKB VERDICT", key="verdict_text")]


def status_table(records: list[dict]) -> ResultTable:
    rows = [{**r, "cgroup": _short(r["cgroup"]), "ports_text": _ports(r["ports"]), "verdict_text": "yes" if r["skb_verdict"] else "no"}
            for r in records]
    return ResultTable(COLUMNS, rows, title="sockmap acceleration")


def sockets_table(sockets: list[dict]) -> ResultTable:
    return ResultTable([Column("FAMILY", key="family"), Column("LOCAL", key="local"),
                        Column("LPORT", key="local_port"), Column("REMOTE", key="remote"),
                        Column("RPORT", key="remote_port")], sockets, title="sockets in the map")


def _short(path: str) -> str:
    """A cgroup as cgroup tools name it: its path under the cgroup v2 mount."""
    from ...sysinfo.cgroups import cgroup2_mount

    top = cgroup2_mount()
    if top is None:
        return path
    return "/" + os.path.relpath(path, top).lstrip(".") if path.startswith(top) else path


def _ports(ports) -> str:
    return ",".join(map(str, ports)) if ports else "all"


@sockmap.command(epilog=EXAMPLES)
@cgroup_option
@click.option("-s", "--sockets", "show_sockets", is_flag=True, help="Also list the sockets in the map.")
@tool_options
def status(cgroup, show_sockets):
    """Where it is enabled, sockets in the map, messages/bytes redirected and fallen back."""
    from .regression import release_affected
    from .session import status as pinned_status

    out = Output.from_context()
    records = pinned_status(cgroup, sockets=show_sockets)
    tables = [status_table(records)] if records else []
    if show_sockets:
        tables += [sockets_table(record["connections"]) for record in records]
    out.document({"enabled": records, "kernel": platform.release(),
                  "kernel_release_affected": release_affected()}, tables)
    if not records:
        out.warn("sockmap acceleration is not enabled %s", f"on {cgroup}" if cgroup else "anywhere")


@sockmap.command(epilog=EXAMPLES)
@accel_options
@tool_options
@interval_arguments
def run(cgroup, ports, ipv6, skb_verdict, max_sockets, interval, count):
    """Accelerate in the foreground, printing status; everything is detached on exit."""
    from .session import open as open_session

    out = Output.from_context()
    with open_session(_options(ports, ipv6, skb_verdict, max_sockets), cgroup=cgroup) as session:
        _report(out, "running", session.sample())
        for _ in live_intervals(out, interval, count, "Accelerating..."):
            out.table(status_table([session.sample()]))


@sockmap.command(epilog=EXAMPLES)
@click.option("--duration", type=click.FloatRange(1, 120), default=3, show_default=True,
              help="Seconds per measurement.")
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Rounds per workload (modes interleaved); medians are reported.")
@click.option("--only", type=click.Choice(["sockperf", "iperf3", "nginx"]), multiple=True,
              help="Run only these measurements (repeatable).")
@tool_options
def bench(duration, rounds, only):
    """Plain TCP vs a minimal sockops+sk_msg sample vs ebpfkit, side by side, each in a fresh
    child cgroup: sockperf TCP ping-pong latency (client and server on one CPU; and, for
    information, on any CPU), iperf3 throughput, nginx load balancer + wrk. Where the
    FIONREAD/epoll workaround is attached, latency is also measured without it (NO-SKB):
    the like-for-like match for the sample, which has none. The sample also runs twice
    (A/A): how far apart two identical setups land is the noise latency ratios against the
    sample are judged with. The sk_msg row is each program's own cost per message."""
    from .bench import run_bench
    from .cgroups import require_privileges

    out = Output.from_context()
    require_privileges()
    started = time.monotonic()
    out.banner("Benchmarking sockmap acceleration (plain / minimal sample / ebpfkit)...")
    result = run_bench(duration=duration, rounds=rounds, only=only or None, progress=out.info)
    out.document(result.to_dict(), result.table())
    out.info("bench took %.0f s", time.monotonic() - started)
