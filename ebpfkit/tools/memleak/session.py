"""memleak's session: uprobes on a process's allocator (memleak.bpf.c), or in kernel mode
(neither ``pid`` nor ``command``) the kmem and percpu tracepoints (memleak_kernel.bpf.c,
see kernel.py), and, at each ``sample()``, what was allocated and not freed, by stack. No
click, no printing::

    from ebpfkit.tools import memleak
    with memleak.open(pid=1234) as session:           # or command="./app --flag"
        time.sleep(5)
        sample = session.sample()
        for stack in sample.stacks:                   # StackAllocs, most bytes first
            print(stack.bytes, stack.count, stack.oldest_ms, stack.growing)
            print("\\n".join(map(str, stack.frames)))  # frames: objects with a str()
        print(sample.counters)                        # what could not be recorded, and why

Kernel mode is system-wide, with kernel stacks; ``kinds`` picks slab (kmalloc and
kmem_cache), page and percpu allocations, and ``hooks`` says which tracepoints are used.
Otherwise only the process is traced (the uprobes are attached for its PID). ``command``
starts a program held before its exec until every probe is attached, so it allocates nothing unseen;
the session kills it at close if it still runs. ``combined_only`` keeps per-stack totals in
the kernel (atomic adds) instead of reading every allocation: no ages, no ``min_age_ms``.
A stack is ``growing`` when its outstanding bytes grew at each of the last
``growth_intervals`` samples.
"""

from __future__ import annotations

import os
import shlex
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from ...errors import ConfigError
from ..config import ToolConfig, check_choice, check_exclusive, check_pid, check_positive
from ..session import ToolSession
from . import kernel, libraries

PROGRAM = os.path.join(os.path.dirname(__file__), "memleak.bpf.c")
ALLOCATORS = tuple(libraries.PRESETS)
COUNTERS = ("allocs", "frees", "stack_missed", "allocs_full", "unknown_frees", "threads_full")
MISSED_STACK = "[stack not recorded: stack map full]"
SPILL_BASE = 1 << 30  # memleak.h's MEMLEAK_SPILL_BASE: ids at and above it are spilled_stacks'
SPILL_SHARE = 4       # spilled_stacks holds a quarter of what stacks does
KINDS = kernel.KINDS


@dataclass(frozen=True)
class Config(ToolConfig):
    pid: int | None = None               # trace this process
    command: str | None = None           # or start this command line ("CMD ARGS")
    min_age_ms: int = 0                  # only allocations at least this old (-o)
    show_allocs: bool = False            # each outstanding allocation too (-a)
    combined_only: bool = False          # per-stack totals kept in the kernel
    min_size: int | None = None          # bytes (-z)
    max_size: int | None = None          # bytes (-Z)
    sample_every: int = 1                # record one allocation in N (-s)
    allocator: str | None = None         # glibc, jemalloc, tcmalloc (None: detect from the maps)
    library: str | None = None           # probe the allocator functions of this file (-O)
    growth_intervals: int = 3            # K: growing when the bytes grew at each of the last K samples
    stack_storage_size: int = 16384      # distinct stacks the kernel can keep
    max_allocations: int = 262144        # outstanding allocations the kernel can keep
    kinds: tuple = KINDS                 # kernel mode: the allocators followed (slab, page, percpu)

    def validate(self) -> None:
        self._validate_mode()
        check_exclusive("pid", self.pid, command=self.command is not None)
        check_pid("pid", self.pid)
        if self.command is not None and not self.argv:
            raise ConfigError("command", "is empty")
        check_exclusive("combined_only", self.combined_only, min_age_ms=self.min_age_ms,
                        show_allocs=self.show_allocs)
        check_exclusive("library", self.library, allocator=self.allocator)
        if self.allocator is not None:
            check_choice("allocator", self.allocator, ALLOCATORS)
        if self.min_age_ms < 0:
            raise ConfigError("min_age_ms", f"must be 0 or more, got {self.min_age_ms}")
        if self.min_size is not None and self.min_size < 0:
            raise ConfigError("min_size", f"must be 0 or more, got {self.min_size}")
        if self.max_size is not None and self.max_size < (self.min_size or 0):
            raise ConfigError("max_size", f"must be at least min_size ({self.min_size or 0}), "
                                          f"got {self.max_size}")
        for name in ("sample_every", "growth_intervals", "stack_storage_size", "max_allocations"):
            check_positive(name, getattr(self, name))
        if self.stack_storage_size > SPILL_BASE:
            raise ConfigError("stack_storage_size", f"must be at most {SPILL_BASE}, got {self.stack_storage_size}")

    def _validate_mode(self) -> None:
        """Kernel mode (no pid, no command) follows ``kinds``; the allocator settings are a process's."""
        if not isinstance(self.kinds, (tuple, list)) or not self.kinds:
            raise ConfigError("kinds", f"expected one or more of {', '.join(KINDS)}, got {self.kinds!r}")
        for kind in self.kinds:
            check_choice("kinds", kind, KINDS)
        if self.kernel:
            for name in ("allocator", "library"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "applies to a process (-p PID or -c CMD), not to kernel mode")
        elif tuple(self.kinds) != KINDS:
            raise ConfigError("kinds", "applies to kernel mode (no -p/-c), not to a process")

    @property
    def kernel(self) -> bool:
        """Kernel mode: outstanding kernel allocations, system-wide."""
        return self.pid is None and self.command is None

    @property
    def argv(self) -> list[str]:
        try:
            return shlex.split(self.command or "")
        except ValueError as exc:
            raise ConfigError("command", f"cannot be split into arguments: {exc}") from None


@dataclass(frozen=True)
class Allocation:
    address: int
    size: int
    age_ms: int


@dataclass(frozen=True)
class StackAllocs:
    """What is outstanding from one user stack."""

    stack_id: int
    bytes: int
    count: int
    oldest_ms: int | None            # age of its oldest allocation (None with combined_only)
    growing: bool                    # its bytes grew at each of the last K samples
    frames: tuple = ()               # innermost first: objects with a str()
    allocations: tuple[Allocation, ...] = ()  # with show_allocs

    def to_dict(self) -> dict:
        data = asdict(self)
        data["frames"] = [str(f) for f in self.frames]
        return data


@dataclass(frozen=True)
class Sample:
    stacks: list[StackAllocs]           # most bytes first
    counters: dict[str, int] = field(default_factory=dict)  # since the start, by COUNTERS name


class Session(ToolSession):
    """Loaded and attached until ``close()`` (or the end of a ``with``)."""

    def __init__(self, config: Config):
        from ...engine.symbols import StackTraces, Symbolizer

        self.config = config
        self.process = None  # the started command's Popen (-c)
        self._obj = None
        self._history: dict[int, deque] = {}
        self._hold = None  # the pipe a started command waits on until the probes are attached
        self.pid = self.plan = None
        self.multi = False  # attached through uprobe_multi links
        self.hooks: list[str] = []  # kernel mode: the tracepoints used
        try:
            spec = self._kernel_spec() if config.kernel else self._user_spec()
            spec.rodata.update({
                "min_size": config.min_size or 0,
                "max_size": (1 << 64) - 1 if config.max_size is None else config.max_size,
                "sample_every": config.sample_every, "combined_only": config.combined_only})
            spec.maps["stacks"].max_entries = config.stack_storage_size
            spec.maps["spilled_stacks"].max_entries = max(config.stack_storage_size // SPILL_SHARE, 1)
            spec.maps["allocs"].max_entries = config.max_allocations
            if not config.combined_only:  # never written: not worth preallocating at each start
                spec.maps["combined"].max_entries = 1
            if not config.kernel:
                self.multi = _use_uprobe_multi(spec, self.plan)
            self._obj = spec.load()
            if config.kernel:
                self._obj.attach()
            else:
                self._attach_uprobes()
            self._symbolizer = Symbolizer()
            self._stacks = StackTraces(self._obj.maps["stacks"], self._symbolizer)
            self._spilled = StackTraces(self._obj.maps["spilled_stacks"], self._symbolizer)
            self._release()
        except BaseException:
            self.close()
            raise

    # --- results ---

    def sample(self) -> Sample:
        """What is outstanding now, by stack (most bytes first), and the counters."""
        if self.config.combined_only:
            totals = {_signed(k): (v.bytes, v.count, None, ()) for k, v in self._obj.maps["combined"].items()}
        else:
            totals = self._outstanding_by_stack()
        stacks = []
        for stack_id, (nbytes, count, oldest, allocs) in totals.items():
            growing = self._grew(stack_id, nbytes)
            if count <= 0:
                continue
            stacks.append(StackAllocs(stack_id, nbytes, count, oldest, growing, self._frames(stack_id),
                                      allocs))
        stacks.sort(key=lambda s: (-s.bytes, -s.count, s.stack_id))
        return Sample(stacks, self.counters())

    def counters(self) -> dict[str, int]:
        values = dict(self._obj.maps["counters"].items())
        return {name: int(values.get(i, 0)) for i, name in enumerate(COUNTERS)}

    @property
    def exited(self) -> bool:
        """The command (or the process) has ended."""
        if self.process is not None:
            return self.process.poll() is not None
        if self.pid is None:  # kernel mode
            return False
        return not os.path.exists(f"/proc/{self.pid}")

    def close(self) -> None:
        if self._hold is not None:
            os.close(self._hold)
            self._hold = None
        if self._obj is not None:
            self._obj.close()
            self._obj = None
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    # --- inside ---

    def _user_spec(self):
        """The process to trace (started held, with -c), its allocator's plan, the program."""
        from ...engine import compile as compile_bpf

        if self.config.command is not None:
            self.process, self._hold, libs = _start_held(self.config.argv)
            self.pid = self.process.pid
        else:
            self.pid = self.config.pid
            libs = libraries.mapped_libraries(self.pid)
        self.plan = libraries.plan(libs, self.config.allocator, self.config.library)
        spec = compile_bpf(PROGRAM)
        spec.rodata["targ_tgid"] = self.pid
        return spec

    def _kernel_spec(self):
        """The kernel-mode program, with only the tracepoints this kernel has."""
        from ...engine import compile as compile_bpf

        spec = compile_bpf(kernel.PROGRAM)
        self.hooks = kernel.select_programs(spec, self.config.kinds)
        spec.rodata["page_size"] = os.sysconf("SC_PAGE_SIZE")
        return spec

    def _attach_uprobes(self) -> None:
        """One uprobe_multi link per program and file where the kernel has them (leaving then
        waits for one grace period, not one per uprobe: ~2 s less here), else a link each."""
        if not self.multi:
            for probe in self.plan.probes:
                self._obj.programs[probe.program].attach_uprobe(
                    probe.path, offset=probe.offset, pid=self.pid, retprobe=probe.retprobe)
            return
        groups: dict[tuple, list[int]] = {}
        for probe in self.plan.probes:
            groups.setdefault((probe.program, probe.path, probe.retprobe), []).append(probe.offset)
        for (program, path, retprobe), offsets in groups.items():
            self._obj.programs[program].attach_uprobe_multi(path, offsets, pid=self.pid, retprobe=retprobe)

    def _release(self) -> None:
        """Let the started command exec (it waits for a line on its pipe)."""
        if self._hold is not None:
            os.write(self._hold, b"\n")
            os.close(self._hold)
            self._hold = None

    def _outstanding_by_stack(self) -> dict[int, tuple]:
        now = time.monotonic_ns()
        min_age_ns = self.config.min_age_ms * 1_000_000
        by_stack: dict[int, list] = {}
        for address, info in self._obj.maps["allocs"].items():
            age_ns = now - info.timestamp_ns
            if age_ns < min_age_ns:
                continue
            entry = by_stack.setdefault(info.stack_id, [0, 0, 0, []])
            entry[0] += info.size
            entry[1] += 1
            entry[2] = max(entry[2], age_ns)
            if self.config.show_allocs:
                entry[3].append(Allocation(address, info.size, max(age_ns, 0) // 1_000_000))
        return {sid: (b, n, max(age, 0) // 1_000_000, tuple(sorted(a, key=lambda x: -x.age_ms)))
                for sid, (b, n, age, a) in by_stack.items()}

    def _grew(self, stack_id: int, nbytes: int) -> bool:
        k = self.config.growth_intervals
        seen = self._history.setdefault(stack_id, deque(maxlen=k + 1))
        seen.append(nbytes)
        return len(seen) == k + 1 and all(a < b for a, b in zip(seen, list(seen)[1:]))

    def _frames(self, stack_id: int) -> tuple:
        from .stacks import user_frames

        if stack_id < 0:
            return (MISSED_STACK,)
        addresses = self._spilled.get(stack_id - SPILL_BASE) if stack_id >= SPILL_BASE else self._stacks.get(stack_id)
        if self.config.kernel:
            return tuple(kernel.kernel_frames(self._symbolizer, addresses))
        return tuple(user_frames(self._symbolizer, self.pid, addresses))


def _use_uprobe_multi(spec, plan) -> bool:
    """Load only the plan's programs, as uprobe_multi programs where the kernel has those."""
    from ...engine import features

    used = {probe.program for probe in plan.probes}
    multi = features.probe("uprobe_multi").supported
    for name, program in spec.programs.items():
        program.autoload = name in used
        if multi and name in used:
            program.use_uprobe_multi()
    return multi


def _signed(stack_id) -> int:
    stack_id = int(stack_id)
    return stack_id - (1 << 32) if stack_id >= 1 << 31 else stack_id


def _start_held(argv: list[str]):
    """``argv`` started but held before its exec (a shell waiting on a pipe, then exec'ing it:
    the same PID), the pipe's end to release it by, and the libraries it will load. NAME=VALUE
    words before the program are its environment (LD_PRELOAD among them), exported by the shell
    just before the exec: the shell itself runs without them (no preloaded allocator)."""
    settings, argv = libraries.split_settings(argv)
    executable = libraries.find_executable(argv)
    libs = libraries.linked_libraries(executable, {**os.environ, **settings})
    hold, go = os.pipe()
    exports = [f"{name}={value}" for name, value in settings.items()]
    script = 'read _ <&3; exec 3<&-; while [ "$1" != -- ]; do export "$1"; shift; done; shift; exec "$@"'
    try:
        import subprocess  # only -c starts one

        process = subprocess.Popen(["/bin/sh", "-c", script, "memleak", *exports, "--", *argv],
                                   pass_fds=(hold,))
    finally:
        os.close(hold)
    return process, go, libs


def open(config: Config | None = None, **settings) -> Session:  # noqa: A001 - the session verb
    """Start tracing with ``config``, or with a Config built from keyword arguments."""
    return Session(Config.given(config, **settings))
