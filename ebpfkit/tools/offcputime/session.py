"""offcputime's session: load offcputime.bpf.c, attach it to sched_switch, and hand out, per
thread and pair of stacks it blocked with, how long it was off the CPU. No click, no
printing, no formats::

    from ebpfkit.tools import offcputime
    with offcputime.open(pid=1234, min_block_time=1000) as session:
        time.sleep(5)
        for entry in session.sample():        # OffCpu, most time first
            print(entry.comm, entry.tid, entry.total_us, entry.user_stack, entry.kernel_stack)

``sample()`` drains what was counted since the last one. Stacks are tuples of function
names, innermost first: "[unknown]" for an address no symbol covers, "[missed user stack]"
(or kernel) where the kernel could not record it (the stack map is full: raise
``stack_storage_size``), empty where there is none (a kernel thread's user stack, or a kind
of stack not asked for). User addresses resolve through the process's maps, read when the
session opens (``pid``) and at each ``remember_processes()``: an address of a process that
exited before either is "[unknown]".
"""

from __future__ import annotations

import errno
import os
from dataclasses import asdict, dataclass

from ...errors import ConfigError
from ..config import ToolConfig, check_exclusive, check_pid, check_positive, check_tid
from ..session import ToolSession, choose_typed_or_raw, load_attached

PROGRAM = os.path.join(os.path.dirname(__file__), "offcputime.bpf.c")
TYPED_HOOK = "tp_btf sched_switch"
RAW_HOOK = "raw tracepoint sched_switch"
STATE_BITS = 0x7F  # the task states ps shows (TASK_REPORT), as offcputime.bpf.c matches them
TRACING_FRAMES = ("bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_")
MISSED_USER, MISSED_KERNEL = "[missed user stack]", "[missed kernel stack]"


@dataclass(frozen=True)
class Config(ToolConfig):
    pid: int | None = None            # only this process (thread group)
    tid: int | None = None            # only this thread
    user_stacks_only: bool = False    # no kernel stacks
    kernel_stacks_only: bool = False  # no user stacks
    state: int | None = None          # only tasks leaving the CPU in this state (its ps bits; None: any)
    min_block_time: int = 1           # µs: shorter times off the CPU are not counted
    max_block_time: int | None = None  # µs: nor longer ones (None: no limit)
    stack_storage_size: int = 1024    # distinct stacks the kernel can keep

    def validate(self) -> None:
        check_pid("pid", self.pid)
        check_tid("tid", self.tid)
        check_exclusive("user_stacks_only", self.user_stacks_only, kernel_stacks_only=self.kernel_stacks_only)
        if self.state is not None and not 0 <= self.state <= STATE_BITS:
            raise ConfigError("state", f"must be a task state from 0 to {STATE_BITS} (0 preempted, 1 S, "
                                       f"2 D, 4 T, ...), got {self.state}")
        if self.min_block_time < 0:
            raise ConfigError("min_block_time", f"must be 0 or more, got {self.min_block_time}")
        if self.max_block_time is not None and self.max_block_time < max(self.min_block_time, 1):
            raise ConfigError("max_block_time", f"must be at least 1 and min_block_time "
                                                f"({self.min_block_time}), got {self.max_block_time}")
        check_positive("stack_storage_size", self.stack_storage_size)

    @property
    def user_stacks(self) -> bool:
        return not self.kernel_stacks_only

    @property
    def kernel_stacks(self) -> bool:
        return not self.user_stacks_only


@dataclass(frozen=True)
class OffCpu:
    """Time one thread spent off the CPU, having left it with these stacks."""

    pid: int                        # its process (thread group)
    tid: int
    comm: str
    count: int                      # times it left the CPU so
    total_us: int                   # time off the CPU, summed
    user_stack: tuple[str, ...]     # function names, innermost first
    kernel_stack: tuple[str, ...]

    def to_dict(self) -> dict:
        return asdict(self)


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine import compile as compile_bpf
        from ...engine.symbols import StackTraces, Symbolizer

        self.config = config
        spec = compile_bpf(PROGRAM)
        self.hook = choose_typed_or_raw(spec, TYPED_HOOK, RAW_HOOK, typed_maps=("departures",),
                                        raw_maps=("departures_by_tid",))
        spec.rodata.update({
            "targ_tgid": config.pid or 0, "targ_tid": config.tid or 0,
            "targ_state": -1 if config.state is None else config.state,
            "targ_user": config.user_stacks, "targ_kernel": config.kernel_stacks,
            "targ_min_ns": config.min_block_time * 1000,
            "targ_max_ns": (1 << 64) - 1 if config.max_block_time is None else config.max_block_time * 1000})
        spec.maps["stacks"].max_entries = config.stack_storage_size
        self._symbolizer = Symbolizer()
        if config.pid:  # alive now: its maps are read before it can exit
            self._symbolizer.remember(config.pid)
        self._obj = load_attached(spec)
        self._counts = self._obj.maps["offcpu"]
        self._stacks = StackTraces(self._obj.maps["stacks"], self._symbolizer)

    def remember_processes(self) -> None:
        """Read the maps of each process counted so far and not known yet, so its user
        stacks still resolve once it has exited (a CLI calls this every second)."""
        for pid in {key.pid for key in self._counts}:
            self._symbolizer.remember(pid)

    def sample(self) -> list[OffCpu]:
        """The time off the CPU since the last sample (the counts are drained), most first."""
        entries = [self._entry(key, value) for key, value in self._counts.pop_all()]
        return sorted(entries, key=lambda e: (-e.total_us, e.pid, e.tid))

    def close(self) -> None:
        self._obj.close()

    def _entry(self, key, value) -> OffCpu:
        return OffCpu(pid=key.pid, tid=key.tid, comm=value.comm, count=value.count,
                      total_us=value.total_ns // 1000,
                      user_stack=self._frames(key.user_stack_id, key.pid, self.config.user_stacks),
                      kernel_stack=self._frames(key.kernel_stack_id, None, self.config.kernel_stacks))

    def _frames(self, stack_id: int, pid: int | None, wanted: bool) -> tuple[str, ...]:
        """Function names of a stack (a user stack when ``pid`` is given), innermost first."""
        if not wanted or stack_id == -errno.EFAULT:  # not asked for, or none (a kernel thread)
            return ()
        if stack_id < 0:
            return (MISSED_KERNEL if pid is None else MISSED_USER,)
        names = [s.name for s in self._stacks.resolve(stack_id, pid=pid, kernel=pid is None)]
        if pid is None:  # the innermost frames are the tracing's own: this program, its caller
            while names and names[0].startswith(TRACING_FRAMES):
                names.pop(0)
        return tuple(names)


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
