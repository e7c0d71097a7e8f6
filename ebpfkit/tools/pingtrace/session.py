"""pingtrace's session: send probes (wire.py) to a host from a network namespace, and for each
one say where its round trip went: every checkpoint of the network stack it passed on this
machine (pingtrace.bpf.c), in every namespace and device of the path, in time order, and the
stage between each two. No click, no printing::

    from ebpfkit.tools import pingtrace
    with pingtrace.open(target="10.0.0.2", count=10, interval_us=10_000, netns="client") as s:
        for probe in s.probes():           # ProbeResults, as each reply comes (or is lost)
            print(probe.seq, probe.rtt_us, probe.slowest)

The far end answers with its kernel's own echo reply. When it is on this machine (another
namespace), its checkpoints are seen here too, on the same clock: the whole path is broken
down. When it is another host, its stages are unknown here and show as one stage between
this host's last request checkpoint and its first reply checkpoint, unless it runs
`ebpfkit pingtrace -s` (server.py): then each reply carries that host's checkpoints, on its
clock, which ClockFilter maps onto this one.
"""

from __future__ import annotations

import os
import random
import select
import socket
import threading
import time
from dataclasses import asdict, dataclass, field, replace

from ...errors import ConfigError, PermissionDeniedError
from ..config import ToolConfig
from ..session import ToolSession, choose_typed_or_raw
from . import wire
from .clock import ClockFilter
from .pacing import MODES, Pacer

PROGRAM = os.path.join(os.path.dirname(__file__), "pingtrace.bpf.c")
TYPED_HOOK = "tp_btf net_dev_queue/qdisc_*/net_dev_start_xmit/netif_rx/netif_receive_skb/" \
             "sched_waking/skb_copy_datagram_iovec/kfree_skb"
RAW_HOOK = "raw tracepoints " + TYPED_HOOK.split(" ", 1)[1]
DIRECTIONS = {wire.ICMP_ECHO_REQUEST: "request", wire.ICMP_ECHO_REPLY: "reply"}
# checkpoints whose tracepoint an older kernel may lack: (group, tracepoint, program)
OPTIONAL = (("qdisc", "qdisc_enqueue", "pt_qdisc_enqueue"), ("qdisc", "qdisc_dequeue", "pt_qdisc_dequeue"))


def skip_missing_tracepoints(spec, typed: bool) -> list[str]:
    """Leave out the optional checkpoints this kernel has no tracepoint for; their names."""
    from ...engine.mounts import ensure_tracefs
    from ...sysinfo.events import tracepoint_exists

    root = ensure_tracefs()
    missing = []
    for group, tracepoint, program in OPTIONAL:
        if not tracepoint_exists(group, tracepoint, root):
            spec.programs[program if typed else program + "_raw"].autoload = False
            missing.append(tracepoint)
    return missing


@dataclass(frozen=True)
class Config(ToolConfig):
    target: str                       # the host to probe: an IPv4 address or a name
    count: int | None = None          # probes to send (None: until duration, or for ever)
    interval_us: int = 1_000_000      # between two probes
    duration: float | None = None     # seconds of sending (None: until count)
    size: int = wire.MIN_SIZE         # ICMP payload bytes of a probe
    netns: str | None = None          # the namespace to send from (None: this process's)
    timeout: float = 1.0              # seconds without a reply after which a probe is lost
    nslocal: bool = False             # the server is on this host: its entries repeat what is seen here
    mode: str = "auto"                # MODES: when the next probe goes while one is unanswered

    def validate(self) -> None:
        if not self.target:
            raise ConfigError("target", "names no host")
        if self.count is not None and self.count < 1:
            raise ConfigError("count", f"must be 1 or more, got {self.count}")
        if self.interval_us < 1:
            raise ConfigError("interval_us", f"must be 1 µs or more, got {self.interval_us}")
        if self.duration is not None and self.duration <= 0:
            raise ConfigError("duration", f"must be more than 0 s, got {self.duration}")
        if not wire.MIN_SIZE <= self.size <= wire.MAX_SIZE:
            raise ConfigError("size", f"must be {wire.MIN_SIZE} to {wire.MAX_SIZE} bytes (the probe's "
                                      f"header and room for its entries), got {self.size}")
        if self.timeout <= 0:
            raise ConfigError("timeout", f"must be more than 0 s, got {self.timeout}")
        if self.mode not in MODES:
            raise ConfigError("mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.netns is not None:
            from ...net.netns import netns_path

            if not os.path.exists(netns_path(self.netns)):
                raise ConfigError("netns", f"no network namespace {self.netns!r} "
                                           f"({netns_path(self.netns)} does not exist)")


@dataclass(frozen=True)
class Checkpoint:
    """Where and when a probe was seen."""

    point: str       # enum pingtrace_point's names: user_tx, dev_queue, ..., receive, user_copy, user_rx, drop
    direction: str   # "request" or "reply"
    netns: str       # the namespace's name (its inode number if it has none)
    device: str      # the device's name ("" where no device is involved)
    ns: int          # CLOCK_MONOTONIC
    cpu: int = -1    # -1: user space

    @property
    def label(self) -> str:
        where = f"{self.device}@{self.netns}" if self.device else self.netns
        return f"{self.direction} {self.point} {where}"


@dataclass(frozen=True)
class Stage:
    """The time between two consecutive checkpoints of a probe."""

    start: str   # the checkpoints' labels
    end: str
    us: float

    @property
    def name(self) -> str:
        return f"{self.start} -> {self.end}"


@dataclass(frozen=True)
class ProbeResult:
    seq: int
    time: float                          # when it was sent (seconds since the epoch)
    # as ping's: from sending to the kernel's arrival stamp of the reply here (the netif_rx
    # that queued it on a backlog, else its receive, in the sender's namespace); None: lost
    rtt_us: float | None
    checkpoints: tuple[Checkpoint, ...]  # in time order (a server's, on this clock, among them)
    stages: tuple[Stage, ...]            # between each two checkpoints; they add up to total_us
    drop_reason: str | None = None       # lost, and the kernel said why it dropped it
    remote: tuple[Checkpoint, ...] = ()  # the server's entries as it wrote them, on its own clock
    clock_offset_us: float | None = None  # the server's clock minus this one, as estimated
    clock_bound_us: float | None = None   # the estimate is within this of the truth
    total_us: float | None = None         # to the reply read in user space: the RTT and the reader's part

    @property
    def lost(self) -> bool:
        return self.rtt_us is None

    @property
    def slowest(self) -> Stage | None:
        return max(self.stages, key=lambda s: s.us, default=None)

    @property
    def last_seen(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lost"] = self.lost
        d["slowest"] = self.slowest.name if self.slowest else None
        for c, checkpoint in zip(d["checkpoints"], self.checkpoints):
            c["label"] = checkpoint.label
        return d


@dataclass
class _Pending:
    seq: int
    sent_ns: int
    wall: float
    deadline: float
    netns: str
    events: list = field(default_factory=list)


# The last stretch before a probe is due (or given up) is spent polling, not asleep, as ping
# polls between probes less than 10 ms apart: a probe sent from a CPU that has just left its
# idle state takes several µs longer to reach the wire (5-6 µs on a same-host veth, 2026-11-29),
# more than the whole path there. It costs at most this much CPU time per probe.
SPIN_S = 0.002


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf

        self.config = config
        self.address = _resolve(config.target)
        self.session_id = random.randrange(1, 1 << 32)
        self.echo_id = os.getpid() & 0xFFFF
        self.foreign = 0  # ICMP messages read that were not our probes' replies
        self.clock = ClockFilter()
        self._names = _Names()
        self._sock = None
        self._obj = None
        try:
            self._sock = _raw_socket(config.netns)
            spec = compile_bpf(PROGRAM)
            self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK)
            self.missing = skip_missing_tracepoints(spec, self.hook == TYPED_HOOK)
            spec.programs["pt_reply_out"].autoload = False  # the server's (server.py)
            spec.rodata["targ_session"] = self.session_id
            self._obj = spec.load()
            self._wire = wire.Layout(self._obj.btf)
            self._drop = self._wire.points.index("drop")
            self._obj.attach()
            self._reader = self._obj.ring_buffer("events", event_type="pingtrace_event")
            self._drop_reasons = _drop_reasons(self._obj.btf)
        except BaseException:
            self.close()
            raise
        self._netns = self._names.current(config.netns)

    @property
    def lost_events(self) -> int:
        """Checkpoint events the kernel dropped (ring buffer full)."""
        return self._reader.lost or 0

    def probes(self):
        """Send the probes and yield a ProbeResult for each, as its reply comes or it is lost."""
        cfg = self.config
        self._obj.bss["reader_tid"] = threading.get_native_id()  # whose wakeups are a reply's
        interval = cfg.interval_us / 1e6
        start = time.monotonic()
        end = None if cfg.duration is None else start + cfg.duration
        pacer, sent = Pacer(cfg.mode, interval, start), 0
        pending: dict[int, _Pending] = {}
        while True:
            # every reply waiting is read (and stamped) before anything else: before the next
            # probe is sent, and before the caller handles the results
            for seq, rx_ns, entries in list(self._replies()):
                if seq in pending:
                    self._collect(pending)
                    pacer.finished(time.monotonic())
                    yield self._finished(pending.pop(seq), rx_ns, entries)
            now = time.monotonic()
            for seq in [s for s, p in pending.items() if p.deadline <= now]:
                self._collect(pending)
                pacer.finished(now)
                yield self._finished(pending.pop(seq), None)
            now = time.monotonic()
            sending = (cfg.count is None or sent < cfg.count) and (end is None or now < end)
            if not sending and not pending:
                return
            if sending and pacer.due(now, len(pending)):
                pending[sent] = self._send(sent)
                sent += 1
                pacer.sent(now)
                continue
            send_at = [pacer.next] if sending and not pacer.waits_for_reply(len(pending)) else []
            wake = min(send_at + [p.deadline for p in pending.values()])
            if wake - now > SPIN_S:
                select.select([self._sock], [], [], wake - now - SPIN_S)
            else:
                os.sched_yield()  # see SPIN_S

    def close(self) -> None:
        if self._obj is not None:
            self._obj.close()
            self._obj = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # --- inside ---

    def _send(self, seq: int) -> _Pending:
        message = self._wire.request(self.echo_id, self.session_id, seq, self.config.size)
        wall, sent_ns = time.time(), time.monotonic_ns()
        self._sock.sendto(message, (self.address, 0))
        return _Pending(seq, sent_ns, wall, time.monotonic() + self.config.timeout, self._netns)

    def _replies(self):
        """(seq, when read, the server's entries) of each of our probes' replies waiting."""
        while True:
            try:
                packet = self._sock.recv(65535, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            rx_ns = time.monotonic_ns()
            try:
                probe = self._wire.parse(packet)
            except wire.MalformedProbe:
                self.foreign += 1
                continue
            if probe.icmp_type != wire.ICMP_ECHO_REPLY or probe.session != self.session_id:
                self.foreign += probe.session != self.session_id  # another run's, or a request we see
                continue
            yield probe.seq, rx_ns, probe.entries

    def _collect(self, pending: dict) -> None:
        """Hand each checkpoint event the kernel has sent so far to its probe (one that is
        finished already, lost, gets no more)."""
        for ev in self._reader.read_batch(0):
            if ev.seq in pending:
                pending[ev.seq].events.append(ev)

    def _finished(self, p: _Pending, rx_ns: int | None, entries=()) -> ProbeResult:
        seen = [ev for ev in p.events if rx_ns is None or ev.point != self._drop]  # a reply's drops: copies
        # sent: stamped here just before sendto(), as ping does (a kernel stamp at the syscall's
        # entry would need a syscall tracepoint, which slows every syscall of every process)
        points = [Checkpoint("user_tx", "request", p.netns, "", p.sent_ns)]
        points += sorted((self._checkpoint(ev) for ev in seen), key=lambda c: c.ns)
        drop = next((ev for ev in seen if ev.point == self._drop), None)
        if rx_ns is not None:
            points.append(Checkpoint("user_rx", "reply", p.netns, "", rx_ns))
        remote = tuple(self._remote_checkpoint(e) for e in entries)
        offset = self._clock_sample(points, remote, p.netns)
        if remote and offset is not None and not self.config.nslocal:
            points = sorted(points + [replace(c, ns=round(c.ns - offset[0])) for c in remote], key=lambda c: c.ns)
        stages = tuple(Stage(a.label, b.label, (b.ns - a.ns) / 1000) for a, b in zip(points, points[1:]))
        arrived = _reply_arrival(points, p.netns)
        rtt_ns = None if rx_ns is None else (rx_ns if arrived is None else arrived) - p.sent_ns
        return ProbeResult(
            seq=p.seq, time=p.wall, rtt_us=None if rtt_ns is None else rtt_ns / 1000,
            total_us=None if rx_ns is None else (rx_ns - p.sent_ns) / 1000,
            checkpoints=tuple(points), stages=stages,
            drop_reason=self._drop_reasons.get(drop.reason, str(drop.reason)) if drop else None,
            remote=remote, clock_offset_us=None if offset is None else offset[0] / 1000,
            clock_bound_us=None if offset is None else offset[1] / 1000)

    def _clock_sample(self, points, remote, netns: str):
        """Feed the clock filter this probe's T1..T4 (see ClockFilter); its estimate."""
        if len(remote) >= 2:
            out = [c.ns for c in points if c.direction == "request" and c.netns == netns and c.device]
            back = [c.ns for c in points if c.direction == "reply" and c.netns == netns and c.device]
            if out and back:
                self.clock.add(max(out), remote[0].ns, remote[-1].ns, min(back))
        return self.clock.estimate if remote else None

    def _checkpoint(self, ev) -> Checkpoint:
        return Checkpoint(self._wire.point_name(ev.point), DIRECTIONS.get(ev.icmp_type, str(ev.icmp_type)),
                          self._names.netns(ev.netns), self._names.device(ev.netns, ev.ifindex), ev.ts, ev.cpu)

    def _remote_checkpoint(self, entry) -> Checkpoint:
        """A server's entry as a checkpoint, on its clock; named by its user id, its namespace's
        inode and its device's index (names there are not known here)."""
        point = self._wire.point_name(entry.point)
        return Checkpoint(point, "reply" if point == "egress" else "request",
                          f"remote{entry.user_id}:netns-{entry.netns}" if entry.netns else f"remote{entry.user_id}",
                          f"if{entry.ifindex}" if entry.ifindex else "", entry.ns)


def _reply_arrival(points, netns: str) -> int | None:
    """When the reply came back into the client's namespace: where the kernel stamps a packet's
    arrival (the SO_TIMESTAMP ping reports), its last receive there, or the netif_rx that queued
    it on a backlog (veth, loopback) just before."""
    last = None
    for i, c in enumerate(points):
        if c.direction == "reply" and c.point == "receive" and c.netns == netns:
            last = i
    if last is None:
        return None
    before = points[last - 1]
    if (before.direction, before.point, before.netns, before.device) == ("reply", "netif_rx", netns,
                                                                        points[last].device):
        return before.ns
    return points[last].ns


def _resolve(target: str) -> str:
    try:
        return socket.gethostbyname(target)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError("target", f"unknown host {target!r} ({getattr(exc, 'strerror', exc)})") from None


def _raw_socket(netns: str | None) -> socket.socket:
    """A raw ICMP socket, in ``netns`` when given (it stays there: sockets keep their namespace)."""
    def make():
        try:
            return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        except PermissionError:
            raise PermissionDeniedError("sending probes needs a raw ICMP socket: permission denied",
                                        hint="run as root (CAP_NET_RAW)") from None

    if netns is None:
        return make()
    from ...net.netns import in_netns

    return in_netns(netns, make)


def _drop_reasons(btf) -> dict[int, str]:
    try:
        return {v: n.lower() for n, v in btf.enum("skb_drop_reason", strip="SKB_DROP_REASON_").items()}
    except (KeyError, LookupError, AttributeError):
        return {}


class _Names:
    """Names of namespaces (by inode) and of their devices (by ifindex), looked up once."""

    def __init__(self):
        self._netns: dict[int, str] = {}
        self._devices: dict[tuple[int, int], str] = {}

    def current(self, netns: str | None) -> str:
        """The name the namespace the probes leave from goes by."""
        from ...net.netns import netns_path

        path = netns_path(netns) if netns else "/proc/self/ns/net"
        return self.netns(os.stat(path).st_ino)

    def netns(self, inode: int) -> str:
        if inode not in self._netns:
            self._netns[inode] = self._find_netns(inode)
        return self._netns[inode]

    def device(self, netns_inode: int, ifindex: int) -> str:
        if not ifindex:
            return ""
        key = (netns_inode, ifindex)
        if key not in self._devices:
            self._devices[key] = self._find_device(netns_inode, ifindex) or f"if{ifindex}"
        return self._devices[key]

    @staticmethod
    def _named() -> dict[int, str]:
        from ...net.netns import list_netns, netns_path

        found = {}
        for name in list_netns():
            try:
                found[os.stat(netns_path(name)).st_ino] = name
            except OSError:
                continue
        return found

    def _find_netns(self, inode: int) -> str:
        try:
            if inode == os.stat("/proc/1/ns/net").st_ino:
                return "host"
        except OSError:
            pass
        return self._named().get(inode, f"netns:{inode}")

    def _find_device(self, netns_inode: int, ifindex: int) -> str | None:
        """The name of device ``ifindex`` there, asked in that namespace (an ioctl: no
        netlink socket, nothing left running when a Ctrl-C comes in the middle)."""
        from ...net.netns import in_netns, netns_path

        try:
            if netns_inode == os.stat("/proc/thread-self/ns/net").st_ino:
                return socket.if_indextoname(ifindex)
            name = self.netns(netns_inode)
            if name == "host":
                return in_netns("/proc/1/ns/net", socket.if_indextoname, ifindex)
            if name.startswith("netns:"):
                return None
            return in_netns(name, socket.if_indextoname, ifindex)
        except OSError:  # gone already: the number will do
            return None


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
