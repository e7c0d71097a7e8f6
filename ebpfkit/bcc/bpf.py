"""``BPF``: BCC's Python API on ebpfkit's engine.

The program is translated (translate.py), compiled once by the engine against the kernel's
BTF, and its maps are created at once; each function is loaded when it is attached (BCC's
``load_func``), in an object of its own that reuses those maps, so the type a function
gets can come from the attach call, as in BCC. Functions named for their hook
(``kprobe__``, ``tracepoint__``, ``TRACEPOINT_PROBE``, ...) attach in the constructor."""

from __future__ import annotations

import hashlib
import os

from ..errors import ConfigError, EbpfkitError, NotSupportedError
from . import facts
from . import table as tables
from .facts import _binary, _text
from .table import _say

class BPF:
    # BCC's program-type constants (load_func's second argument)
    SOCKET_FILTER, KPROBE, SCHED_CLS, SCHED_ACT, TRACEPOINT, XDP, PERF_EVENT = 1, 2, 3, 4, 5, 6, 7
    RAW_TRACEPOINT, TRACING, LSM = 17, 26, 29

    def __new__(cls, *args, engine: str = "ebpfkit", **kwargs):
        """``engine="bcc"``: the program is BCC's own (libbcc, against this kernel's headers),
        and so is what it returns; ``"ebpfkit"`` (the default): this engine, against BTF."""
        if engine == "bcc":
            from . import native

            return native.module().BPF(*args, **kwargs)
        if engine != "ebpfkit":
            raise ConfigError("engine", f"must be 'ebpfkit' or 'bcc', not {engine!r}")
        return super().__new__(cls)

    def __init__(self, src_file=b"", hdr_file=b"", text=None, debug=0, cflags=None, usdt_contexts=None,
                 allow_rlimit=True, device=None, attach_usdt_ignore_pid=False, engine="ebpfkit"):
        self._objects: dict = {}   # function (or (function, variant)) -> the object it was loaded in
        self._links: dict[tuple, object] = {}   # (kind, target, function) -> link
        self._readers: list = []
        self._maps = None
        self._tables: dict[str, tables.TableBase] = {}
        self._syscall_variant: str | None = None  # the object compiled for syscall tracepoints
        self._said_retargeted = False
        source, name = _source(src_file, text)
        self._name = name
        self._cflags = [c.decode() if isinstance(c, bytes) else c for c in (cflags or [])]
        if not source.strip():  # BPF(text=''): BCC's scripts make one to call its helpers
            from .translate import Translation

            self._translation, self._btf = Translation(""), None
            return
        self._usdt = list(usdt_contexts or [])
        self._translation = _translate(source, name, self._cflags,
                                       usdt=bool(self._usdt) or "bpf_usdt_readarg" in source)
        self._obj_path = self._compile()
        self._maps = self._open().load()
        self._btf = self._maps.btf
        try:
            self._attach_named()
            for context in self._usdt:
                context.attach_in(self)
        except BaseException:
            self.cleanup()
            raise

    # --- loading ---

    def _compile(self, variant: tuple = ()) -> str:
        from .. import engine
        from .translate import INCLUDE_DIR, kconfig_dir, stub_dir

        spec = engine.compile(text=self._translation.source, name=f"{self._name}.bcc.bpf.c",
                              cflags=[f"-I{INCLUDE_DIR}", f"-I{stub_dir(self._translation.stubs)}",
                                      f"-I{kconfig_dir()}", *self._cflags, *variant])
        path = spec.path
        spec.close()
        return path

    def _open(self, only: str | None = None, prog_type: int | None = None, path: str | None = None):
        """The object (or ``path``, a variant of it) opened again: no program (the maps), or just
        ``only``, reusing the maps."""
        from .. import engine

        spec = engine.open_object(path or self._obj_path, name=self._name[:15])
        for prog in spec.programs.values():
            prog.autoload = prog.name == only
        if only is not None:
            if prog_type is not None:
                spec.programs[only].set_type(int(prog_type))
            for map_name, m in spec.maps.items():
                if not map_name.startswith("__bpf_usdt"):  # libbpf numbers each object's USDT specs itself
                    m.reuse_fd(self._maps.maps[map_name].fd)
        return spec

    def load_func(self, func_name, prog_type, device=None, attach_type=-1):
        """Load function ``func_name`` as a program of ``prog_type`` (once); its Program."""
        name = _text(func_name)
        if name not in self._translation.probes:
            raise EbpfkitError(f"no function '{name}' in the BPF program; its functions: "
                               f"{', '.join(self._translation.probes) or 'none'}")
        obj = self._objects.get(name)
        if obj is None:
            obj = self._open(name, prog_type).load()
            self._objects[name] = obj
        return obj.programs[name]

    def _attach_named(self) -> None:
        for probe in self._translation.probes.values():
            if probe.kind == "tracepoint":
                self.attach_tracepoint(tp=probe.target.replace("/", ":"), fn_name=probe.name)
            elif probe.kind == "raw_tracepoint":
                self.attach_raw_tracepoint(tp=probe.target, fn_name=probe.name)
            elif probe.kind in ("kprobe", "kretprobe"):
                (self.attach_kretprobe if probe.kind == "kretprobe" else self.attach_kprobe)(
                    event=probe.target, fn_name=probe.name)
            elif probe.kind in ("fentry", "fexit", "lsm"):  # typed: the section decides
                _require_hook(probe.kind, probe.name)
                prog = self.load_func(probe.name, None)
                link = prog.attach_lsm() if probe.kind == "lsm" else prog.attach_trace()
                self._links[(probe.kind, probe.target, probe.name)] = link

    # --- attaching ---

    def attach_tracepoint(self, tp=b"", tp_re=b"", fn_name=b""):
        """Attach to ``tp`` ("category:event"), or to every tracepoint ``tp_re`` matches."""
        names = [_text(t) for t in facts.get_tracepoints(tp_re)] if tp_re else [_text(tp)]
        if not names:
            raise EbpfkitError(f"no tracepoint matches '{_text(tp_re)}'")
        prog = self.load_func(fn_name, self.TRACEPOINT)
        for name in names:
            category, _, event = name.partition(":")
            if not event:
                raise EbpfkitError(f"tracepoint '{name}': write it category:event (e.g. sched:sched_switch)")
            self._links[("tracepoint", name, _text(fn_name))] = prog.attach_tracepoint(category, event)

    def detach_tracepoint(self, tp=b"", fn_name=None):
        self._detach("tracepoint", _text(tp), fn_name)

    def attach_raw_tracepoint(self, tp=b"", fn_name=b""):
        prog = self.load_func(fn_name, self.RAW_TRACEPOINT)
        self._links[("raw_tracepoint", _text(tp), _text(fn_name))] = prog.attach_raw_tracepoint(_text(tp))

    def detach_raw_tracepoint(self, tp=b"", fn_name=None):
        self._detach("raw_tracepoint", _text(tp), fn_name)

    def attach_kprobe(self, event=b"", event_off=0, fn_name=b"", event_re=b""):
        self._attach_kprobes("kprobe", event, event_re, fn_name, event_off)

    def attach_kretprobe(self, event=b"", fn_name=b"", event_re=b"", maxactive=0):
        self._attach_kprobes("kretprobe", event, event_re, fn_name, 0)

    def _attach_kprobes(self, kind: str, event, event_re, fn_name, offset: int) -> None:
        """One function, or (``event_re``) every function the pattern matches."""
        if not event_re and not offset and not _have_kprobes():
            return self._attach_on_syscall_tracepoints(kind, _text(event), _text(fn_name))
        _require_kprobes(_text(fn_name))
        events = [_text(e) for e in self.get_kprobe_functions(event_re)] if event_re else [_text(event)]
        if not events:
            raise EbpfkitError(f"no kernel function matches '{_text(event_re)}'")
        prog = self.load_func(fn_name, self.KPROBE)
        for name in events:
            self._links[(kind, name, _text(fn_name))] = prog.attach_kprobe(name, retprobe=kind == "kretprobe",
                                                                            offset=offset)

    def _attach_on_syscall_tracepoints(self, kind: str, event: str, fn_name: str) -> None:
        """No kprobes here: a kprobe (kretprobe) on a syscall's function runs on the syscall's
        enter (exit) tracepoint instead, which fires in the same task with the same arguments
        (the return value at exit); the function is compiled again for a tracepoint's context."""
        event_name = facts.syscall_tracepoint(event, "enter" if kind == "kprobe" else "exit")
        if event_name is None and facts.unreachable_syscall(event):
            self._links[(kind, event, fn_name)] = _NothingAttached()  # as a kprobe there: it never fires
            return
        if event_name is None:
            _require_kprobes(fn_name, f"{event} is not a syscall's function, whose tracepoint could stand in")
        obj = self._objects.get((fn_name, "syscall tracepoint"))
        if obj is None:
            if self._syscall_variant is None:
                self._syscall_variant = self._compile(("-D__EK_SYSCALL_TRACEPOINT",))
            obj = self._objects[(fn_name, "syscall tracepoint")] = self._open(
                fn_name, self.TRACEPOINT, self._syscall_variant).load()
        try:
            link = obj.programs[fn_name].attach_tracepoint("syscalls", event_name)
        except EbpfkitError as e:
            if not any(word in str(e) for word in ("EACCES", "EPERM", "Permission denied")):
                raise
            # the kernel checks a tracepoint program's context reads against the record's size
            # (perf_event_set_bpf_prog: EACCES, EPERM through a link), root or not
            _require_kprobes(fn_name, f"it reads registers a kprobe gives (PT_REGS_PARMn, PT_REGS_IP), past the "
                                      f"end of what syscalls:{event_name} records")
        if not self._said_retargeted:
            self._said_retargeted = True
            from ..output.logs import get_logger

            get_logger("ebpfkit.bcc").warning(f"no kprobes on this kernel: kprobes on syscalls run on the syscall's "
                                              f"tracepoints ({fn_name} on syscalls:{event_name}, ...)")
        self._links[(kind, event, fn_name)] = link

    def detach_kprobe(self, event=b"", fn_name=None):
        self._detach("kprobe", _text(event), fn_name)

    def detach_kretprobe(self, event=b"", fn_name=None):
        self._detach("kretprobe", _text(event), fn_name)

    def attach_uprobe(self, name=b"", sym=b"", fn_name=b"", addr=None, sym_off=0, pid=-1, sym_re=b""):
        self._attach_uprobes("uprobe", name, sym, sym_re, fn_name, addr, sym_off, pid)

    def attach_uretprobe(self, name=b"", sym=b"", fn_name=b"", addr=None, pid=-1, sym_re=b""):
        self._attach_uprobes("uretprobe", name, sym, sym_re, fn_name, addr, 0, pid)

    def _attach_uprobes(self, kind, name, sym, sym_re, fn_name, addr, sym_off, pid) -> None:
        """One symbol or address, or (``sym_re``) every function the pattern matches, as BCC."""
        if not sym_re:
            return self._attach_uprobe(kind, name, sym, fn_name, addr, sym_off, pid)
        found = facts.get_user_functions_and_addresses(name, sym_re)
        if not found:
            raise EbpfkitError(f"no function of {_text(name)} matches '{_text(sym_re)}'")
        for _, at in found:
            self._attach_uprobe(kind, name, b"", fn_name, at, 0, pid)

    def _attach_uprobe(self, kind, name, sym, fn_name, addr, sym_off, pid) -> None:
        from ..engine.symbols import elf_symbols

        binary = _binary(_text(name))
        key = (kind, f"{binary}:{_text(sym) or hex(addr or 0)}", _text(fn_name))
        # a symbol or address -> its file offset, found here: libbpf refuses a name that
        # has several versions (libc's pthread_create@@GLIBC_2.34 and @GLIBC_2.2.5)
        symbol, offset = (_text(sym) or None), sym_off
        vaddr = addr if addr is not None else elf_symbols(binary).symbol_vaddr(symbol) if symbol else None
        if vaddr is not None:
            found = elf_symbols(binary).vaddr_to_file_offset(vaddr)
            if found is None:
                raise EbpfkitError(f"address {vaddr:#x} is in no loadable segment of {binary}")
            symbol, offset = None, found + (sym_off if addr is None else 0)
        prog = self.load_func(fn_name, self.KPROBE)
        self._links[key] = prog.attach_uprobe(binary, symbol, offset, pid, retprobe=kind == "uretprobe",
                                              ref_ctr_offset=_semaphore_offset(binary, addr))

    def detach_uprobe(self, name=b"", sym=b"", addr=None, fn_name=None, pid=-1):
        self._detach("uprobe", f"{_binary(_text(name))}:{_text(sym) or hex(addr or 0)}", fn_name)

    def detach_uretprobe(self, name=b"", sym=b"", addr=None, fn_name=None, pid=-1):
        self._detach("uretprobe", f"{_binary(_text(name))}:{_text(sym) or hex(addr or 0)}", fn_name)

    def attach_perf_event(self, ev_type=-1, ev_config=-1, fn_name=b"", sample_period=0, sample_freq=0,
                          pid=-1, cpu=-1, group_fd=-1):
        prog = self.load_func(fn_name, self.PERF_EVENT)
        self._links[("perf_event", f"{ev_type}:{ev_config}", _text(fn_name))] = prog.attach_perf_event(
            frequency=sample_freq, period=sample_period, cpus=None if cpu < 0 else [cpu], pid=pid,
            event_type=ev_type, config=ev_config)

    def detach_perf_event(self, ev_type=-1, ev_config=-1):
        self._detach("perf_event", f"{ev_type}:{ev_config}", None)

    def num_open_kprobes(self) -> int:
        return sum(k[0] in ("kprobe", "kretprobe") for k in self._links)

    def num_open_uprobes(self) -> int:
        return sum(k[0] in ("uprobe", "uretprobe", "usdt") for k in self._links)

    def num_open_tracepoints(self) -> int:
        return sum(k[0] in ("tracepoint", "raw_tracepoint") for k in self._links)

    def _detach(self, kind: str, target: str, fn_name) -> None:
        keys = [k for k in self._links if k[:2] == (kind, target) and (fn_name is None or k[2] == _text(fn_name))]
        if not keys:
            raise EbpfkitError(f"no {kind} attached at '{target}'")
        for key in keys:
            self._links.pop(key).close()

    # --- tables and events ---

    def get_table(self, name, keytype=None, leaftype=None, reducer=None):
        name = _text(name)
        if name not in self._tables:
            engine_map = self._maps.maps.get(name) if self._maps is not None else None
            if engine_map is None:
                known = ", ".join(self._maps.maps if self._maps is not None else ()) or "none"
                raise KeyError(f"no table '{name}' in the BPF program; its tables: {known}")
            self._tables[name] = tables.table(self, engine_map, self._translation.events.get(name))
        return self._tables[name]

    def __getitem__(self, name):
        return self.get_table(name)

    def __contains__(self, name):
        return self._maps is not None and _text(name) in self._maps.maps

    def perf_buffer_poll(self, timeout=-1):
        """Deliver the events of every open perf buffer (wait up to ``timeout`` ms; -1: until one)."""
        self._poll([r for r in self._readers if r.kind == "perf buffer"], timeout)

    def ring_buffer_poll(self, timeout=-1):
        self._poll([r for r in self._readers if r.kind == "ring buffer"], timeout)

    def ring_buffer_consume(self):
        self._poll([r for r in self._readers if r.kind == "ring buffer"], 0)

    def _poll(self, readers, timeout) -> None:
        if not readers:
            raise EbpfkitError("no buffer is open: call open_perf_buffer()/open_ring_buffer() on a table first")
        if len(readers) == 1:
            readers[0].poll(timeout)
            return
        # each reader in turn, a short wait each: a perf event's poll state is consumed by the
        # first poll that sees it, so one epoll over the readers' own epoll fds misses data
        import time

        end = None if timeout is None or timeout < 0 else time.monotonic() + timeout / 1000
        while True:
            delivered = 0
            for r in readers:
                left = 10 if end is None else max(0, min(10, int((end - time.monotonic()) * 1000)))
                delivered += r.poll(left)
            if delivered or (end is not None and time.monotonic() >= end):
                return

    # --- the trace pipe ---

    def trace_fields(self, nonblocking=False):
        """(task, pid, cpu, flags, timestamp, message) of the next bpf_trace_printk line."""
        while True:
            line = self._trace_line(nonblocking)
            if line is None:
                return (None,) * 6
            fields = _trace_fields(line)
            if fields:
                return fields

    def trace_print(self, fmt=None):
        while True:
            fields = self.trace_fields()
            if fmt:
                task, pid, cpu, flags, ts, msg = fields
                _say(fmt.format(task=task, pid=pid, cpu=cpu, flags=flags, ts=ts, msg=msg))
            else:
                _say(fields[5].decode(errors="replace"))

    def _trace_line(self, nonblocking: bool):
        from ..engine.mounts import ensure_tracefs

        if getattr(self, "_trace", None) is None:
            self._trace = open(os.path.join(ensure_tracefs(), "trace_pipe"), "rb")
            if nonblocking:
                os.set_blocking(self._trace.fileno(), False)
        line = self._trace.readline()
        return line.decode(errors="replace").rstrip("\n") if line else None

    # --- facts BCC scripts ask for (facts.py) ---
    tracepoint_exists = staticmethod(facts.tracepoint_exists)
    generate_auto_includes = staticmethod(facts.generate_auto_includes)
    support_raw_tracepoint = staticmethod(facts.support_raw_tracepoint)
    get_syscall_prefix = staticmethod(facts.get_syscall_prefix)
    ksym = staticmethod(facts.ksym)
    ksymname = staticmethod(facts.ksymname)
    get_kprobe_functions = staticmethod(facts.get_kprobe_functions)
    get_tracepoints = staticmethod(facts.get_tracepoints)
    kernel_struct_has_field = staticmethod(facts.kernel_struct_has_field)
    support_kfunc = staticmethod(facts.support_kfunc)
    support_lsm = staticmethod(facts.support_lsm)
    monotonic_time = staticmethod(facts.monotonic_time)
    find_library = staticmethod(facts.find_library)
    find_exe = staticmethod(facts.find_exe)
    get_user_functions_and_addresses = staticmethod(facts.get_user_functions_and_addresses)
    get_user_functions = staticmethod(facts.get_user_functions)
    get_user_addresses = staticmethod(facts.get_user_addresses)

    def get_syscall_fnname(self, name):
        return facts.get_syscall_fnname(name)

    sym = staticmethod(facts.sym)  # static in BCC too: scripts call BPF.sym(addr, pid)
    get_probe_limit = staticmethod(facts.get_probe_limit)

    # --- the end ---

    def cleanup(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        for obj in self._objects.values():
            obj.close()
        self._objects.clear()
        if self._maps is not None:
            self._maps.close()
            self._maps = None
        if getattr(self, "_trace", None) is not None:
            self._trace.close()
            self._trace = None

    close = cleanup

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


class _NothingAttached:
    """What a kprobe on a function nothing calls stands for where there are no kprobes."""

    def close(self) -> None:
        pass


def _have_kprobes() -> bool:
    from ..engine import features

    return features.probe("kprobe").status != features.UNSUPPORTED


def _require_hook(kind: str, fn_name: str) -> None:
    """fentry, fexit or lsm: NotSupportedError (exit 3) naming it where the kernel has none."""
    from ..engine import features

    found = features.probe(kind)
    if found.status == features.UNSUPPORTED:
        raise NotSupportedError(kind, f"{fn_name}: this kernel has no {kind} programs ({found.reason})",
                                hint="BCC's tools choose kprobes where BPF.support_kfunc() is false")


def _require_kprobes(fn_name: str, why_no_stand_in: str = "") -> None:
    from ..engine import features

    found = features.probe("kprobe")
    if found.status == features.UNSUPPORTED:
        also = f"; {why_no_stand_in}" if why_no_stand_in else ""
        raise NotSupportedError("kprobes", f"{fn_name}: this kernel has no kprobes ({found.reason}){also}",
                                hint="attach it to a tracepoint instead (TRACEPOINT_PROBE, attach_tracepoint)")


def _semaphore_offset(binary: str, addr) -> int:
    """The file offset of the semaphore of the USDT probe written at ``addr`` of ``binary``, if
    one is (ustat attaches uprobes at USDT probes' addresses itself, as BCC lets it): the
    kernel raises it while the uprobe is attached, as the probe's code runs only then."""
    from ..engine import usdt
    from ..engine.symbols import elf_symbols

    if addr is None:
        return 0
    semaphore = next((p.semaphore for p in usdt.probes_in(binary) if p.pc == addr and p.semaphore), 0)
    return (elf_symbols(binary).vaddr_to_file_offset(semaphore) or 0) if semaphore else 0


def _source(src_file, text) -> tuple[str, str]:
    if text is not None and (text or not src_file):
        text = _text(text)
        return text, "bcc_" + hashlib.sha256(text.encode()).hexdigest()[:8]
    path = _text(src_file)
    if not path:
        raise EbpfkitError("BPF() needs text= or src_file=")
    try:
        with open(path) as f:
            return f.read(), os.path.basename(path).split(".")[0]
    except OSError as exc:
        raise EbpfkitError(f"cannot read the BPF program {path}: {exc.strerror}") from None


def _translate(source: str, name: str, cflags, usdt: bool = False):
    """The program's translation, from the cache when this source, these flags, this kernel
    (its vmlinux.h) and this translator have made it before: no libclang at all then."""
    import json
    from dataclasses import asdict

    from ..engine import cache
    from ..engine.btf import find_kernel_btf
    from ..engine.compiler import Compiler
    from .translate import INCLUDE_DIR, VERSION, Probe, Translation, kconfig_dir, translate

    vmlinux_h = Compiler(btf=find_kernel_btf(None)).btf.vmlinux_h()
    key = cache.digest(str(VERSION), source, name, "\0".join(cflags), str(usdt), vmlinux_h, kconfig_dir(),
                       cache.file_digest(os.path.join(INCLUDE_DIR, "ek_bcc.h")))
    path = os.path.join(cache.subdir("bcc"), f"{key}.json")
    try:
        with open(path) as f:
            saved = json.load(f)
        return Translation(saved["source"], {n: Probe(**p) for n, p in saved["probes"].items()},
                           saved["events"], saved["key"], saved["stubs"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    done = translate(source, vmlinux_h, name, cflags, usdt=usdt)
    cache.atomic_write(path, json.dumps({"source": done.source, "events": done.events, "key": done.key,
                                         "stubs": done.stubs,
                                         "probes": {n: asdict(p) for n, p in done.probes.items()}}).encode())
    return done


def _trace_fields(line: str):
    """``<task>-<pid> [cpu] flags ts: bpf_trace_printk: msg`` -> its fields (None: another line)."""
    head, sep, msg = line.partition(": ")
    if not sep or "[" not in head:
        return None
    task_pid, _, rest = head.partition("[")
    task, _, pid = task_pid.strip().rpartition("-")
    cpu, _, rest = rest.partition("]")
    parts = rest.split()
    ts = parts[-1].rstrip(":") if parts else ""
    flags = parts[0] if len(parts) > 1 else ""
    msg = msg.split(": ", 1)[1] if msg.startswith("bpf_trace_printk: ") else msg
    try:
        return task.encode(), int(pid), int(cpu), flags.encode(), float(ts), msg.encode()
    except ValueError:
        return None
