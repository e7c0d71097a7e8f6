"""`ebpfkit pingtrace`: options -> Config, the session's ProbeResults -> the output layer: a
live per-stage table (p50/p99/max), or with -m one line (JSON object, CSV row) per slow probe
and the table at the end."""

from __future__ import annotations

import time
from datetime import datetime

import click

from ...output import Column, Output, ResultTable, tool_options
from ...output.values import clock_time
from ..common import build_config
from . import wire
from .pacing import MODES

EXAMPLES = """\b
Examples:
  ebpfkit pingtrace -c 10.0.0.2                   a probe a second until Ctrl-C, stages live
  ebpfkit pingtrace -c 10.0.0.2 -C 1000 -i 1000   1000 probes, 1 ms apart
  ebpfkit pingtrace -c 10.0.0.2 -m 3000           only probes slower than 3 ms, each with
                                                  the stage that took the most
  ebpfkit pingtrace -c 10.0.0.2 --netns client    from the network namespace "client"
  ebpfkit pingtrace -s --userid 2                 on 10.0.0.2 first: its stages come back too
  ebpfkit --format json pingtrace -c 10.0.0.2 -C 10 -m 0   every probe's checkpoints and stages
  ebpfkit --log pt.log pingtrace -c 10.0.0.2 -m 3000 --image pt.png   a rotating log, and a picture
"""

REFRESH = 1.0  # seconds between two redraws of the live table
PROBE_COLUMNS = (
    Column("TIME", key="time", format=lambda t: clock_time(datetime.fromtimestamp(t))),
    Column("SEQ", key="seq"), Column("RTT(us)", key="rtt_us", format=lambda v: "lost" if v is None else f"{v:.1f}"),
    Column("SLOWEST STAGE", key="slowest", align="left"),
    Column("STAGE(us)", key="slowest_us", format=lambda v: "" if v is None else f"{v:.1f}"),
    Column("LAST SEEN / DROP", key="lost_at", align="left"))
SERVER_COLUMNS = (Column("REPLIES STAMPED", key="stamped"), Column("TOTAL", key="total"))
STATS_COLUMNS = (Column("STAGE", key="stage", align="left"), Column("N", key="count"),
                 Column("P50(us)", key="p50_us", format=".1f"), Column("P99(us)", key="p99_us", format=".1f"),
                 Column("MAX(us)", key="max_us", format=".1f"))


@click.command(epilog=EXAMPLES)
@click.option("-c", "--client", "target", metavar="HOST",
              help="Probe HOST (an IPv4 address or name): its kernel answers each probe.")
@click.option("-s", "--server", is_flag=True,
              help="Be the far end: this host's kernel still answers, and each reply carries this host's "
                   "checkpoints of its request (tc egress on the namespace's devices).")
@click.option("--userid", "user_id", type=click.IntRange(0, (1 << 32) - 1), default=0, show_default=True,
              metavar="N", help="Server: name this host N in its entries (clients tell hosts apart).")
@click.option("--nslocal", is_flag=True,
              help="Client: the server runs on this host (another namespace): its entries repeat what is "
                   "seen here, so they are not merged (they still set the clock offset).")
@click.option("-C", "--count", type=click.IntRange(min=1), metavar="N", help="Send N probes, then stop.")
@click.option("-i", "--interval", "interval_us", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              metavar="US", help="Microseconds between two probes.")
@click.option("-t", "--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Send for SECONDS, then stop.")
@click.option("-m", "--max-delay", "max_delay_us", type=click.FloatRange(min=0), metavar="US",
              help="Print each probe slower than US microseconds (and each lost one) with its slowest stage "
                   "(-m 0: every probe; in JSON with all its checkpoints), and the per-stage table at the end.")
@click.option("-b", "--size", type=int, default=wire.MIN_SIZE, show_default=True, metavar="BYTES",
              help=f"ICMP payload bytes of a probe ({wire.MIN_SIZE} to {wire.MAX_SIZE}).")
@click.option("--netns", metavar="NAME", help="Send from this network namespace (a name under /run/netns).")
@click.option("-W", "--timeout", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              metavar="SECONDS", help="A probe unanswered this long is lost.")
@click.option("--mode", type=click.Choice(MODES), default="auto", show_default=True,
              help="When the next probe goes: compact, every interval however many are unanswered; "
                   "pingpong, one at a time, an interval after the last one's reply; auto, every interval "
                   "but never while one is unanswered.")
@click.option("--image", "image_path", type=click.Path(dir_okay=False, writable=True), metavar="FILE.png",
              help="At the end, draw each stage's latency over the run into FILE.png (needs matplotlib).")
@tool_options(short_timestamp=False)
def pingtrace(target, server, user_id, nslocal, count, interval_us, duration, max_delay_us, size, netns, timeout,
              mode, image_path):
    """Where a round trip's time goes: ICMP echo probes to HOST, and for each one every
    checkpoint of this machine's network stack it passed (device queue, qdisc, driver xmit,
    receive, the reader's wakeup, the copy to the reader), in every namespace and device on
    the way, and the stage between each two. A HOST in another namespace of this machine is
    seen end to end, on one clock; another host's stages come back in its replies when it
    runs `ebpfkit pingtrace -s`, else they show as one."""
    from ..common import usage_errors
    from .session import open as open_session, Config
    from .stats import StageStats

    if bool(target) == server:
        raise click.UsageError("give -c HOST (send probes) or -s (answer them), one of the two")
    if server:
        _serve(netns, user_id, duration)
        return
    timeline = None
    if image_path:
        from .image import MissingMatplotlib, Timeline, require_matplotlib

        try:
            require_matplotlib()
        except MissingMatplotlib as exc:
            raise click.UsageError(str(exc)) from None
        timeline = Timeline()
    config = build_config(Config, target=target, count=count, interval_us=interval_us, duration=duration,
                          size=size, netns=netns, timeout=timeout, nslocal=nslocal, mode=mode)
    out = Output.from_context()
    per_probe = max_delay_us is not None  # else the per-stage table, redrawn every second
    if per_probe:
        out.event_columns(*PROBE_COLUMNS)
    stats = StageStats()
    with usage_errors():  # an unknown host
        session = open_session(config)
    with session:
        out.info("hook: %s", session.hook)
        if session.missing:
            out.warn("this kernel has no tracepoint %s: those checkpoints are not seen", ", ".join(session.missing))
        with out.live():
            shown = time.monotonic()
            try:  # the banner inside: a Ctrl-C right after it still ends the run cleanly
                out.banner(f"Tracing probes to {session.address} ({config.size} bytes, every {interval_us} µs)..."
                           " Hit Ctrl-C to end.")
                for probe in session.probes():
                    stats.add(probe)
                    if timeline is not None:
                        timeline.add(probe)
                    if per_probe and (probe.lost or probe.rtt_us > max_delay_us):
                        out.event(_record(probe))
                    if not per_probe and time.monotonic() - shown >= REFRESH:
                        _stats_table(out, stats)
                        shown = time.monotonic()
            except KeyboardInterrupt:
                pass
            _stats_table(out, stats)
        if timeline is not None:
            timeline.write(image_path, f"pingtrace to {session.address}: {stats.sent} probes, {stats.lost} lost")
            out.info("stage latencies drawn in %s", image_path)
        out.lost(session.lost_events, "checkpoint events")
        if session.foreign:
            out.info("%d ICMP messages read were not this run's probe replies", session.foreign)


def _serve(netns, user_id, duration) -> None:
    from .server import Config, open as open_server
    from ..common import live_intervals

    config = build_config(Config, netns=netns, user_id=user_id)
    out = Output.from_context()
    with open_server(config) as server:
        out.info("hooks: %s", server.hook)
        banner = f"Stamping replies to pingtrace probes leaving by {', '.join(server.devices) or 'no device'}..."
        before = 0
        for _ in live_intervals(out, REFRESH, None if duration is None else max(1, round(duration / REFRESH)),
                                banner):
            now = server.replies_stamped
            out.table(ResultTable(SERVER_COLUMNS, [{"stamped": now - before, "total": now}],
                                  title=f"server (user id {user_id})"))
            before = now


def _record(probe) -> dict:
    record = probe.to_dict()
    slowest = probe.slowest
    record["slowest_us"] = slowest.us if slowest else None
    if probe.lost:
        seen = probe.last_seen
        record["lost_at"] = (seen.label if seen else "") + (f" (dropped: {probe.drop_reason})"
                                                             if probe.drop_reason else "")
    else:
        record["lost_at"] = ""
    return record


def _stats_table(out, stats) -> None:
    title = f"{stats.sent} probes, {stats.lost} lost"
    out.table(ResultTable(STATS_COLUMNS, stats.rows(), title=title))
