"""Objects in two phases, as libbpf has them: an opened ``ObjectSpec`` (programs, maps and
read-only config still editable) and a loaded ``Object`` (owns kernel resources; a context
manager whose close() detaches and frees everything in reverse order)."""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import signal
import threading

from ..errors import EbpfkitError, LoadError, NotSupportedError, PermissionDeniedError, VerifierError
from . import _libbpf as L
from .resource import Resource
from . import links
from .constants import AttachType, ProgType
from .maps import Map
from ._log import get_logger

log = get_logger("ebpfkit.engine.object")

LOG_BUF_SIZE = 16 << 20  # the verifier log of a failed load; anonymous memory, paged in only if used
_INTERNAL = (".rodata", ".bss", ".data", ".kconfig")
# SEC() kinds libbpf can attach on its own (the rest need a target: an interface, cgroup, map)
_AUTO_ATTACH = frozenset({"tp", "tracepoint", "raw_tp", "raw_tracepoint", "tp_btf", "fentry", "fexit",
                          "fmod_ret", "lsm", "kprobe", "kretprobe", "uprobe", "uretprobe",
                          "ksyscall", "kretsyscall"})


class Program:
    """One BPF program of an object."""

    def __init__(self, owner, ptr):
        self._owner = owner
        self.ptr = ptr
        self.name = L.lib.bpf_program__name(ptr).decode()
        self.section = L.lib.bpf_program__section_name(ptr).decode()

    @property
    def type(self):
        return _enum(ProgType, L.lib.bpf_program__type(self.ptr))

    @property
    def expected_attach_type(self):
        return _enum(AttachType, L.lib.bpf_program__expected_attach_type(self.ptr))

    @property
    def fd(self) -> int:
        return L.lib.bpf_program__fd(self.ptr)

    @property
    def autoload(self) -> bool:
        return bool(L.lib.bpf_program__autoload(self.ptr))

    @autoload.setter
    def autoload(self, value: bool) -> None:
        if L.lib.bpf_program__set_autoload(self.ptr, bool(value)):
            raise LoadError(f"autoload of '{self.name}' can only change before load()")

    @property
    def auto_attachable(self) -> bool:
        kind, _, target = self.section.partition("/")
        return kind.split(".")[0] in _AUTO_ATTACH and bool(target)

    def set_attach_target(self, function: str) -> None:
        """For fentry/fexit/tp_btf/lsm: choose the kernel function before load."""
        err = L.lib.bpf_program__set_attach_target(self.ptr, 0, function.encode())
        if err:
            raise LoadError(f"cannot set attach target of '{self.name}' to {function}: {os.strerror(-err)}")

    def set_type(self, prog_type: int, expected_attach_type: int | None = None) -> None:
        """Change the program type before load (e.g. fall back from fentry to kprobe)."""
        L.lib.bpf_program__set_type(self.ptr, prog_type)
        if expected_attach_type is not None:
            L.lib.bpf_program__set_expected_attach_type(self.ptr, expected_attach_type)

    def __repr__(self):
        return f"<Program {self.name} SEC(\"{self.section}\")>"

    # --- attaching: each records the link on the object so close() detaches it ---

    def _keep(self, link):
        self._owner._adopt(link)
        return link

    def attach(self) -> links.Link:
        """Attach as the SEC() name says."""
        return self._keep(links.auto(self))

    def attach_tracepoint(self, category: str, name: str):
        return self._keep(links.tracepoint(self, category, name))

    def attach_raw_tracepoint(self, name: str):
        return self._keep(links.raw_tracepoint(self, name))

    def attach_trace(self):
        return self._keep(links.trace(self))

    def attach_lsm(self):
        return self._keep(links.lsm(self))

    def attach_kprobe(self, function: str, retprobe: bool = False, offset: int = 0):
        return self._keep(links.kprobe(self, function, retprobe, offset))

    def attach_uprobe(self, binary: str, symbol: str | None = None, offset: int = 0, pid: int = -1,
                      retprobe: bool = False, ref_ctr_offset: int = 0):
        return self._keep(links.uprobe(self, binary, symbol, offset, pid, retprobe, ref_ctr_offset))

    def attach_usdt(self, binary: str, provider: str, name: str, pid: int = -1, cookie: int = 0):
        return self._keep(links.usdt(self, binary, provider, name, pid, cookie))

    def use_uprobe_multi(self) -> None:
        """Load this uprobe program for attach_uprobe_multi (before load; where the kernel has
        it: features.probe("uprobe_multi")). It then attaches only that way."""
        self.set_type(ProgType.KPROBE, AttachType.TRACE_UPROBE_MULTI)

    def attach_uprobe_multi(self, binary: str, offsets: list[int], pid: int = -1, retprobe: bool = False):
        """One link for every offset of ``binary`` (see links.uprobe_multi)."""
        return self._keep(links.uprobe_multi(self, binary, offsets, pid, retprobe))

    def attach_perf_event(self, frequency: int = 0, period: int = 0, cpus=None, pid: int = -1, **attr):
        return self._keep(links.perf_event(self, frequency, period, cpus, pid, **attr))

    def attach_xdp(self, ifindex: int, mode: str = "auto"):
        return self._keep(links.xdp(self, ifindex, mode))

    def attach_tc(self, ifindex: int, direction: str = "ingress"):
        return self._keep(links.tc(self, ifindex, direction))

    def attach_cgroup(self, cgroup_path: str):
        return self._keep(links.cgroup(self, cgroup_path))

    def attach_sockmap(self, sockmap: Map, attach_type: int | None = None):
        return self._keep(links.sockmap(self, sockmap.fd, attach_type))

    # --- running and statistics ---

    def test_run(self, data: bytes = b"", ctx: bytes | None = None, repeat: int = 1,
                 data_out_size: int | None = None, *, flags: int = 0, batch_size: int = 0):
        """BPF_PROG_TEST_RUN: run the program on ``data`` in the kernel without any hook
        (``flags``, ``batch_size``: see ebpfkit.engine.testrun, e.g. XDP live frames)."""
        from .testrun import test_run

        return test_run(self.fd, self.name, data, ctx, repeat, data_out_size, flags=flags,
                        batch_size=batch_size)

    def info(self) -> L.bpf_prog_info:
        info = L.bpf_prog_info()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        L.lib.bpf_obj_get_info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size))
        return info


class Globals:
    """Global variables of one data section (.rodata, .bss, .data) by name.

    Before load they are the initial values (set read-only config here); after load,
    .bss/.data are the live memory shared with the program.
    """

    def __init__(self, map_ptr, btf, section: str, writable):
        self._ptr, self._btf, self.section, self._writable = map_ptr, btf, section, writable
        self._vars = {v.name: v for v in btf.datasec(section)} if btf is not None else {}

    def _memory(self):
        if self._ptr is None:
            raise LoadError(f"{self.section} is gone: its object was closed")
        size = ctypes.c_size_t()
        addr = L.lib.bpf_map__initial_value(self._ptr, ctypes.byref(size))
        if not addr:
            raise LoadError(f"section {self.section} has no memory mapped")
        return (ctypes.c_char * size.value).from_address(addr)

    def _var(self, name):
        try:
            return self._vars[name]
        except KeyError:
            known = ", ".join(sorted(self._vars)) or "none"
            raise KeyError(f"no global '{name}' in {self.section} (there are: {known})") from None

    def __getitem__(self, name: str):
        from .btftypes import codec

        var = self._var(name)
        return codec(self._btf, var.type_id).decode(self._memory(), var.offset)

    def __setitem__(self, name: str, value) -> None:
        from .btftypes import codec

        if not self._writable():
            raise LoadError(f"'{name}' is read-only config ({self.section}): set it before load()")
        var = self._var(name)
        data = codec(self._btf, var.type_id).encode(value)
        mem = self._memory()
        ctypes.memmove(ctypes.addressof(mem) + var.offset, data, len(data))

    def __contains__(self, name):
        return name in self._vars

    def keys(self):
        return self._vars.keys()

    def update(self, values: dict) -> None:
        for k, v in values.items():
            self[k] = v

    def to_dict(self) -> dict:
        return {name: self[name] for name in self._vars}

    def __repr__(self):
        return f"<Globals {self.section} {sorted(self._vars)}>"


class _Base:
    """What an opened and a loaded object share: programs, maps, globals."""

    def _scan(self):
        from .btftypes import BTF

        btf_ptr = L.lib.bpf_object__btf(self._obj)
        self.btf = None
        if btf_ptr:
            size = ctypes.c_uint32()
            addr = L.lib.btf__raw_data(btf_ptr, ctypes.byref(size))
            self.btf = BTF.from_bytes(ctypes.string_at(addr, size.value))
        self.programs: dict[str, Program] = {}
        prog = L.lib.bpf_object__next_program(self._obj, None)
        while prog:
            p = Program(self, prog)
            self.programs[p.name] = p
            prog = L.lib.bpf_object__next_program(self._obj, prog)
        self.maps: dict[str, Map] = {}
        self._sections: dict[str, object] = {}
        m = L.lib.bpf_object__next_map(self._obj, None)
        while m:
            if L.lib.bpf_map__is_internal(m):
                # libbpf names them "<obj prefix>.rodata" etc.; the BTF DATASEC holds the real name
                name = L.lib.bpf_map__name(m).decode()
                section = name[name.index("."):] if "." in name else name
                self._sections[section] = m
            else:
                mp = Map(m, self.btf, owner=self)
                self.maps[mp.name] = mp
            m = L.lib.bpf_object__next_map(self._obj, m)

    def _globals(self, section: str, writable) -> Globals | None:
        ptr = self._sections.get(section)
        return Globals(ptr, self.btf, section, writable) if ptr else None

    def section_bytes(self, section: str) -> bytes:
        """A global-data section's (".data", ".rodata", ".bss") bytes: its initial values
        before load, the live memory of .bss and .data after."""
        found = self._globals(section, lambda: False)
        if found is None:
            raise KeyError(f"{self.name} has no {section} section")
        return bytes(found._memory())


class ObjectSpec(_Base, Resource):
    """An opened object: edit ``rodata``, map sizes and autoload, then ``load()``."""

    def __init__(self, path: str | os.PathLike, name: str | None = None, btf_path: str | None = None):
        self.path = os.fspath(path)
        self.name = name or os.path.basename(self.path).split(".")[0]
        self._loaded = False
        opts = L.bpf_object_open_opts(object_name=self.name.encode(),
                                      btf_custom_path=os.fsencode(btf_path) if btf_path else None)
        L.sync_print()  # libbpf's few hundred lines while opening are read only to explain a failure:
        self._obj = L.lib.bpf_object__open_file(os.fsencode(self.path), ctypes.byref(opts))
        if not self._obj:
            err = L.errno()
            with L.capture_libbpf_messages() as messages:  # so open it again, listening
                again = L.lib.bpf_object__open_file(os.fsencode(self.path), ctypes.byref(opts))
            if again:
                L.lib.bpf_object__close(again)
            raise LoadError(f"cannot open BPF object {self.path}: {os.strerror(err)}\n"
                            + "\n".join(messages.lines[-5:]))
        self._scan()
        self.rodata = self._globals(".rodata", lambda: not self._loaded) or _NoGlobals(".rodata")

    def load(self, config: dict | None = None) -> "Object":
        """Load every autoload program and create the maps; all or nothing."""
        if self._loaded:
            raise LoadError(f"object {self.name} is already loaded")
        if config:
            self.rodata.update(config)
        log_mem = mmap.mmap(-1, LOG_BUF_SIZE)
        log_addr = ctypes.addressof(ctypes.c_char.from_buffer(log_mem))
        for prog in self.programs.values():
            L.lib.bpf_program__set_log_buf(prog.ptr, log_addr, LOG_BUF_SIZE)
        try:
            with L.capture_libbpf_messages() as messages:
                err = L.lib.bpf_object__load(self._obj)
            if err:
                raise _load_error(self, err, log_mem, messages.lines)
        finally:
            for prog in self.programs.values():
                L.lib.bpf_program__set_log_buf(prog.ptr, None, 0)
            del log_addr
            log_mem.close()
        self._loaded = True
        obj = Object(self)
        self._obj = None  # ownership moved to the Object
        return obj

    def close(self) -> None:
        if self._obj:
            L.lib.bpf_object__close(self._obj)
            self._obj = None

    def __repr__(self):
        return f"<ObjectSpec {self.name} programs={list(self.programs)} maps={list(self.maps)}>"


class _NoGlobals(dict):
    def __init__(self, section):
        super().__init__()
        self.section = section

    def __setitem__(self, key, value):
        raise KeyError(f"the program has no {self.section} section, so no global '{key}'")

    def update(self, values):
        for k, v in values.items():
            self[k] = v


class Object(_Base, Resource):
    """A loaded object. Use it as a context manager; ``close()`` frees everything."""

    def __init__(self, spec: ObjectSpec):
        self._obj = spec._obj
        self.name, self.path, self.btf = spec.name, spec.path, spec.btf
        self.programs, self.maps, self._sections = spec.programs, spec.maps, spec._sections
        for item in list(self.programs.values()) + list(self.maps.values()):
            item._owner = self
        self.rodata = spec.rodata
        _map_writable_globals(self._sections)
        self.bss = self._globals(".bss", lambda: True)
        self.data = self._globals(".data", lambda: True)
        self.links: list[links.Link] = []
        self._readers: list = []
        _install_sigterm_handler()

    def _adopt(self, link):
        self.links.append(link)

    def attach(self, *names: str) -> list[links.Link]:
        """Auto-attach the named programs, or every loaded one whose SEC() names its hook."""
        chosen = [self.programs[n] for n in names] if names else [
            p for p in self.programs.values() if p.autoload and p.auto_attachable]
        return [p.attach() for p in chosen]

    def program_ids(self) -> dict[str, int]:
        """{name: the kernel's id} of the loaded programs (for ``inventory.program(id)``:
        run-time statistics; the kernel keeps only 15 characters of a name)."""
        return {p.name: p.info().id for p in self.programs.values() if p.fd >= 0}

    def ring_buffer(self, map_name: str, callback=None, decode=True, **kw):
        """A reader of the BPF_MAP_TYPE_RINGBUF ``map_name`` (see ebpfkit.engine.events)."""
        from .events import RingBuffer

        reader = RingBuffer(self, map_name, callback, decode=decode, **kw)
        self._readers.append(reader)
        return reader

    def perf_buffer(self, map_name: str, callback=None, decode=True, **kw):
        """A reader of the BPF_MAP_TYPE_PERF_EVENT_ARRAY ``map_name``."""
        from .events import PerfBuffer

        reader = PerfBuffer(self, map_name, callback, decode=decode, **kw)
        self._readers.append(reader)
        return reader

    def pin_maps(self, directory: str) -> None:
        from . import mounts

        mounts.ensure_bpffs()
        os.makedirs(directory, exist_ok=True)
        for m in self.maps.values():
            if not m.autocreate:  # left out of this load: nothing to pin
                continue
            if L.lib.bpf_map__pin(m._ptr, os.fsencode(os.path.join(directory, m.name))):
                raise LoadError(f"cannot pin map {m.name} in {directory}: {os.strerror(L.errno())}")

    def detach(self) -> None:
        """Detach every link (newest first): the programs stop running; maps and readers stay,
        so what the programs sent can still be read."""
        probes = [link for link in self.links if link.kind in _WAITS_FOR_GRACE_PERIOD]
        if len(probes) > 1:
            _close_concurrently(probes)
        for link in reversed(self.links):
            _close_link(link)
        self.links = []

    def close(self) -> None:
        """Detach every link (newest first), free readers, maps and programs."""
        for reader in reversed(self._readers):
            reader.close()
        self._readers = []
        self.detach()
        if self._obj:
            L.lib.bpf_object__close(self._obj)
            self._obj = None
            for section in (self.rodata, self.bss, self.data):
                if isinstance(section, Globals):
                    section._ptr = None  # its memory went with the object

    @property
    def closed(self) -> bool:
        return self._obj is None

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self.links)} links"
        return f"<Object {self.name} programs={list(self.programs)} maps={list(self.maps)} {state}>"


_BPF_F_MMAPABLE, _BPF_F_RDONLY_PROG = 1 << 10, 1 << 7

# Detaching one of these waits for an RCU grace period (~50 ms here), in close() itself;
# independent of each other, so closed side by side: memleak's 9 links 410 -> 70 ms.
_WAITS_FOR_GRACE_PERIOD = frozenset({"uprobe", "uretprobe", "uprobe.multi", "uretprobe.multi",
                                     "kprobe", "kretprobe"})
_CLOSERS = 32  # threads at most


def _close_link(link) -> None:
    try:
        link.close()  # a second close does nothing
    except Exception as exc:  # keep closing the rest
        log.warning("detaching %r failed: %s", link, exc)


def _close_concurrently(links: list) -> None:
    import threading

    for start in range(0, len(links), _CLOSERS):
        threads = []
        for link in links[start:start + _CLOSERS]:
            thread = threading.Thread(target=_close_link, args=(link,), name="ebpfkit-detach")
            try:
                thread.start()
            except RuntimeError:  # no new thread (the interpreter is shutting down): here, then
                _close_link(link)
                continue
            threads.append(thread)
        for thread in threads:
            thread.join()


def _map_writable_globals(sections: dict) -> None:
    """Point libbpf's copy of .bss/.data at the kernel maps, so Globals read and write live.

    Older libbpf (1.1 here) only does this in bpf_object__load_skeleton; after a plain
    bpf_object__load the memory stays a private copy of the initial values. Mapping the
    map fd over it (MAP_FIXED) is what the skeleton does; bpf_object__close munmaps it."""
    page = mmap.PAGESIZE
    for section, ptr in sections.items():
        flags = L.lib.bpf_map__map_flags(ptr)
        if not flags & _BPF_F_MMAPABLE or flags & _BPF_F_RDONLY_PROG:
            continue  # .rodata/.kconfig are frozen: the initial values are the live ones
        size = ctypes.c_size_t()
        addr = L.lib.bpf_map__initial_value(ptr, ctypes.byref(size))
        fd = L.lib.bpf_map__fd(ptr)
        if not addr or fd < 0:
            continue
        length = -(-((L.lib.bpf_map__value_size(ptr) + 7) & ~7) * L.lib.bpf_map__max_entries(ptr)
                   // page) * page
        got = L.libc.mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_SHARED | 0x10, fd, 0)  # 0x10: MAP_FIXED
        if got != addr:
            raise LoadError(f"cannot map {section} of the loaded object: {os.strerror(L.errno())}")


def _enum(cls, value):
    try:
        return cls(value)
    except ValueError:
        return value


_FAILED_PROG = r"prog '([^']+)': (?:BPF program load failed|failed to load)"


def _load_error(spec: ObjectSpec, err: int, log_mem: mmap.mmap, messages: list[str]) -> EbpfkitError:
    import re  # a failed load only: not worth a start's import

    err = abs(err)
    failed = next((m.group(1) for line in reversed(messages) if (m := re.search(_FAILED_PROG, line))), None)
    verifier_log = log_mem[:log_mem.find(b"\0")].decode(errors="replace").strip() if failed else ""
    tail = "\n".join(messages[-8:])
    if verifier_log:
        return VerifierError(failed, _verifier_summary(verifier_log), verifier_log, err)
    if err in (1, 13):
        if os.geteuid() != 0:
            return PermissionDeniedError(f"loading {spec.name} needs privileges (EPERM)",
                                         hint="run as root or with CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN")
        prog = spec.programs.get(failed) if failed else None
        kind = prog.section.split("/")[0] if prog else "bpf"
        return NotSupportedError(kind, f"the kernel refused to load program '{failed or spec.name}' "
                                       f"(SEC \"{prog.section if prog else '?'}\"): EPERM",
                                 hint="this program type may be locked on this kernel: lockdown (boot with "
                                      "lockdown=none or integrity), or BPF trampolines disabled")
    missing = next((m.group(1) for line in messages
                    if (m := re.search(r"failed to find kernel BTF type ID of '([^']+)'", line))), None)
    if missing:  # the kernel has BTF, but no such function in it (inlined, static, renamed)
        return NotSupportedError("kernel_btf", f"{spec.name}: {missing} is not a function in this kernel's BTF "
                                               "(inlined, renamed or not traceable here): no fentry, fexit or "
                                               "LSM program can attach to it")
    if any("vmlinux BTF" in line or "kernel BTF" in line for line in messages):
        return _kernel_btf_missing(spec)
    if any("CO-RE relocat" in line or "failed to resolve" in line for line in messages):
        return LoadError(f"CO-RE relocation failed for {spec.name}: a kernel type or field it uses "
                         f"does not exist on this kernel\n{tail}")
    return LoadError(f"loading {spec.name} failed: {os.strerror(err)}\n{tail}")


def _kernel_btf_missing(spec: ObjectSpec) -> NotSupportedError:
    """libbpf found no kernel BTF: say which programs need the kernel's own (BTF-typed
    hooks, which no --btf file can serve), else that CO-RE needs BTF from somewhere."""
    from .btf import BTF_SOURCES_HINT, BTF_TYPED_HOOKS, KERNEL_BTF

    typed = [f'{p.name} (SEC "{p.section}")' for p in spec.programs.values()
             if p.autoload and p.section.split("/")[0].split(".")[0] in BTF_TYPED_HOOKS]
    if not typed:
        return NotSupportedError("btf", f"{spec.name}: CO-RE relocation needs this kernel's BTF, and "
                                        f"{KERNEL_BTF} is missing or empty", hint=BTF_SOURCES_HINT)
    more = f" and {len(typed) - 3} more" if len(typed) > 3 else ""
    return NotSupportedError(
        "kernel_btf", f"{spec.name}: {', '.join(typed[:3])}{more} attach to BTF-typed hooks, which the "
                      f"kernel resolves in its own BTF ({KERNEL_BTF}, missing here): a --btf file serves "
                      "CO-RE relocation only, not these hooks",
        hint="boot a kernel built with CONFIG_DEBUG_INFO_BTF=y, or use hooks that are not BTF-typed "
             "(tracepoints, raw tracepoints, kprobes)")


_STATS = ("processed ", "verification time", "stack depth", "max_states_per_insn", "mark_read")


def _verifier_summary(text: str) -> str:
    """The verifier's reason (last meaningful line), with the source line it points at."""
    import re

    lines = [ln for ln in text.splitlines() if ln.strip()]
    while lines and lines[-1].startswith(_STATS):
        lines.pop()
    if not lines:
        return "no reason given"
    reason = lines[-1].strip()
    source = next((ln.strip()[1:].strip() for ln in reversed(lines) if ln.lstrip().startswith(";")), None)
    insn = next((ln.split(":")[0] for ln in reversed(lines[:-1]) if re.match(r"^\d+: \(", ln)), None)
    where = []
    if insn:
        where.append(f"insn {insn}")
    if source:
        where.append(f"source: {source}")
    return reason + (f" ({'; '.join(where)})" if where else "")


_sigterm_installed = False


def _install_sigterm_handler():
    """Turn SIGTERM into SystemExit so context managers run and links are detached."""
    global _sigterm_installed, _sigterm_pid
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_installed, _sigterm_pid = True, os.getpid()
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


_sigterm_pid = os.getpid()  # the process whose stack SystemExit may unwind


def _on_sigterm(signum, frame):
    if os.getpid() != _sigterm_pid:
        # a fork() child (multiprocessing, pyroute2's netns helpers) inherits this handler but
        # must not unwind its parent's stack (pytest, a tool): die as SIGTERM normally would
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    raise SystemExit(128 + signum)
