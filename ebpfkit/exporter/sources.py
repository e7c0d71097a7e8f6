"""One small adapter per tool session: it opens the session (the exporter never copies a
tool), and at each scrape turns what the session samples into series of the MetricTable.

Sessions that drain their maps at each sample (runqlat, iofsstat) hand out deltas: the
adapter keeps running totals, since a Prometheus counter or histogram is cumulative. Pinned
programs another command attached (the xdp filter and load balancer, sockmap, the guard) keep
their own totals: the adapter reads them, at each scrape, from their pins (``publish``), and
reports the source down (and forgets its series) while none is attached.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..errors import ConfigError
from ..sysinfo.containers import CGROUP_LABELS, cgroup_labels
from ..tools.config import ToolConfig
from ..tools.hardirqs import session as hardirqs
from ..tools.iofsstat import session as iofsstat
from ..tools.runqlat import session as runqlat
from ..tools import task_times
from ..tools.softirqs import session as softirqs
from .labels import HistogramValue, MetricTable, drop_exited_cgroups


class Source:
    """A source of metrics. ``start()`` opens what stays open, ``collect()`` reads it into the
    table (both raise EbpfkitError when they cannot), ``close()`` lets go."""

    kind = ""
    Options: type[ToolConfig] = ToolConfig
    retry = False  # try start() again at later scrapes (what it reads may appear later)

    def __init__(self, options, table: MetricTable, pid_label: bool = False):
        self.options, self.table, self.pid_label = options, table, pid_label
        self.session = None
        self.published: dict = {}  # metric name -> (metric, the label sets publish() last gave it)

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

    def publish(self, metric, values: dict) -> None:
        """Make this source's series of ``metric`` exactly ``values`` (label values -> value):
        totals the kernel keeps, read whole at each scrape. Series it set before and not now
        (a rule deleted, a cgroup gone) are dropped; another source's series of the same
        metric (a second xdp filter) are left alone."""
        for labels, value in values.items():
            metric.set(labels, value)
        _, before = self.published.get(metric.name, (metric, ()))
        metric.remove([labels for labels in before if labels not in values])
        self.published[metric.name] = metric, values.keys()

    def forget(self) -> None:
        """Drop every series publish() set: the source went down."""
        for metric, labels in self.published.values():
            metric.remove(labels)
        self.published = {}

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
            value = self.latency.get(labels, lambda: HistogramValue([0] * task_times.SLOTS, unit))
            value.add(hist.counts, (hist.sum or 0) * unit)
        if self.options.by:
            drop_exited_cgroups(self.latency, self.root)


# --- hardirqs and softirqs ------------------------------------------------------------------

class _HandlerSource(Source):
    """Runs of each IRQ handler (hardirqs) or softirq vector (softirqs) and the time spent in
    them; with ``dist`` also a histogram of each run's time (``_sum`` exact: the program adds
    every run's nanoseconds), with ``per_cpu`` a ``cpu`` label. The tool's session drains its
    map at each sample: the running totals are kept here."""

    TOOL = None   # the tool's session module
    PREFIX = ""   # the metrics' names start with it
    WHAT = ""     # what a key is, for the help texts
    KEY: tuple[str, ...] = ()  # the labels naming a key

    def start(self) -> None:
        self.session = self.TOOL.open(self.options)
        labels = (*self.KEY, *(("cpu",) if self.options.per_cpu else ()))
        self.runs = self.table.metric(f"{self.PREFIX}_runs_total", "counter",
                                      f"Runs of each {self.WHAT} ({self.kind}).", labels)
        self.seconds = None if self.options.counts_only else self.table.metric(
            f"{self.PREFIX}_seconds_total", "counter", f"Time spent in each {self.WHAT} ({self.kind}).", labels)
        self.durations = None if not self.options.dist else self.table.metric(
            f"{self.PREFIX}_duration_seconds", "histogram", f"Time of each run of a {self.WHAT} ({self.kind}).",
            labels)

    def collect(self) -> None:
        unit = 1e-9 if self.options.nanoseconds else 1e-6
        for stat in self.session.sample():
            key = (*self._key(stat), *((str(stat.cpu),) if self.options.per_cpu else ()))
            self.runs.add(key, stat.count)
            if self.seconds is not None:
                self.seconds.add(key, stat.total_ns / 1e9)
            if self.durations is not None:
                counts = stat.histogram.counts
                value = self.durations.get(key, lambda: HistogramValue([0] * len(counts), unit))
                value.add(counts, stat.total_ns / 1e9)

    def _key(self, stat) -> tuple[str, ...]:
        raise NotImplementedError


class HardirqsSource(_HandlerSource):
    kind, TOOL, Options = "hardirqs", hardirqs, hardirqs.Config
    PREFIX, WHAT, KEY = "ebpfkit_hardirq", "IRQ handler", ("irq", "handler")

    def _key(self, stat) -> tuple[str, ...]:
        return str(stat.irq), stat.name


class SoftirqsSource(_HandlerSource):
    kind, TOOL, Options = "softirqs", softirqs, softirqs.Config
    PREFIX, WHAT, KEY = "ebpfkit_softirq", "softirq vector", ("vector",)

    def _key(self, stat) -> tuple[str, ...]:
        return (stat.name,)


# --- iofsstat --------------------------------------------------------------------------------

_FILE_COUNTERS = (("reads", "ebpfkit_file_reads_total", "read calls on files"),
                  ("writes", "ebpfkit_file_writes_total", "write calls on files"),
                  ("read_bytes", "ebpfkit_file_read_bytes_total", "bytes read from files"),
                  ("write_bytes", "ebpfkit_file_written_bytes_total", "bytes written to files"))
_BLOCK_COUNTERS = (("reads", "ebpfkit_block_reads_total", "block IO reads queued"),
                   ("writes", "ebpfkit_block_writes_total", "block IO writes queued"),
                   ("read_bytes", "ebpfkit_block_read_bytes_total", "bytes of block IO reads queued"),
                   ("write_bytes", "ebpfkit_block_written_bytes_total", "bytes of block IO writes queued"))


@dataclass(frozen=True)
class IofsstatOptions(iofsstat.Config):
    top: int | None = None  # show only the N series (command, cgroup) that moved the most bytes

    def validate(self) -> None:
        super().validate()
        if self.top is not None and self.top < 1:
            raise ConfigError("top", f"must be at least 1, got {self.top}")


class IofsstatSource(Source):
    """File IO (calls, bytes) and block IO per command and cgroup, with the container and
    pod the cgroup belongs to. Series of cgroups that are gone are dropped. With ``top``,
    only the N series that read and wrote the most bytes since the exporter started are
    shown (file and block IO each); the others keep counting, and show up, with their
    whole total, if they overtake one of those."""

    kind = "iofsstat"
    Options = IofsstatOptions

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
        if self.options.top:
            self._show_top(self.files)
            self._show_top(self.blocks)

    def _show_top(self, metrics) -> None:
        by_field = dict(metrics)
        moved: Counter = Counter()
        for field in ("read_bytes", "write_bytes"):
            moved.update(by_field[field].series)
        shown = {labels for labels, _ in moved.most_common(self.options.top)}
        for _, metric in metrics:
            metric.shown = shown

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
    scrape. The session stays open while that program runs (a large filter's rules are
    decoded once, not at every scrape); a detach or a new attach is seen at the next scrape."""

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
        self.known_labels: dict[str, dict] = {}  # part -> {item name: its label values}
        self.session = self.attached()  # NotAttachedError: reported, tried again next scrape

    def collect(self) -> None:
        if self.session is not None and not self.session.current():
            self.close()  # detached, or another program attached since: open that one
        if self.session is None:
            self.session = self.attached()
        doc = self.session.sample()
        rows = {"items": doc[self.ITEMS], "totals": doc["totals"]}
        names = {"items": [str(row[self.ITEM_LABEL]) for row in rows["items"]],
                 "totals": [row["counter"] for row in rows["totals"]]}
        for (part, field), metric in self.by_field.items():
            keys = self._labels(part, names[part])
            self.publish(metric, {key: row[field] for key, row in zip(keys, rows[part])})

    def _labels(self, part: str, names: list[str]) -> list[tuple]:
        """The label values of the series of these items: the same tuples from one scrape
        to the next (10k series then keep one copy, not one per metric and per scrape)."""
        where = (self.options.iface, self.options.netns or "")
        known = self.known_labels.get(part, {})
        fresh = self.known_labels[part] = {name: known.get(name) or (*where, name) for name in names}
        return [fresh[name] for name in names]


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

    def collect(self) -> None:
        from ..tools.sockmap import session

        samplers = (session.attached_all() if self.options.cgroup is None
                    else [session.attached(self.options.cgroup)])
        self.cgroups.refresh()
        values: dict = {field: {} for field in (*self.counters, "sockets")}
        for sampler in samplers:
            record = sampler.sample()
            key = tuple(cgroup_labels(self.cgroups.path(record["cgroup_id"]) or record["cgroup"]).values())
            for field, by_key in values.items():
                by_key[key] = record[field]
        for field, metric in (*self.counters.items(), ("sockets", self.sockets)):
            self.publish(metric, values[field])


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
        self.session = session.attached()

    def collect(self) -> None:
        record = self.session.sample()
        for field, metric in self.counters.items():
            self.publish(metric, {(): record[field]})


SOURCES: dict[str, type[Source]] = {s.kind: s for s in (RunqlatSource, HardirqsSource, SoftirqsSource,
                                                         IofsstatSource, XdpFilterSource, XdpLbSource,
                                                         SockmapSource, GuardSource)}
