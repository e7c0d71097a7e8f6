"""runqlat's session: load runqlat.bpf.c, attach it, and hand out the run-queue latency
histograms gathered since the last sample. No click, no printing, no formats: the CLI,
the exporter and a notebook all read it the same way::

    from ebpfkit.tools import runqlat
    with runqlat.open(per_process=True) as session:
        time.sleep(1)
        for hist in session.sample():      # Log2Histogram, one per process
            print(hist.label, hist.total)

One histogram, or one per process (``per_process``), thread (``per_thread``), PID namespace
(``per_pidns``), cgroup or container (``by``); ``sample_keyed()`` gives them by what they
are kept per. ``cgroup`` traces only the tasks of a cgroup v2 directory (and below it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ConfigError
from ...histogram import Log2Histogram
from ..config import check_choice, check_exclusive
from ...sysinfo.cgroups import require_cgroup2
from ...sysinfo.containers import CgroupPaths, cgroup_labels
from ..session import ToolSession, choose_typed_or_raw, load_attached
from ..task_times import TaskTimesConfig

PROGRAM = os.path.join(os.path.dirname(__file__), "runqlat.bpf.c")
TYPED_HOOK = "tp_btf sched_switch, task storage, the kernel's sched_info"
RAW_HOOK = "raw tracepoint sched_switch, the kernel's sched_info"
# RUNQLAT_KEY_* of runqlat.h: what the BPF side keeps a histogram per
KEY_NONE, KEY_TGID, KEY_TID, KEY_PIDNS, KEY_CGROUP = range(5)
BY = ("cgroup", "container")  # Config.by: a histogram per cgroup, or per container (or pod)


@dataclass(frozen=True)
class Config(TaskTimesConfig):
    """milliseconds, per_process and pid (as cpudist's), and what else runqlat keys by."""

    per_thread: bool = False    # one histogram per thread
    per_pidns: bool = False     # one histogram per PID namespace
    by: str | None = None       # one histogram per "cgroup" (v2), or per "container" (or pod)
    cgroup: str | None = None   # only tasks in this cgroup v2 directory or below it

    def validate(self) -> None:
        super().validate()
        if self.by is not None:
            check_choice("by", self.by, BY)
        check_exclusive("per_thread", self.per_thread, per_process=self.per_process)
        check_exclusive("per_pidns", self.per_pidns, per_process=self.per_process, per_thread=self.per_thread)
        check_exclusive("by", self.by, per_process=self.per_process, per_thread=self.per_thread,
                        per_pidns=self.per_pidns)
        if self.cgroup is not None:
            self.cgroup_id  # noqa: B018 - raises ConfigError when it is no cgroup v2 directory

    @property
    def cgroup_id(self) -> int:
        """The id of ``cgroup`` (0: every cgroup)."""
        from ...sysinfo.cgroups import NotCgroup2Error, cgroup2_directory

        if self.cgroup is None:
            return 0
        try:
            return cgroup2_directory(self.cgroup)[1]
        except NotCgroup2Error as exc:
            raise ConfigError("cgroup", str(exc), hint=exc.hint) from None

    @property
    def key(self) -> int:
        """What the BPF side keeps a histogram per (a KEY_*)."""
        if self.by is not None:
            return KEY_CGROUP
        return (KEY_TGID if self.per_process else KEY_TID if self.per_thread
                else KEY_PIDNS if self.per_pidns else KEY_NONE)

    def rodata(self) -> dict:
        return {"targ_ms": self.milliseconds, "targ_key": self.key, "targ_tgid": self.pid or 0,
                "targ_cgroup_id": self.cgroup_id}


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf
        from ...engine import features

        self.config = config
        features.require("sched_info")  # the waits are the kernel's own account
        spec = compile_bpf(PROGRAM)
        self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK, typed_maps=("last_runs",),
                                        raw_maps=("last_runs_by_tid",))
        spec.rodata.update(config.rodata())
        self._cgroups = CgroupPaths(require_cgroup2()) if config.by else None
        self._obj = load_attached(spec)
        self._hists = self._obj.maps["hists"]

    def sample(self) -> list[Log2Histogram]:
        """The waits since the last sample (the map is drained): one histogram, or one per
        process, thread, PID namespace, cgroup or container as the Config says (sorted by what
        they are kept per, each labelled with it); never an empty list."""
        return list(self.sample_keyed().values()) or [Log2Histogram.from_counts([], unit=self.config.unit)]

    def sample_keyed(self) -> dict:
        """The waits since the last sample, {key: Log2Histogram}, the key being what the
        histogram is kept per: None (the one histogram), the PID (per process), the TID (per
        thread), the PID namespace's inode number (per_pidns), the cgroup's path under the
        cgroup2 mount (by cgroup), the (container short id, pod UID) pair, empty strings where
        none applies (by container); None for the waits of cgroups removed since. Empty when
        nothing ran."""
        if self._cgroups is not None:
            self._cgroups.refresh()
        merged: dict = {}
        for raw_key, value in self._hists.pop_all():
            key, label = self._key_and_label(raw_key, value.comm)
            hist = Log2Histogram.from_counts(list(value.slots), unit=self.config.unit, label=label,
                                             sum=value.sum_ns / self.config.unit_ns)
            merged[key] = _merged(merged[key], hist) if key in merged else hist
        return dict(sorted(merged.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))

    def _key_and_label(self, raw_key: int, comm: str) -> tuple:
        config = self.config
        if config.per_process:
            return raw_key, f"pid = {raw_key} {comm}"
        if config.per_thread:
            return raw_key, f"tid = {raw_key} {comm}"
        if config.per_pidns:
            return raw_key, f"pidns = {raw_key}"
        if config.by is None:
            return None, None
        path = self._cgroups.path(raw_key)
        if path is None:  # removed before this sample read its waits
            return None, f"{config.by} = (cgroup removed)"
        if config.by == "cgroup":
            return path, f"cgroup = {path}"
        labels = cgroup_labels(path)
        key = (labels["container"], labels["pod_uid"])
        return key, container_label(*key)

    def program_ids(self) -> dict[str, int]:
        """{name: id} of its BPF programs (what the exporter reports run time of)."""
        return self._obj.program_ids()

    def close(self) -> None:
        self._obj.close()


def container_label(container: str, pod: str) -> str:
    """A ``by="container"`` histogram's label: its container and pod (a pod's own cgroup
    has no container), or that it is in none."""
    if not container:
        return f"pod = {pod}" if pod else "no container"
    return f"container = {container}" + (f" pod = {pod}" if pod else "")


def _merged(one: Log2Histogram, other: Log2Histogram) -> Log2Histogram:
    """One histogram counting both's waits (cgroups of one container, cgroups removed since)."""
    counts = [a + b for a, b in zip(one.counts, other.counts)]
    return Log2Histogram.from_counts(counts, unit=one.unit, label=one.label, sum=(one.sum or 0) + (other.sum or 0))


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
