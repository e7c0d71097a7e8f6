"""irqoff's session: find sections with hard interrupts off, and with softirqs off, longer
than ``threshold_ms``, and hand out one ``Section`` each, with the CPU, the task, the length
and a symbolized kernel stack. No click, no printing, no formats::

    from ebpfkit.tools import irqoff
    with irqoff.open(threshold_ms=20) as session:
        print(session.mode)                          # "software", "nmi" or "exact"
        for section in session.events(timeout=10):   # Section dataclasses, as they come
            print(section.kind, section.cpu, section.comm, section.tid, section.lat_us)
            print("\\n".join(section.stack), section.stack_note)

How sections are found (the mode, best first; ``choose_mode`` picks):

- ``exact``: the preemptirq tracepoints time every irq_disable..irq_enable (kernels built with
  CONFIG_PREEMPTIRQ_TRACEPOINTS; distribution kernels are not). The stack is where
  interrupts came back on.
- ``nmi``: where a hardware PMU exists, a cycles event's NMI (which fires with interrupts off)
  sees that the per-CPU tick is late and takes the culprit's stack, tid and comm.
- ``software``: a cpu-clock perf event (an hrtimer) ticks on every CPU every ``period_ns``
  (a tenth of the threshold, 0.1..10 ms); a tick later than the threshold after the previous
  one means interrupts were off in between. The length is the gap between the two ticks: the
  section's, plus at most one period. The task and stack are those the late tick interrupts,
  just after interrupts came back on: often the culprit's (a local_irq_restore() returns into
  it), not always, and labelled "stack when the tick ran".

Softirqs off (local_bh_disable(), spin_lock_bh()) in every mode: hard interrupts stay on, so
the tick runs inside such a section and reads the preempt_count of the code it interrupted.
A run of ticks that see softirqs disabled (not serving a softirq: that is the softirqs
tool's matter) is a section: its length is from the last tick that saw them enabled to the
first that sees them enabled again (within a period of each end), or, when that one came
late (the CPU stalled after the section), to a period after the last tick inside; its task
and stack are those of the first tick inside it, so the culprit's. What
it cannot see: sections shorter than the threshold between two ticks (never reported: that
is the point), softirq-off time spent with hard interrupts also off (no tick runs), and, in
software mode, anything delaying the tick that is not interrupts off (a hypervisor not
running the vCPU shows as a hard section).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

from ...errors import ConfigError
from ...sysinfo.events import EVENT_SOURCES, hardware_pmu, tracepoint_exists
from ..config import ToolConfig, check_positive
from ..session import EventSession, per_cpu_preempt_count

PROGRAM = os.path.join(os.path.dirname(__file__), "irqoff.bpf.c")
MODES = ("software", "nmi", "exact")  # the kernel side's IRQOFF_MODE_* values, in order
HOOKS = {
    "exact": "preemptirq tracepoints irq_disable/irq_enable (exact)",
    "nmi": "NMI sampling: cycles (hardware PMU) + cpu-clock ticks (culprit stacks)",
    "software": "hrtimer sampling: cpu-clock ticks (stack when the tick ran)",
}
KINDS = ("hardirq", "softirq")  # IRQOFF_HARD, IRQOFF_SOFT
STACK_NOTES = ("", "(stack when the tick ran, not the culprit's)")  # IRQOFF_STACK_*
MIN_PERIOD_NS, MAX_PERIOD_NS = 100_000, 10_000_000


@dataclass(frozen=True)
class Config(ToolConfig):
    threshold_ms: float = 10.0  # report sections longer than this
    mode: str = "auto"          # auto (the best this kernel has), or one of MODES

    def validate(self) -> None:
        check_positive("threshold_ms", self.threshold_ms)
        if self.mode != "auto" and self.mode not in MODES:
            raise ConfigError("mode", f"unknown mode {self.mode!r}: use auto, {', '.join(MODES)}")

    @property
    def period_ns(self) -> int:
        """The tick: a tenth of the threshold, so a late tick stands out and the length
        reported is within 10% (at most one tick) of the section's."""
        return min(MAX_PERIOD_NS, max(MIN_PERIOD_NS, int(self.threshold_ms * 1e6 / 10)))


def choose_mode(devices_root: str = EVENT_SOURCES, tracing_root: str | None = None) -> str:
    """The best mode this kernel allows: exact where the preemptirq tracepoints exist (under
    ``tracing_root``, tracefs; None: not mounted, so not known to exist), NMI sampling where
    a hardware PMU is an event source (under ``devices_root``), else software sampling."""
    if tracing_root and tracepoint_exists("preemptirq", "irq_disable", tracing_root) \
            and tracepoint_exists("preemptirq", "irq_enable", tracing_root):
        return "exact"
    if hardware_pmu(devices_root):
        return "nmi"
    return "software"


@dataclass(frozen=True)
class Section:
    """One section with hard interrupts (``hardirq``) or softirqs (``softirq``) off."""

    time: float       # when it was seen to end (seconds since the epoch)
    kind: str         # "hardirq" or "softirq"
    cpu: int
    comm: str
    pid: int
    tid: int
    lat_us: int       # its length (sampling modes: an upper bound, see the module's doc)
    stack: list[str] = field(default_factory=list)  # kernel frames, innermost first
    stack_note: str = ""  # "(stack when the tick ran, not the culprit's)" when it is so

    def to_dict(self) -> dict:
        return asdict(self)


class Session(EventSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf, mounts
        from ...engine.symbols import StackTraces

        self.config = config
        self.mode = config.mode if config.mode != "auto" else choose_mode(tracing_root=_tracing())
        self.hook = HOOKS[self.mode]
        spec = compile_bpf(PROGRAM)
        spec.rodata.update({"targ_threshold_ns": int(config.threshold_ms * 1e6),
                            "targ_period_ns": config.period_ns, "targ_mode": MODES.index(self.mode)})
        self._tick, self.softirqs_unwatched = select_programs(spec, self.mode)
        if self.mode == "exact":
            mounts.ensure_tracefs()
        self._obj = spec.load()
        try:
            self._attach()
            self._reader = self._obj.ring_buffer("events", event_type="irqoff_event")
        except BaseException:
            self._obj.close()
            raise
        self._stacks = StackTraces(self._obj.maps["stacks"])
        # the kernel stamps events with CLOCK_MONOTONIC; this turns them into wall-clock time
        self._epoch_offset = time.time() - time.monotonic()

    def _attach(self) -> None:
        from ...engine.constants import PERF_COUNT_HW_CPU_CYCLES, PERF_TYPE_HARDWARE

        progs = self._obj.programs
        progs[self._tick].attach_perf_event(period=self.config.period_ns)
        if self.mode == "nmi":  # about four NMIs per tick period, whatever the clock rate
            progs["irqoff_nmi"].attach_perf_event(frequency=4 * 10**9 // self.config.period_ns,
                                                  event_type=PERF_TYPE_HARDWARE,
                                                  config=PERF_COUNT_HW_CPU_CYCLES)
        if self.mode == "exact":
            progs["irqoff_disable"].attach()
            progs["irqoff_enable"].attach()

    def _event(self, ev) -> Section:
        return Section(time=ev.ts / 1e9 + self._epoch_offset, kind=KINDS[ev.kind], cpu=ev.cpu,
                       comm=ev.comm, pid=ev.pid, tid=ev.tid, lat_us=ev.lat_ns // 1000,
                       stack=self._stacks.symbolize(ev.stack_id), stack_note=STACK_NOTES[ev.stack_from])


def select_programs(spec, mode: str) -> tuple[str, str | None]:
    """Load only the programs ``mode`` runs, and the tick that can read preempt_count here;
    (that tick's name, why softirq-off sections cannot be watched or None)."""
    tick, unwatched = _tick_program()
    for name in ("irqoff_tick", "irqoff_tick_task"):
        spec.programs[name].autoload = name == tick
    spec.programs["irqoff_nmi"].autoload = mode == "nmi"
    for name in ("irqoff_disable", "irqoff_enable"):
        spec.programs[name].autoload = mode == "exact"
    return tick, unwatched


def _tick_program() -> tuple[str, str | None]:
    """The tick program that can read preempt_count here, and why softirq-off sections
    cannot be watched (None when they can). x86 keeps preempt_count in a per-CPU variable,
    which a program names through the kernel's BTF and kallsyms; elsewhere it is in the task's
    thread_info."""
    per_cpu, why_not = per_cpu_preempt_count()
    if per_cpu is None:
        return "irqoff_tick_task", None
    if per_cpu:
        return "irqoff_tick", None
    return "irqoff_tick_task", f"softirq-off sections are not watched: {why_not}"


def _tracing() -> str | None:
    from ...engine.features import mounted_tracefs

    return mounted_tracefs()


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
