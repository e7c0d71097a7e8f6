"""The facts BCC's scripts ask its ``BPF`` class for (symbols, kernel functions and
tracepoints, struct members, libraries, what the kernel supports), as functions: bpf.py
binds them to the class."""

from __future__ import annotations

import os
import re

from ..errors import EbpfkitError

_symbolizer = None  # the processes' symbols sym() has read


def tracepoint_exists(category, event) -> bool:
    """BPF.tracepoint_exists: tracefs lists it (mounted here first where it is not)."""
    from ..engine.mounts import ensure_tracefs
    from ..sysinfo.events import tracepoint_exists

    try:
        root = ensure_tracefs()
    except EbpfkitError:  # not root: what is mounted is all there is to ask
        return tracepoint_exists(_text(category), _text(event))
    return tracepoint_exists(_text(category), _text(event), root)


# a syscall's own function, as get_syscall_fnname names it (this architecture's wrapper, or the
# plain name of kernels without wrappers); not __ia32_ (32-bit compat) nor __se_/__do_ (inner)
_SYSCALL_FUNCTION = re.compile(r"^(?:__x64_|__arm64_|__s390x_|__riscv_)?sys_(\w+)$")


def syscall_tracepoint(function: str, phase: str) -> str | None:
    """``__x64_sys_openat``, "enter" -> "sys_enter_openat" (of category syscalls), if that
    tracepoint exists: it fires where the function's kprobe would, in the same task."""
    found = _SYSCALL_FUNCTION.match(function)
    if not found:
        return None
    event = f"sys_{phase}_{found.group(1)}"
    return event if tracepoint_exists("syscalls", event) else None


def unreachable_syscall(function: str) -> bool:
    """Whether ``function`` is an architecture's syscall wrapper (``__x64_sys_stat``) that no
    syscall number of this architecture reaches: the kernel makes a syscall's tracepoints
    only for the syscalls its table maps (x86-64 maps stat to newstat; __x64_sys_stat is
    built, and a kprobe on it never fires)."""
    found = _SYSCALL_FUNCTION.match(function)
    return bool(found and not function.startswith("sys_") and ksymname(function) != -1
                and tracepoint_exists("syscalls", "sys_enter_getpid")
                and not tracepoint_exists("syscalls", f"sys_enter_{found.group(1)}"))


def generate_auto_includes(program_words) -> str:
    """BCC adds kernel headers for the types a probe names; vmlinux.h has them all."""
    return ""


def support_raw_tracepoint() -> bool:
    return True


def get_syscall_fnname(name) -> bytes:
    return get_syscall_prefix() + _text(name).encode()


def get_syscall_prefix() -> bytes:
    from ..engine.symbols import kernel_symbols

    syms = kernel_symbols()
    return next((p for p in (b"__x64_sys_", b"__arm64_sys_", b"sys_") if f"{p.decode()}bpf" in syms), b"sys_")


def ksym(addr, show_module=False, show_offset=False) -> bytes:
    """The kernel function at ``addr`` (``[unknown]`` if none)."""
    from ..engine.symbols import kernel_symbols

    sym = kernel_symbols().resolve(addr)
    if not sym.known:
        return b"[unknown]"
    text = sym.name + (f"+{sym.offset:#x}" if show_offset else "")
    return (text + (f" [{sym.module}]" if show_module and sym.module else "")).encode()


def ksymname(name) -> int:
    """The address of kernel symbol ``name`` (-1 if none)."""
    from ..engine.symbols import kernel_symbols

    addr = kernel_symbols().address(_text(name))
    return -1 if addr is None else addr


def sym(addr, pid, show_module=False, show_offset=False, demangle=True) -> bytes:
    """The function of process ``pid`` at ``addr`` (``[unknown]`` if none); pid < 0: the kernel."""
    global _symbolizer
    if pid is None or pid < 0:
        return ksym(addr, show_module, show_offset)
    from ..engine.symbols import Symbolizer

    if _symbolizer is None:
        _symbolizer = Symbolizer()
    proc = _symbolizer.process(pid)
    sym = proc.resolve(addr) if proc is not None else None
    if sym is None or not sym.known:
        return b"[unknown]"
    text = sym.name + (f"+{sym.offset:#x}" if show_offset else "")
    return (text + (f" [{sym.module}]" if show_module and sym.module else "")).encode()


def get_kprobe_functions(event_re) -> list[bytes]:
    """Kernel functions a kprobe may attach to whose names match ``event_re``."""
    import re

    from ..engine.mounts import ensure_tracefs

    pattern = re.compile(event_re if isinstance(event_re, bytes) else event_re.encode())
    try:
        with open(os.path.join(ensure_tracefs(), "available_filter_functions"), "rb") as f:
            names = [line.split()[0] for line in f if line.strip()]
    except OSError:
        return []
    return list(dict.fromkeys(n for n in names if pattern.match(n)))


def get_tracepoints(tp_re) -> list[bytes]:
    import re

    from ..engine.mounts import ensure_tracefs

    pattern = re.compile(_text(tp_re))
    events = os.path.join(ensure_tracefs(), "events")
    found = []
    for group in sorted(os.listdir(events)):
        if os.path.isdir(os.path.join(events, group)):
            for event in sorted(os.listdir(os.path.join(events, group))):
                if pattern.match(f"{group}:{event}") and os.path.isdir(os.path.join(events, group, event)):
                    found.append(f"{group}:{event}".encode())
    return found


def kernel_struct_has_field(struct_name, field_name) -> bool:
    from ..engine import kernel_struct_members

    return _text(field_name) in kernel_struct_members(_text(struct_name))


def support_kfunc() -> bool:
    from ..engine import features

    return features.probe("fentry").supported


def support_lsm() -> bool:
    from ..engine import features

    return features.probe("lsm").supported


def monotonic_time() -> int:
    import time

    return time.monotonic_ns()


def find_library(libname) -> bytes | None:
    path = _library(_text(libname))
    return path.encode() if path else None


def find_exe(bin_path) -> bytes | None:
    import shutil

    name = _text(bin_path)
    found = name if os.path.isfile(name) and os.access(name, os.X_OK) else shutil.which(name)
    return found.encode() if found else None


def get_user_functions_and_addresses(name, sym_re) -> list[tuple[bytes, int]]:
    """The functions of binary or library ``name`` whose names match ``sym_re`` from their
    start (re.match, as BCC), with their addresses: one entry per address."""
    import re

    from ..engine.symbols import SymbolError, elf_symbols

    pattern = re.compile(_text(sym_re))
    try:
        functions = elf_symbols(_binary(_text(name))).functions()
    except (OSError, SymbolError) as e:
        raise EbpfkitError(f"cannot read the symbols of '{_text(name)}': {e}") from None
    found: dict[int, bytes] = {}
    for fn, addr in sorted(functions):
        if addr and pattern.match(fn):
            found.setdefault(addr, fn.encode())
    return [(fn, addr) for addr, fn in found.items()]


def get_user_functions(name, sym_re) -> list[bytes]:
    return [fn for fn, _ in get_user_functions_and_addresses(name, sym_re)]


def get_user_addresses(name, sym_re) -> list[int]:
    return [addr for _, addr in get_user_functions_and_addresses(name, sym_re)]


def get_probe_limit() -> int:
    return 1000


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _library(name: str) -> str | None:
    """``c`` -> the path of libc.so.6 (as ldconfig knows it), like BCC's find_library."""
    import subprocess

    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        soname, _, path = line.strip().partition(" => ")
        if soname.startswith((f"lib{name}.so ", f"lib{name}.so.")) and os.path.exists(path):
            return path
    return None


def _binary(name: str) -> str:
    """What a uprobe's ``name`` means in BCC: a path, a library name (``c``), or a program on PATH."""
    import shutil

    if os.sep in name and os.path.exists(name):
        return name
    found = _library(name) or shutil.which(name)
    if not found:
        raise EbpfkitError(f"uprobe target '{name}': no such file, library (ldconfig -p) or program on PATH")
    return found
