"""Which files to put memleak's uprobes on: the allocator's library (glibc's libc, jemalloc,
tcmalloc, or the one -O names), libc and the allocator for mmap/munmap, and whatever exports
C++'s operator new/delete (libstdc++, jemalloc, tcmalloc). The libraries come from the process's /proc/PID/maps (-p)
or, for a command not started yet (-c), from the dynamic loader's own list of what it would
load (`ld.so --list`, as ldd does)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ...errors import ConfigError

# the library each preset means: a basename starting so
PRESETS = {"glibc": "libc.so", "jemalloc": "libjemalloc.so", "tcmalloc": "libtcmalloc"}
DETECTED_FIRST = ("jemalloc", "tcmalloc")  # they replace glibc's malloc when mapped
CXX_LIBRARY = "libstdc++.so"

# (symbol, program): entry probes; every allocation also gets alloc_return on its return
ALLOCATOR_FUNCTIONS = (
    ("malloc", "malloc_enter"), ("calloc", "calloc_enter"), ("realloc", "realloc_enter"),
    ("posix_memalign", "posix_memalign_enter"), ("aligned_alloc", "memalign_enter"),
    ("memalign", "memalign_enter"), ("valloc", "malloc_enter"), ("pvalloc", "malloc_enter"),
    ("free", "free_enter"))
REQUIRED = ("malloc", "free")
# an allocator's own API beside the standard one (jemalloc's *allocx; its xallocx, resizing in
# place, is not followed: the block keeps the size it was recorded with)
PRESET_FUNCTIONS = {"jemalloc": (
    ("mallocx", "malloc_enter"), ("rallocx", "realloc_enter"), ("dallocx", "free_enter"),
    ("sdallocx", "free_enter"))}
# libc's, and the allocator's where it exports its own (tcmalloc's mmap/munmap hook wrappers make
# the system call themselves: a preloaded tcmalloc takes the program's mmaps from libc)
MAPPING_FUNCTIONS = (("mmap", "mmap_enter"), ("mmap64", "mmap_enter"), ("munmap", "munmap_enter"))
# operator new/new[] (plain, nothrow, aligned) and delete/delete[] (plain, sized, aligned, nothrow)
CXX_FUNCTIONS = (
    *((name, "malloc_enter") for name in (
        "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
        "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t")),
    *((name, "delete_enter") for name in (
        "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
        "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t",
        "_ZdaPvmSt11align_val_t")))
RETURNS = "alloc_return"


@dataclass(frozen=True)
class Probe:
    path: str
    symbol: str
    offset: int     # in the file: the function's (aliases share one: probed once), or past its first instruction (engine.uprobe_sites)
    program: str
    retprobe: bool = False


@dataclass(frozen=True)
class Plan:
    """The allocator found and every probe to attach."""

    allocator: str  # a preset's name, or the -O library's path
    library: str    # the file its functions are probed in
    probes: tuple[Probe, ...]


def mapped_libraries(pid: int) -> list[str]:
    """The files mapped executable in ``pid``, as this process can open them (a container's
    through /proc/PID/root)."""
    from ...engine.symbols import read_maps

    paths = []
    for m in read_maps(pid):
        path = m.path.removesuffix(" (deleted)")
        if not path.startswith("/"):
            continue
        visible = path if os.path.exists(path) else f"/proc/{pid}/root{path}"
        if visible not in paths:
            paths.append(visible)
    return paths


def linked_libraries(executable: str, env: dict | None = None) -> list[str]:
    """The executable and the libraries the dynamic loader would load for it with ``env``
    (LD_PRELOAD included), before it runs; just the executable when it is static."""
    import subprocess  # only -c asks the loader (a -p process's maps say it all)

    loader = _dynamic_loader()
    listed = subprocess.run([loader, "--list", executable], capture_output=True, text=True,
                            timeout=30, env=env) if loader else None
    paths = [executable]
    for line in listed.stdout.splitlines() if listed and listed.returncode == 0 else []:
        _, arrow, rest = line.partition("=>")
        path = (rest if arrow else line).strip().split(" (")[0].strip()
        if path.startswith("/") and path not in paths:
            paths.append(path)
    return paths


def _dynamic_loader() -> str | None:
    """The ld.so this Python runs with (the system's)."""
    from ...engine.symbols import read_maps

    for m in read_maps(os.getpid()):
        if os.path.basename(m.path).startswith("ld-linux"):
            return m.path
    return None


def split_settings(command: list[str]) -> tuple[dict, list[str]]:
    """The leading NAME=VALUE words of a command line, as a shell takes them (the command's
    environment: `-c "LD_PRELOAD=libjemalloc.so.2 ./app"`), and the command after them."""
    settings = {}
    for i, word in enumerate(command):
        name, equals, value = word.partition("=")
        if not (equals and name.isidentifier()):
            return settings, command[i:]
        settings[name] = value
    return settings, []


def find_executable(command: list[str]) -> str:
    if not command:
        raise ConfigError("command", "names no program to run")
    import shutil  # only -c needs it

    found = shutil.which(command[0])
    if not found:
        raise ConfigError("command", f"{command[0]!r}: no such program (not a path, not on PATH)")
    return os.path.realpath(found)


def plan(libraries: list[str], allocator: str | None, library: str | None) -> Plan:
    """The probes for a process with these ``libraries``: the ``allocator`` preset's library,
    or ``library`` (-O), or the preset detected (jemalloc or tcmalloc where mapped, else glibc)."""
    if library:
        if not os.path.exists(library):
            raise ConfigError("library", f"{library}: no such file")
        name, path = library, library
    else:
        name = allocator or _detect(libraries)
        path = _find(libraries, PRESETS[name])
        if path is None:
            raise ConfigError("allocator", f"{name}: no {PRESETS[name]}* among the process's libraries "
                                           f"({', '.join(map(os.path.basename, libraries)) or 'none'})")
    probes = _probes(path, ALLOCATOR_FUNCTIONS + PRESET_FUNCTIONS.get(name, ()))
    found = {p.symbol for p in probes}
    missing = [f for f in REQUIRED if f not in found]
    if missing:
        raise ConfigError("library" if library else "allocator",
                          f"{path} exports no {' or '.join(missing)}: not an allocator library")
    for mapper in dict.fromkeys([path, _find(libraries, PRESETS["glibc"])]):
        if mapper:
            probes += _probes(mapper, MAPPING_FUNCTIONS)
    for cxx in dict.fromkeys([path, _find(libraries, CXX_LIBRARY)]):
        if cxx:
            probes += _probes(cxx, CXX_FUNCTIONS)
    return Plan(name, path, tuple(_with_returns(_one_per_address(probes))))


def _detect(libraries: list[str]) -> str:
    return next((n for n in DETECTED_FIRST if _find(libraries, PRESETS[n])), "glibc")


def _find(libraries: list[str], prefix: str) -> str | None:
    return next((p for p in libraries if os.path.basename(p).startswith(prefix)), None)


def _probes(path: str, functions) -> list[Probe]:
    """A probe for each function ``path`` exports (only its own symbols are read: the
    allocator's functions are exported, and a stripped library's debug file is slow to read)."""
    from ...engine.symbols import SymbolError, elf_symbol_offset

    probes = []
    for symbol, program in functions:
        try:
            probes.append(Probe(path, symbol, elf_symbol_offset(path, symbol, debug_file=False), program))
        except (SymbolError, OSError):
            continue
    return probes


def _one_per_address(probes: list[Probe]) -> list[Probe]:
    """The first probe at each address of a file: aliases (glibc's aligned_alloc and memalign;
    tcmalloc's operator new and malloc, operator delete and free) would otherwise run two
    programs for one call, and the allocator's own name wins over the C++ one."""
    seen, kept = set(), []
    for probe in probes:
        if (probe.path, probe.offset) not in seen:
            seen.add((probe.path, probe.offset))
            kept.append(probe)
    return kept


def _with_returns(probes: list[Probe]) -> list[Probe]:
    """Every allocating function also gets the uretprobe recording what it returned. A free has
    only its entry probe, so that one can go where it costs least (glibc's free: past its first
    instruction, which the kernel would single-step, see engine/uprobe_sites.py); an allocating
    function's entry probe shares its place with the uretprobe, which must be the first byte."""
    from ...engine.uprobe_sites import entry_offset

    frees = {"free_enter", "delete_enter", "munmap_enter"}
    returns = [Probe(p.path, p.symbol, p.offset, RETURNS, retprobe=True)
               for p in probes if p.program not in frees]
    entries = [replace(p, offset=entry_offset(p.path, p.offset)) if p.program in frees else p for p in probes]
    return entries + returns
