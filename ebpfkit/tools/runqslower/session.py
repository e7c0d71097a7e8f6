"""runqslower's session: load runqslower.bpf.c, attach it, and hand out one ``Wakeup`` for
each time a task waited in a run queue longer than ``min_us`` before it ran (woken, or
preempted while still runnable). No click, no printing, no formats::

    from ebpfkit.tools import runqslower
    with runqslower.open(min_us=5000, pid=1234) as session:
        for wakeup in session.events(timeout=10):   # Wakeup dataclasses, as they come
            print(wakeup.comm, wakeup.tid, wakeup.delay_us, wakeup.waker_comm)
        wakeups = session.poll(100)                  # or: those that came within 100 ms
        wakeups = session.drain()                    # or: all those buffered, without waiting
        session.lost                                 # events dropped (ring buffer full)

``waker_pid``/``waker_comm`` name the task that woke it (recorded at sched_waking, in the
waker's own context); both are empty (0, "") when the task was preempted, not woken. A
wakeup from an interrupt (a timer, a disk, a packet) names no task: ``waker_comm`` is
"[hardirq]" or "[softirq]" and ``waker_pid`` 0, where the kernel lets the program read
preempt_count (``session.interrupts_named``; x86 needs CONFIG_KALLSYMS_ALL and per-CPU variables
in the kernel's BTF, which Debian 11's 5.10 lacks).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from ...errors import ConfigError
from ..config import ToolConfig, check_pid, check_tid
from ..session import EventSession, choose_typed_or_raw, per_cpu_preempt_count

PROGRAM = os.path.join(os.path.dirname(__file__), "runqslower.bpf.c")
TYPED_HOOK = "tp_btf sched_waking/sched_switch, task storage, the kernel's sched_info"
RAW_HOOK = "raw tracepoints sched_waking/sched_switch, the kernel's sched_info"


@dataclass(frozen=True)
class Config(ToolConfig):
    min_us: int = 10000      # report waits of at least this many µs
    pid: int | None = None   # only this process (thread group)
    tid: int | None = None   # only this thread

    def validate(self) -> None:
        if self.min_us < 0:
            raise ConfigError("min_us", f"must be 0 or more, got {self.min_us}")
        check_pid("pid", self.pid)
        check_tid("tid", self.tid)


@dataclass(frozen=True)
class Wakeup:
    """One run-queue wait longer than the threshold, seen when the task got the CPU."""

    time: float       # when it got the CPU (seconds since the epoch)
    comm: str
    pid: int          # its process (thread group)
    tid: int
    delay_us: int     # how long it waited runnable
    cpu: int
    prev_comm: str    # the task it replaced on that CPU
    prev_tid: int
    waker_comm: str   # the task that woke it ("" when it was preempted, not woken; "[hardirq]"
                      # or "[softirq]" when an interrupt woke it)
    waker_pid: int

    def to_dict(self) -> dict:
        return asdict(self)


class Session(EventSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf
        from ...engine import features

        self.config = config
        features.require("sched_info")  # the waits are the kernel's own account
        spec = compile_bpf(PROGRAM)
        self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK, typed_maps=("waits",),
                                        raw_maps=("waits_by_tid",))
        self.interrupts_named = choose_waking_program(spec)
        spec.rodata.update({"targ_min_us": config.min_us, "targ_tgid": config.pid or 0,
                            "targ_tid": config.tid or 0})
        self._obj = spec.load()
        try:
            self._obj.attach()
            self._reader = self._obj.ring_buffer("events", event_type="runqslower_event")
        except BaseException:
            self._obj.close()
            raise
        # the kernel stamps events with CLOCK_MONOTONIC; this turns them into wall-clock time
        self._epoch_offset = time.time() - time.monotonic()

    def _event(self, ev) -> Wakeup:
        return Wakeup(time=ev.ts / 1e9 + self._epoch_offset, comm=ev.comm, pid=ev.pid, tid=ev.tid,
                      delay_us=ev.delay_us, cpu=ev.cpu, prev_comm=ev.prev_comm, prev_tid=ev.prev_tid,
                      waker_comm=ev.waker_comm, waker_pid=ev.waker_pid)


def choose_waking_program(spec) -> bool:
    """Of the two sched_waking programs of the set chosen, load the one that can read
    preempt_count here; whether it can (else a wakeup from an interrupt names the task the
    interrupt came in, as BCC's tools and perf do)."""
    per_cpu, _ = per_cpu_preempt_count()
    for name, prog in spec.programs.items():
        if prog.autoload and name.startswith("runqslower_waking"):
            prog.autoload = name.startswith("runqslower_waking_percpu") == bool(per_cpu)
    return per_cpu is not False


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
