"""What every tool's Session shares: it is a context manager that ``close()``s (detaches and
unloads) at the end of a ``with``; an event tool's (EventSession) also hands out the events
of its ring buffer. Each tool's ``open(config)`` returns one. And the choice
tracepoint tools make between their typed (tp_btf) and raw (raw_tp) programs."""

from __future__ import annotations


class ToolSession:
    """Base of a tool's ``Session``; the tool defines ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EventSession(ToolSession):
    """Base of a tool whose results are events from a ring buffer (runqslower, irqoff): it
    sets ``self._obj`` (the loaded object) and ``self._reader`` (its ring buffer reader), and
    defines ``_event(record)``, the record as the tool's dataclass."""

    _obj = None
    _reader = None

    def _event(self, record):
        raise NotImplementedError

    def events(self, timeout: float | None = None):
        """Yield events as they come, for ``timeout`` seconds (None: until Ctrl-C)."""
        for record in self._reader.events(timeout=timeout):
            yield self._event(record)

    def poll(self, timeout_ms: int = 100) -> list:
        """The events available now, waiting up to ``timeout_ms`` for the first."""
        return [self._event(r) for r in self._reader.read_batch(timeout_ms)]

    def drain(self) -> list:
        """Every event buffered, without waiting; tracing goes on (a flood of events can keep
        this going: to end a run, ``finish``)."""
        result: list = []
        while batch := self.poll(0):
            result.extend(batch)
        return result

    def finish(self) -> list:
        """Stop tracing and return every event still buffered (what to print before exiting):
        the programs are detached first, so a flood of events cannot keep this from ending."""
        self._obj.detach()
        return self.drain()

    @property
    def lost(self) -> int:
        """Events the kernel dropped because the ring buffer was full."""
        return self._reader.lost or 0

    def close(self) -> None:
        self._obj.close()


def choose_typed_tracepoints(spec, typed_maps=(), raw_maps=()) -> bool:
    """Of a program with each hook twice, as ``tp_btf/X`` and ``raw_tp/X``, load one set:
    tp_btf where the kernel has BTF of its own (its arguments typed, no copies), else raw
    tracepoints, which need only CO-RE (a --btf file serves them). True if tp_btf. Programs
    on other hooks are left as they are.

    ``typed_maps``/``raw_maps`` name maps only one set uses: a task storage, which needs typed
    task pointers, where the raw set keeps a hash by tid. The other set's maps are not created;
    and a kernel with BTF but without task storage (before 5.11) gets the raw set."""
    from ..engine import features

    typed = features.probe("kernel_btf").supported
    if typed and typed_maps:
        typed = features.probe("task_storage").supported
    for prog in spec.programs.values():
        if prog.section.startswith(("tp_btf/", "raw_tp/")):  # other programs are the tool's to choose
            prog.autoload = prog.section.startswith("tp_btf/") == typed
    for name in raw_maps if typed else typed_maps:
        spec.maps[name].autocreate = False
    return typed


def per_cpu_preempt_count() -> tuple[bool | None, str | None]:
    """Whether a program can read preempt_count (in an interrupt or not, bottom halves off)
    from the per-CPU variable x86 keeps it in: (True, None); (False, why not); or (None, None)
    on other architectures, which keep it in the task. The program names the variable as a
    typed ksym: the kernel's BTF must list it, and kallsyms give its address."""
    from ..engine import features
    from ..sysinfo.events import preempt_count_per_cpu

    listed = preempt_count_per_cpu()
    if listed is None:
        return None, None
    if not listed:
        return False, ("/proc/kallsyms does not list the per-CPU __preempt_count (a kernel without "
                       "CONFIG_KALLSYMS_ALL)")
    if not features.kernel_btf_names({"__preempt_count", "pcpu_hot"}, kind=features.BTF_KIND_VAR):
        return False, ("the kernel's BTF lists no per-CPU variables (none without kernel BTF, and "
                       "some kernels' BTF has none: Debian 11's 5.10)")
    return True, None


def load_attached(spec):
    """``spec`` loaded and every program attached by its section (bpf_links, gone with the
    process however it ends); the object is closed again if attaching fails."""
    obj = spec.load()
    try:
        obj.attach()
    except BaseException:
        obj.close()
        raise
    return obj


def choose_typed_or_raw(spec, typed: str, raw: str, typed_maps=(), raw_maps=()) -> str:
    """``choose_typed_tracepoints``, returning the label of the chosen set: ``typed`` or ``raw``."""
    return typed if choose_typed_tracepoints(spec, typed_maps, raw_maps) else raw
