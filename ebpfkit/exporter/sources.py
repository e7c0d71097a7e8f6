"""One small adapter per tool session: it opens the session (the exporter never copies a
tool), and at each scrape turns what the session samples into series of the MetricTable.

Sessions that drain their maps at each sample (runqlat, iofsstat) hand out deltas: the
adapter keeps running totals, since a Prometheus counter or histogram is cumulative. Pinned
programs another command attached (the xdp filter and load balancer, sockmap, the guard) keep
their own totals: the adapter reads them, at each scrape, from their pins, and reports the
source down (and forgets its series) while none is attached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError
from ..tools.config import ToolConfig
from ..tools.iofsstat import session as iofsstat
from ..tools.runqlat import session as runqlat
from ..sysinfo.containers import CGROUP_LABELS, cgroup_labels
from .labels import HistogramValue, MetricTable, drop_exited_cgroups


class Source:
    """A source of metrics. ``start()`` opens what stays open, ``collect()`` reads it into the
    table (both raise EbpfkitError when they cannot), ``close()`` lets go."""

    kind = ""
    Options: type[ToolConfig] = ToolConfig
    retry = False  # try start() again at later scrapes (what it reads may appear later)
    owned: tuple = ()  # the metrics whose series it sets from the kernel's totals (see forget)

    def __init__(self, options, table: MetricTable, pid_label: bool = False):
        self.options, self.table, self.pid_label = options, table, pid_label
        self.session = None

    @property
    def name(self) -> str:
        return self.kind

    def start(self) -> None:
        """Open the session; NotSupportedError and friends say why it cannot run here."""

    def collect(self) -> None:
        raise NotImplementedError

    def program_ids(self) -> dict[str, int]:
        """{name: id} of the BPF programs the source reads (where its session says)."""
        ids = getattr(self.session, "program_ids", None)
        return ids() if ids else {}

    def mine(self, labels: dict) -> bool:
        """Whether a series of an ``owned`` metric is this source's (two sources may share one)."""
        return True

    def forget(self) -> None:
        """Drop this source's series of the kernel's totals: it went away, or is read again."""
        for metric in self.owned:
            metric.drop(self.mine)

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            session.close()


# --- runqlat ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunqlatOptions(runqlat.Config):
    def validate(self) -> None:
        super().validate()
        for field in ("per_process", "per_thread"):
            if getattr(self, field):
                raise ConfigError(field, "not exported: a series per process or thread is what the exporter's "
                                         "bounded labels avoid; use 'pid' to watch one process")
        if self.per_pidns:
            raise ConfigError("per_pidns", "not exported; 'by: cgroup' gives a series per cgroup, with its "
                                           "container and pod")
        if self.by == "container":
            raise ConfigError("by", "not exported: use 'by: cgroup', whose series carry the container and "
                                    "pod_uid labels (sum by container in PromQL)")


class RunqlatSource(Source):
    """Run-queue latency as a Prometheus histogram in seconds. runqlat's log2 slot i counts
    waits of [2^i, 2^(i+1)) units (slot 0: [0, 2)), so its ``le`` bound is 2^(i+1) units; the
    last slot also holds every longer wait, so it is only under +Inf. ``_sum`` is exact: the
    BPF program adds each wait's nanoseconds to the map next to the slots. With ``by: cgroup``,
    a histogram per cgroup (cgroup, container, pod_uid labels); those of cgroups that are
    gone are dropped."""

    kind = "runqlat"
    Options = RunqlatOptions

    def start(self) -> None:
        from ..sysinfo.cgroups import cgroup2_mount

        self.session = runqlat.open(self.options)
        self.root = cgroup2_mount()
        self.latency = self.table.metric(
            "ebpfkit_runqueue_latency_seconds", "histogram",
            "Time from a task becoming runnable until it runs on a CPU (runqlat).",
            CGROUP_LABELS if self.options.by else ())

    def collect(self) -> None:
        unit = self.options.unit_ns / 1e9
        for key, hist in self.session.sample_keyed().items():
            if self.options.by and key is None:
                continue  # cgroups removed since: their series would be dropped at once
            labels = tuple(cgroup_labels(key).values()) if self.options.by else ()
            value = self.latency.get(labels, lambda: HistogramValue([0] * runqlat.SLOTS, unit))
            value.add(hist.counts, (hist.sum or 0) * unit)
        if self.options.by:
            drop_exited_cgroups(self.latency, self.root)


# --- iofsstat --------------------------------------------------------------------------------

_FILE_COUNTERS = (("reads", "ebpfkit_file_reads_total", "read calls on files"),
                  ("writes", "ebpfkit_file_writes_total", "write calls on files"),
                  ("read_bytes", "ebpfkit_file_read_bytes_total", "bytes read from files"),
                  ("write_bytes", "ebpfkit_file_written_bytes_total", "bytes written to files"))
_BLOCK_COUNTERS = (("reads", "ebpfkit_block_reads_total", "block IO reads queued"),
                   ("writes", "ebpfkit_block_writes_total", "block IO writes queued"),
                   ("read_bytes", "ebpfkit_block_read_bytes_total", "bytes of block IO reads queued"),
                   ("write_bytes", "ebpfkit_block_written_bytes_total", "bytes of block IO writes queued"))


class IofsstatSource(Source):
    """File IO (calls, bytes) and block IO per command and cgroup, with the container and
    pod the cgroup belongs to. Series of cgroups that are gone are dropped."""

    kind = "iofsstat"
    Options = iofsstat.Config

    def start(self) -> None:
        from ..sysinfo.containers import CgroupPaths

        self.session = iofsstat.open(self.options)
        self.cgroups = CgroupPaths()
        labels = ("comm", *CGROUP_LABELS, *(("pid",) if self.pid_label else ()))
        self.files = [(key, self.table.metric(name, "counter", f"{what.capitalize()} (iofsstat).", labels))
                      for key, name, what in _FILE_COUNTERS]
        self.blocks = [(key, self.table.metric(name, "counter", f"{what.capitalize()} (iofsstat).",
                                               (*labels, "disk")))
                       for key, name, what in _BLOCK_COUNTERS]

    def collect(self) -> None:
        interval = self.session.sample()
        self.cgroups.refresh()
        self._count(interval.files, self.files)
        self._count(interval.disk_processes, self.blocks, "disk")
        for _, metric in self.files + self.blocks:
            drop_exited_cgroups(metric, self.cgroups.root)

    def _count(self, rows, metrics, *extra: str) -> None:
        for row in rows:
            path = self.cgroups.path(row["cgroup_id"])
            if path is None:
                continue  # its cgroup is already gone: its series would be dropped at once
            labels = {"comm": row["comm"], **cgroup_labels(path)}
            if self.pid_label:
                labels["pid"] = str(row["pid"])
            key = (*labels.values(), *(row[name] for name in extra))
            for field, metric in metrics:
                metric.add(key, row[field])


# --- xdp: the pinned filter and load balancer ---------------------------------------------

@dataclass(frozen=True)
class XdpOptions(ToolConfig):
    iface: str                 # the interface the program was attached to (`ebpfkit xdp ... attach`)
    netns: str | None = None   # its network namespace (a name under /run/netns), None: the host's


class _PinnedXdp(Source):
    """Counters of an XDP program another command attached, read from its pins at each
    scrape (opened and closed each time, so a detach or a new attach is seen at once)."""

    Options = XdpOptions
    retry = True
    ITEMS = ""  # the sample's per-item rows: "rules" or "backends"
    ITEM_LABEL = ""  # the label naming an item: "rule" or "backend"
    OPEN = ""  # xdp.session's function that reads it: "attached_filter" or "attached_lb"

    @property
    def name(self) -> str:
        where = f"@{self.options.netns}" if self.options.netns else ""
        return f"{self.kind} {self.options.iface}{where}"

    def attached(self):
        from ..tools.xdp import session

        return getattr(session, self.OPEN)(self.options.iface, self.options.netns)

    def start(self) -> None:
        prefix = self.kind.replace("xdp_", "ebpfkit_xdp_")
        where, item = ("iface", "netns"), self.ITEM_LABEL
        self.by_field = {
            ("items", "packets"): self.table.metric(f"{prefix}_{item}_packets_total", "counter",
                                                    f"Packets per {item} (xdp).", (*where, item)),
            ("items", "bytes"): self.table.metric(f"{prefix}_{item}_bytes_total", "counter",
                                                  f"Bytes per {item} (xdp).", (*where, item)),
            ("totals", "packets"): self.table.metric(f"{prefix}_packets_total", "counter",
                                                     "Packets by outcome (xdp).", (*where, "counter")),
            ("totals", "bytes"): self.table.metric(f"{prefix}_bytes_total", "counter",
                                                   "Bytes by outcome (xdp).", (*where, "counter")),
        }
        self.owned = tuple(self.by_field.values())
        self.session = self.attached()  # NotAttachedError: reported, tried again next scrape

    def collect(self) -> None:
        if self.session is None:
            self.session = self.attached()
        try:
            doc = self.session.sample()
        finally:
            self.close()  # the next scrape opens the pins again
        where = (self.options.iface, self.options.netns or "")
        self.forget()  # rules and backends removed since are gone with their series
        for (part, field), metric in self.by_field.items():
            rows = doc[self.ITEMS] if part == "items" else doc["totals"]
            for row in rows:
                name = str(row[self.ITEM_LABEL]) if part == "items" else row["counter"]
                metric.set((*where, name), row[field])

    def program_ids(self) -> dict[str, int]:
        with self.attached() as session:
            return session.program_ids()

    def mine(self, labels: dict) -> bool:
        return (labels["iface"], labels["netns"]) == (self.options.iface, self.options.netns or "")


class XdpFilterSource(_PinnedXdp):
    kind = "xdp_filter"
    ITEMS, ITEM_LABEL, OPEN = "rules", "rule", "attached_filter"


class XdpLbSource(_PinnedXdp):
    kind = "xdp_lb"
    ITEMS, ITEM_LABEL, OPEN = "backends", "backend", "attached_lb"


# --- sockmap and guard: counters of pinned programs ----------------------------------------

def _counters(table: MetricTable, prefix: str, names, labelnames=()) -> dict:
    """{sample key: counter metric} for (sample key, metric suffix, help) triples."""
    return {key: table.metric(f"{prefix}_{suffix}", "counter", what, labelnames) for key, suffix, what in names}


_SOCKMAP_COUNTERS = (
    ("msgs_redirected", "redirected_messages_total", "Messages sk_msg redirected to the peer socket (sockmap)."),
    ("bytes_redirected", "redirected_bytes_total", "Bytes sk_msg redirected to the peer socket (sockmap)."),
    ("msgs_fallback", "fallback_messages_total", "Messages sent the normal way (sockmap)."),
    ("bytes_fallback", "fallback_bytes_total", "Bytes sent the normal way (sockmap)."),
    ("sockets_added", "sockets_added_total", "Sockets sockops added to the map (sockmap)."),
    ("add_failed", "socket_add_failures_total", "Sockets sockops could not add (sockmap)."),
)


@dataclass(frozen=True)
class SockmapOptions(ToolConfig):
    cgroup: str | None = None  # the cgroup v2 directory `sockmap enable` accelerated; None: every one


class SockmapSource(Source):
    """The accelerations `ebpfkit sockmap enable` pinned: messages and bytes redirected and
    fallen back, sockets, per cgroup (with its container and pod). Read from the pins at
    each scrape; with ``cgroup`` set, down while that one is not enabled."""

    kind = "sockmap"
    Options = SockmapOptions
    retry = True

    def start(self) -> None:
        from ..sysinfo.containers import CgroupPaths

        self.cgroups = CgroupPaths()
        self.counters = _counters(self.table, "ebpfkit_sockmap", _SOCKMAP_COUNTERS, CGROUP_LABELS)
        self.sockets = self.table.metric("ebpfkit_sockmap_sockets", "gauge",
                                         "Sockets in the map now (sockmap).", CGROUP_LABELS)
        self.owned = (*self.counters.values(), self.sockets)
        self.where = self.options.cgroup and self._relative(self.options.cgroup)

    def collect(self) -> None:
        from ..tools.sockmap import session

        samplers = (session.attached_all() if self.options.cgroup is None
                    else [session.attached(self.options.cgroup)])
        self.cgroups.refresh()
        self.forget()
        for sampler in samplers:
            record = sampler.sample()
            key = tuple(cgroup_labels(self.cgroups.path(record["cgroup_id"]) or record["cgroup"]).values())
            for field, metric in self.counters.items():
                metric.set(key, record[field])
            self.sockets.set(key, record["sockets"])

    def mine(self, labels: dict) -> bool:
        return self.where is None or labels["cgroup"] == self.where

    def _relative(self, directory: str) -> str:
        """A cgroup directory as the labels name it: its path under the cgroup2 mount."""
        rel = os.path.relpath(os.path.realpath(directory), self.cgroups.root or "/")
        return "/" if rel == "." else "/" + rel


@dataclass(frozen=True)
class GuardOptions(ToolConfig):
    """The guard has one instance per machine: nothing to choose."""


class GuardSource(Source):
    """The running guard's (BPF-LSM) counters, read from its pins through read-only fds:
    denials (enforce mode), audited (what audit mode would deny), log events lost. Down while
    no guard runs."""

    kind = "guard"
    Options = GuardOptions
    retry = True

    def start(self) -> None:
        from ..tools.guard import session

        self.counters = _counters(self.table, "ebpfkit_guard", (
            ("denied", "denials_total", "Operations the guard denied (enforce mode)."),
            ("audited", "audited_total", "Operations the guard would deny (audit mode)."),
            ("lost", "events_lost_total", "Violation log events lost (the ring buffer was full)."),
        ))
        self.owned = tuple(self.counters.values())
        self.session = session.attached()

    def collect(self) -> None:
        record = self.session.sample()
        for field, metric in self.counters.items():
            metric.set((), record[field])


SOURCES: dict[str, type[Source]] = {s.kind: s for s in (RunqlatSource, IofsstatSource, XdpFilterSource,
                                                         XdpLbSource, SockmapSource, GuardSource)}
