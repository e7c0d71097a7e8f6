"""Symbols for stack traces, engine-neutral.

Kernel addresses resolve through /proc/kallsyms (parsed once, on first use); user addresses
through /proc/PID/maps and the ELF symbol tables of the mapped files, parsed here with
``struct`` so nothing heavy is imported. ``StackTraces`` reads a BPF_MAP_TYPE_STACK_TRACE map::

    stacks = StackTraces(obj.maps["stacks"])
    for frame in stacks.symbolize(user_stack_id, pid=pid, kernel=False):
        print(frame)                                  # e.g. "spin_here+0x1c [spin]"
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import sys
import threading
import time
from array import array
from collections import OrderedDict
from typing import NamedTuple

from ..errors import EbpfkitError

log = logging.getLogger("ebpfkit.engine.symbols")

UNKNOWN = "[unknown]"


class SymbolError(EbpfkitError, LookupError):
    """A file is not a usable ELF file, or a symbol is not in it."""


class Symbol(NamedTuple):
    """``name`` + ``offset`` inside ``module`` (a kernel module, or a file's basename).

    For an unknown address, ``offset`` is the file offset inside ``module`` when the
    mapping is known, else the raw address."""

    name: str
    offset: int
    module: str | None = None

    @property
    def known(self) -> bool:
        return self.name != UNKNOWN

    def format(self, module: bool = True) -> str:
        if not self.known:
            where = f"[{self.module}+{self.offset:#x}]" if self.module else f"{self.offset:#x}"
            return f"{UNKNOWN} {where}"
        text = f"{self.name}+{self.offset:#x}"
        return f"{text} [{self.module}]" if module and self.module else text

    def __str__(self) -> str:
        return self.format()


# --------------------------------------------------------------------------------------------
# kernel
# --------------------------------------------------------------------------------------------

_TEXT_KINDS = frozenset("tTwW")  # code; data symbols never appear in a stack


class KernelSymbols:
    """Text symbols of /proc/kallsyms: a sorted ``array('Q')`` of addresses and a name list."""

    def __init__(self, path: str = "/proc/kallsyms"):
        self.path = path
        self._lock = threading.Lock()
        self._addrs: array | None = None
        self._names: list[str] = []
        self._modules: dict[int, str] = {}  # index -> module name, only for module symbols
        self.restricted = False
        self.problem: str | None = None  # why kernel addresses cannot be resolved, if so
        self.load_seconds = 0.0

    def _ensure(self) -> array:
        if self._addrs is None:
            with self._lock:
                if self._addrs is None:
                    self._load()
        return self._addrs

    def reload(self) -> None:
        """Parse again (e.g. to see modules or BPF programs loaded since)."""
        with self._lock:
            self._load()

    def _load(self) -> None:
        start = time.perf_counter()
        try:
            with open(self.path, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError as exc:
            self._set_empty(f"cannot read {self.path}: {exc.strerror}")
            return
        addrs, names, modules = _parse_kallsyms(text)
        if addrs and not any(addrs):
            self._set_empty(f"{self.path} shows every address as 0 (kernel.kptr_restrict="
                            f"{_read_first_line('/proc/sys/kernel/kptr_restrict') or '?'}, uid "
                            f"{os.geteuid()}): kernel stacks cannot be symbolized; run as root, or "
                            f"`sysctl kernel.kptr_restrict=0`")
            self.restricted = True
            return
        self._names, self._modules, self.problem, self.restricted = names, modules, None, False
        self._addrs = addrs
        self.load_seconds = time.perf_counter() - start

    def _set_empty(self, problem: str) -> None:
        log.warning("%s", problem)
        self.problem = problem
        self._names, self._modules = [], {}
        self._addrs = array("Q")

    @property
    def available(self) -> bool:
        """True when addresses can be resolved (kallsyms readable, addresses not hidden)."""
        return len(self._ensure()) > 0

    def __len__(self) -> int:
        return len(self._ensure())

    def resolve(self, addr: int) -> Symbol:
        addrs = self._ensure()
        i = bisect.bisect_right(addrs, addr) - 1
        if i < 0:
            return Symbol(UNKNOWN, addr, None)
        return Symbol(self._names[i], addr - addrs[i], self._modules.get(i))

    def address(self, name: str) -> int | None:
        """The address of the text symbol ``name`` (first one, if there are several)."""
        addrs = self._ensure()
        try:
            return addrs[self._names.index(name)]
        except ValueError:
            return None

    def __contains__(self, name: str) -> bool:
        self._ensure()
        return name in self._names

    def names(self) -> set[str]:
        self._ensure()
        return set(self._names)


def _parse_kallsyms(text: str) -> tuple[array, list[str], dict[int, str]]:
    """Lines are "<hex addr> <kind> <name>[\\t[module]]"; the address column is fixed width."""
    width = text.find(" ")
    if width <= 0:
        return array("Q"), [], {}
    kind_at, name_at = width + 1, width + 3
    lines = [ln for ln in text.split("\n") if len(ln) > name_at and ln[kind_at] in _TEXT_KINDS]
    # all addresses at once: hex -> big-endian bytes -> native u64 (much faster than int() per line)
    addrs = array("Q")
    addrs.frombytes(bytes.fromhex("".join([ln[:width].rjust(16, "0") for ln in lines])))
    if sys.byteorder == "little":
        addrs.byteswap()
    names = [ln[name_at:] for ln in lines]
    modules = {}
    for i, name in enumerate(names):
        if "\t" in name:
            names[i], _, mod = name.partition("\t")
            modules[i] = mod.strip().strip("[]")
    if any(a > b for a, b in zip(addrs, addrs[1:])):
        order = sorted(range(len(addrs)), key=addrs.__getitem__)
        addrs = array("Q", [addrs[i] for i in order])
        modules = {new: modules[old] for new, old in enumerate(order) if old in modules}
        names = [names[i] for i in order]
    return addrs, names, modules


def _read_first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return None


_kernel: KernelSymbols | None = None


def kernel_symbols() -> KernelSymbols:
    """The process-wide KernelSymbols (kallsyms is parsed once, on first resolve)."""
    global _kernel
    if _kernel is None:
        _kernel = KernelSymbols()
    return _kernel


# --------------------------------------------------------------------------------------------
# ELF files
# --------------------------------------------------------------------------------------------

PT_LOAD = 1
PF_X = 1
SHT_SYMTAB, SHT_DYNSYM, SHT_NOTE, SHT_GNU_HASH, SHT_GNU_VERSYM = 2, 11, 7, 0x6FFFFFF6, 0x6FFFFFFF
STT_FUNC, STT_GNU_IFUNC = 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
_BIND_RANK = {STB_GLOBAL: 0, STB_WEAK: 1, STB_LOCAL: 2}
_DEBUG_DIR = "/usr/lib/debug/.build-id"


class Segment(NamedTuple):
    offset: int
    vaddr: int
    filesz: int
    memsz: int
    flags: int


class _Section(NamedTuple):
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


class ElfSymbols:
    """The function symbols of one ELF64 file and its PT_LOAD segments.

    Symbols are kept by virtual address (as the file states them); ``file_offset_to_vaddr``
    maps an address of a running process to them, whatever the load bias (PIE, .so)."""

    identity: tuple | None = None  # (device, inode, mtime, size), set by elf_symbols()

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            self._read(f)
        self._debug_file_indexed = False  # read on the first query .dynsym may not answer

    # --- parsing ---

    def _read(self, f) -> None:
        sections = self._read_layout(f)
        self._build_id = self._read_build_id(f, sections)
        self._collect(f, sections)

    def _read_layout(self, f) -> list[_Section]:
        """The ELF header's facts, the loadable segments (kept) and the sections (returned)."""
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF":
            raise SymbolError(f"{self.path} is not an ELF file")
        if ident[4] != 2:
            raise SymbolError(f"{self.path} is a 32-bit ELF file; only ELF64 is supported")
        self._end = "<" if ident[5] == 1 else ">"
        (self.type, self.machine, _, self.entry, phoff, shoff, _, _, phentsize, phnum, shentsize,
         shnum, shstrndx) = struct.unpack(self._end + "HHIQQQIHHHHHH", f.read(48))
        self.segments = self._read_segments(f, phoff, phentsize, phnum)
        return self._read_sections(f, shoff, shentsize, shnum, shstrndx)

    def _read_segments(self, f, phoff: int, entsize: int, count: int) -> list[Segment]:
        f.seek(phoff)
        data = f.read(entsize * count)
        segments = []
        for i in range(count):
            p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from(
                self._end + "IIQQQQQQ", data, i * entsize)
            if p_type == PT_LOAD:
                segments.append(Segment(p_offset, p_vaddr, p_filesz, p_memsz, p_flags))
        return segments

    def _read_sections(self, f, shoff: int, entsize: int, count: int, strndx: int) -> list[_Section]:
        if not shoff:
            return []
        fmt = self._end + "IIQQQQIIQQ"
        f.seek(shoff)
        first = f.read(entsize)
        if len(first) < entsize:
            return []
        if count == 0:  # more than 0xff00 sections: the real count is in section 0
            count = struct.unpack_from(fmt, first)[5]
        if strndx == 0xFFFF:
            strndx = struct.unpack_from(fmt, first)[6]
        data = first + f.read(entsize * (count - 1))
        raw = [struct.unpack_from(fmt, data, i * entsize) for i in range(len(data) // entsize)]
        names = self._read_at(f, raw[strndx][4], raw[strndx][5]) if strndx < len(raw) else b""
        return [_Section(_cstr(names, r[0]), r[1], r[3], r[4], r[5], r[6]) for r in raw]

    @staticmethod
    def _read_at(f, offset: int, size: int) -> bytes:
        f.seek(offset)
        return f.read(size)

    def _read_build_id(self, f, sections: list[_Section]) -> str | None:
        for sec in sections:
            if sec.type == SHT_NOTE and sec.name == ".note.gnu.build-id":
                note = self._read_at(f, sec.offset, sec.size)
                namesz, descsz, _ = struct.unpack_from(self._end + "III", note)
                start = 12 + ((namesz + 3) & ~3)
                return note[start:start + descsz].hex()
        return None

    def _collect(self, f, sections: list[_Section]) -> None:
        """Function symbols of .symtab and .dynsym: one name per address, every name findable."""
        best: dict[int, tuple] = {}  # vaddr -> (rank, name, size)
        self._by_name: dict[str, tuple] = {}  # name -> (rank, vaddr)
        self.has_symtab = any(sec.type == SHT_SYMTAB for sec in sections)
        for sec in sections:
            if sec.type not in (SHT_SYMTAB, SHT_DYNSYM) or sec.link >= len(sections):
                continue
            strtab = sections[sec.link]
            strings = self._read_at(f, strtab.offset, strtab.size)
            table = self._read_at(f, sec.offset, sec.size)
            hidden = self._hidden_versions(f, sections, len(table) // 24) if sec.type == SHT_DYNSYM else None
            self._add_symbols(table, strings, hidden, best)
        self._set_table(best)

    def _hidden_versions(self, f, sections: list[_Section], count: int) -> bytes | None:
        """Which .dynsym entries are non-default symbol versions (memcpy@GLIBC_2.2.5)."""
        for sec in sections:
            if sec.type == SHT_GNU_VERSYM:
                versym = array("H", self._read_at(f, sec.offset, min(sec.size, count * 2)))
                if (self._end == "<") != (sys.byteorder == "little"):
                    versym.byteswap()
                return bytes(1 if v & 0x8000 else 0 for v in versym)
        return None

    def _add_symbols(self, table: bytes, strings: bytes, hidden: bytes | None, best: dict) -> None:
        fmt = self._end + "IBBHQQ"
        entries = struct.iter_unpack(fmt, table[:len(table) // 24 * 24])
        for i, (st_name, info, _, shndx, value, size) in enumerate(entries):
            if (info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC) or shndx == 0 or value == 0:
                continue
            name = _cstr(strings, st_name)
            if not name:
                continue
            is_hidden = bool(hidden and i < len(hidden) and hidden[i])
            rank = (is_hidden, _BIND_RANK.get(info >> 4, 3), name.startswith("_"), len(name))
            old = best.get(value)
            if old is None or rank < old[0]:
                best[value] = (rank, name, max(size, old[2]) if old else size)
            elif size > old[2]:
                best[value] = (old[0], old[1], size)
            known = self._by_name.get(name)
            if known is None or rank < known[0]:
                self._by_name[name] = (rank, value)

    def _set_table(self, best: dict) -> None:
        starts = sorted(best)
        self._starts = array("Q", starts)
        self._sizes = array("Q", [best[a][2] for a in starts])
        self._names = [best[a][1] for a in starts]

    def _index_extra_debug_file(self) -> None:
        """No .symtab (a stripped library): use a separate debug file if one is installed. Done
        once, at the first address resolved or name .dynsym lacks: a uprobe on an exported
        function needs only .dynsym, and libc's debug file takes ~30 ms to read."""
        if self._debug_file_indexed:
            return
        self._debug_file_indexed = True
        if self.has_symtab or not self._build_id or len(self._build_id) < 3:
            return
        path = os.path.join(_DEBUG_DIR, self._build_id[:2], self._build_id[2:] + ".debug")
        if not os.path.exists(path):
            return
        try:
            debug = ElfSymbols.__new__(ElfSymbols)
            debug.path = path
            with open(path, "rb") as f:
                debug._read(f)
        except (OSError, SymbolError, struct.error):
            return
        if len(debug._starts) > len(self._starts):
            self._starts, self._sizes, self._names = debug._starts, debug._sizes, debug._names
            for name, entry in debug._by_name.items():
                self._by_name.setdefault(name, entry)

    # --- queries ---

    def __len__(self) -> int:
        self._index_extra_debug_file()
        return len(self._starts)

    @property
    def is_pie_or_shared(self) -> bool:
        return self.type == 3  # ET_DYN

    def resolve_vaddr(self, vaddr: int) -> tuple[str, int] | None:
        """(function name, offset) of the function containing ``vaddr``, or None."""
        self._index_extra_debug_file()
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        start, size = self._starts[i], self._sizes[i]
        # a size-0 symbol (hand-written assembly) owns everything up to the next one
        if size and vaddr >= start + size:
            return None
        return self._names[i], vaddr - start

    def functions(self) -> list[tuple[str, int]]:
        """Every function name the file (or its debug file) gives, with its address."""
        self._index_extra_debug_file()
        return [(name, entry[1]) for name, entry in self._by_name.items()]

    def symbol_vaddr(self, name: str, debug_file: bool = True) -> int | None:
        """The address of function ``name``; ``debug_file=False``: only as the file itself
        names it (an exported function is always there), without reading a separate debug file."""
        entry = self._by_name.get(name)
        if entry is None and debug_file and not self._debug_file_indexed:
            self._index_extra_debug_file()
            entry = self._by_name.get(name)
        return entry[1] if entry else None

    def file_offset_to_vaddr(self, offset: int) -> int | None:
        for seg in self.segments:
            if seg.offset <= offset < seg.offset + seg.filesz:
                return offset - seg.offset + seg.vaddr
        return None

    def vaddr_to_file_offset(self, vaddr: int) -> int | None:
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        return None


class ElfExports(ElfSymbols):
    """Only what finding an exported function by name needs: .dynsym through the file's GNU hash
    table, read on demand. Reading every symbol takes libc ~10 ms in Python; this, well under one.
    ``lookup`` answers None where the table does not have the name (or the file has no table)."""

    def _collect(self, f, sections: list[_Section]) -> None:
        self.has_symtab = any(sec.type == SHT_SYMTAB for sec in sections)
        self._hash = None
        for sec in sections:
            if sec.type != SHT_GNU_HASH or sec.link >= len(sections):
                continue
            dynsym = sections[sec.link]
            if dynsym.type != SHT_DYNSYM or dynsym.link >= len(sections):
                continue
            strtab = sections[dynsym.link]
            self._hash = self._read_at(f, sec.offset, sec.size)
            self._dynsym = self._read_at(f, dynsym.offset, dynsym.size)
            self._dynstr = self._read_at(f, strtab.offset, strtab.size)
            self._hidden = self._hidden_versions(f, sections, len(self._dynsym) // 24)
            return

    @property
    def has_hash_table(self) -> bool:
        return self._hash is not None

    def lookup(self, name: str) -> int | None:
        """The address of the exported function ``name``, ranked as ``ElfSymbols`` ranks
        (a default version before a hidden one, global before weak)."""
        if self._hash is None:
            return None
        end, table = self._end, self._hash
        nbuckets, symoffset, bloom_size, _ = struct.unpack_from(end + "IIII", table)
        if nbuckets == 0:
            return None
        wanted = name.encode()
        h = 5381
        for byte in wanted:
            h = (h * 33 + byte) & 0xFFFFFFFF
        buckets = 16 + bloom_size * 8
        index = struct.unpack_from(end + "I", table, buckets + (h % nbuckets) * 4)[0]
        if index < symoffset:
            return None
        chains = buckets + nbuckets * 4
        best = None
        while chains + (index - symoffset) * 4 + 4 <= len(table):
            link = struct.unpack_from(end + "I", table, chains + (index - symoffset) * 4)[0]
            if (link | 1) == (h | 1) and index * 24 + 24 <= len(self._dynsym):
                st_name, info, _, shndx, value, _ = struct.unpack_from(end + "IBBHQQ", self._dynsym, index * 24)
                if (info & 0xF) in (STT_FUNC, STT_GNU_IFUNC) and shndx != 0 and value != 0 \
                        and self._dynstr[st_name:st_name + len(wanted) + 1] == wanted + b"\0":
                    hidden = bool(self._hidden and index < len(self._hidden) and self._hidden[index])
                    rank = (hidden, _BIND_RANK.get(info >> 4, 3))
                    if best is None or rank < best[0]:
                        best = (rank, value)
            if link & 1:  # the chain's last entry
                break
            index += 1
        return best[1] if best else None


def _cstr(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset:end if end >= 0 else len(data)].decode(errors="replace")


_ELF_CACHE_SIZE = 256
_elf_cache: OrderedDict = OrderedDict()
_elf_lock = threading.Lock()


def file_identity(path: str) -> tuple:
    """(device, inode, mtime, size) of ``path``: changes when the file is replaced or rewritten."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def elf_symbols(path: str) -> ElfSymbols:
    """Parsed symbols of ``path``, cached by file identity (device, inode, mtime, size)."""
    return _cached(path, ElfSymbols)


def _cached(path: str, kind: type) -> ElfSymbols:
    try:
        key = (kind, *file_identity(path))
    except OSError as exc:
        raise SymbolError(f"cannot open {path}: {exc.strerror}") from None
    with _elf_lock:
        cached = _elf_cache.get(key)
        if cached is not None:
            _elf_cache.move_to_end(key)
            return cached
    try:
        elf = kind(path)
    except OSError as exc:
        raise SymbolError(f"cannot read {path}: {exc.strerror}") from None
    except (struct.error, ValueError, IndexError):
        raise SymbolError(f"{path} is a truncated or malformed ELF file") from None
    elf.identity = key[1:]  # the file's, without the kind
    with _elf_lock:
        _elf_cache[key] = elf
        while len(_elf_cache) > _ELF_CACHE_SIZE:
            _elf_cache.popitem(last=False)
    return elf


def elf_symbol_offset(path: str, name: str, debug_file: bool = True) -> int:
    """File offset of function ``name`` in ``path`` (what a uprobe by offset needs);
    ``debug_file=False`` for a name the file exports, when absence is no error worth a slow look.
    An exported name is found through the file's hash table; others by reading every symbol."""
    exports = _cached(path, ElfExports)
    vaddr = exports.lookup(name)
    if vaddr is not None:
        elf = exports
    elif exports.has_hash_table and not exports.has_symtab and not debug_file:
        elf = None  # a stripped file: what .dynsym lacks, it does not have
    else:
        elf = elf_symbols(path)
        vaddr = elf.symbol_vaddr(name, debug_file)
    if vaddr is None:
        raise SymbolError(f"no function '{name}' in {path} (neither .symtab nor .dynsym has it)")
    offset = elf.vaddr_to_file_offset(vaddr)
    if offset is None:
        raise SymbolError(f"function '{name}' of {path} is at {vaddr:#x}, outside every loaded segment")
    return offset


def elf_entry_file_offset(path: str) -> int:
    """File offset of the ELF entry point of ``path``."""
    elf = elf_symbols(path)
    offset = elf.vaddr_to_file_offset(elf.entry)
    if offset is None:
        raise SymbolError(f"the entry point {elf.entry:#x} of {path} is outside every loaded segment")
    return offset


# --------------------------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------------------------

class Mapping(NamedTuple):
    start: int
    end: int
    offset: int
    inode: int
    path: str


class Location(NamedTuple):
    """Where an address of a process lies: its ``module`` (a file's basename, a pseudo mapping
    like [vdso], or None outside every mapping), the ``offset`` inside it (the file offset for
    files, else from the mapping's start, else the raw address), and for a readable ELF file
    the parsed file and the address as the file states it (``vaddr``)."""

    module: str | None
    offset: int
    mapping: Mapping | None = None
    elf: ElfSymbols | None = None
    vaddr: int | None = None


_DELETED = " (deleted)"
_REFRESH_SECONDS = 0.5  # re-read maps on a miss at most this often


def read_maps(pid: int) -> list[Mapping]:
    """Executable mappings of ``pid`` (files and pseudo ones like [vdso]), sorted by start."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 5 or "x" not in parts[1]:
                continue
            lo, _, hi = parts[0].partition("-")
            path = parts[5].rstrip("\n") if len(parts) == 6 else ""
            out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), int(parts[4]), path))
    out.sort()
    return out


class ProcessSymbols:
    """Resolves addresses of one process. Keeps the maps it read, so addresses of a process
    that has exited still resolve through files already known."""

    def __init__(self, pid: int):
        self.pid = pid
        self._maps: list[Mapping] = []
        self._starts: list[int] = []
        self._read_at = 0.0
        self._start_time: str | None = None
        self._elfs: dict[Mapping, tuple] = {}  # mapping -> (ElfSymbols or None, module name)
        self.exited = False
        self.refresh()

    def refresh(self) -> None:
        """Read /proc/PID/maps again (new libraries); keep the old ones if the process is gone."""
        start_time = _process_start_time(self.pid)
        try:
            maps = read_maps(self.pid)
        except OSError:
            maps = []
        if not maps:  # gone, or a zombie (its maps read as empty)
            self.exited = True
            return
        if self._start_time is not None and start_time != self._start_time:
            log.debug("pid %d was reused by another process", self.pid)
            self._elfs.clear()
        self.exited = False
        self._start_time = start_time
        self._maps, self._starts = maps, [m.start for m in maps]
        self._read_at = time.monotonic()

    def mapping(self, addr: int) -> Mapping | None:
        m = self._find(addr)
        if m is None and not self.exited and time.monotonic() - self._read_at > _REFRESH_SECONDS:
            self.refresh()
            m = self._find(addr)
        return m

    def _find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._maps[i].end:
            return self._maps[i]
        return None

    def resolve(self, addr: int) -> Symbol:
        where = self.locate(addr)
        hit = where.elf.resolve_vaddr(where.vaddr) if where.vaddr is not None else None
        if hit is None:
            return Symbol(UNKNOWN, where.offset, where.module)
        return Symbol(hit[0], hit[1], where.module)

    def locate(self, addr: int) -> Location:
        m = self.mapping(addr)
        if m is None:
            return Location(None, addr)
        if not m.path.startswith("/"):
            return Location(m.path or "[anon]", addr - m.start, m)
        elf, module = self._elf(m)
        file_offset = addr - m.start + m.offset
        vaddr = elf.file_offset_to_vaddr(file_offset) if elf else None
        return Location(module, file_offset, m, elf, vaddr)

    def file_candidates(self, m: Mapping) -> tuple[str, ...]:
        """Paths under which the file of mapping ``m`` may be visible (the first may be another
        file by now: check its identity): via /proc (deleted files, containers), else by its path."""
        path = m.path.removesuffix(_DELETED)
        proc = f"/proc/{self.pid}"
        return f"{proc}/map_files/{m.start:x}-{m.end:x}", f"{proc}/root{path}", path

    def _elf(self, m: Mapping) -> tuple[ElfSymbols | None, str]:
        entry = self._elfs.get(m)
        if entry is None:  # once per mapping: saves a stat() per resolve
            entry = self._elfs[m] = (self._open_elf(m), os.path.basename(m.path.removesuffix(_DELETED)))
        return entry

    def _open_elf(self, m: Mapping) -> ElfSymbols | None:
        """The mapped file, found where it is visible, only if it still is the mapped inode
        (files get replaced, pids reused)."""
        for candidate in self.file_candidates(m):
            if not _same_inode(candidate, m.inode):
                continue
            try:
                return elf_symbols(candidate)
            except SymbolError:
                continue
        return None


def _same_inode(path: str, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _process_start_time(pid: int) -> str | None:
    line = _read_first_line(f"/proc/{pid}/stat")
    if not line:
        return None
    fields = line.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None  # field 22 of stat(5)


class Symbolizer:
    """Kernel symbols plus a bounded cache of per-process symbols."""

    def __init__(self, kernel: KernelSymbols | None = None, max_processes: int = 1024):
        self.kernel = kernel or kernel_symbols()
        self._procs: OrderedDict[int, ProcessSymbols] = OrderedDict()
        self._max = max_processes

    def process(self, pid: int) -> ProcessSymbols | None:
        proc = self._procs.get(pid)
        if proc is None:
            proc = ProcessSymbols(pid)
            if proc.exited and not proc._maps:
                return None
            self._procs[pid] = proc
            while len(self._procs) > self._max:
                self._procs.popitem(last=False)
        else:
            self._procs.move_to_end(pid)
        return proc

    def remember(self, pid: int) -> None:
        """Read a process's maps now, so its addresses resolve after it exits."""
        self.process(pid)

    def resolve_user(self, pid: int, addr: int) -> Symbol:
        proc = self.process(pid)
        return proc.resolve(addr) if proc else Symbol(UNKNOWN, addr, None)

    def resolve_kernel(self, addr: int) -> Symbol:
        return self.kernel.resolve(addr)


_default: Symbolizer | None = None


def default_symbolizer() -> Symbolizer:
    global _default
    if _default is None:
        _default = Symbolizer()
    return _default


# --------------------------------------------------------------------------------------------
# stack trace maps
# --------------------------------------------------------------------------------------------

class StackTraces:
    """Reader of a BPF_MAP_TYPE_STACK_TRACE map (ids from ``bpf_get_stackid``)."""

    def __init__(self, stack_map, symbolizer: Symbolizer | None = None):
        self.map = stack_map
        self.symbolizer = symbolizer or default_symbolizer()

    def get(self, stack_id) -> list[int]:
        """Instruction pointers, innermost first; [] for a negative id (no stack recorded)."""
        stack_id = _signed_id(stack_id)
        if stack_id is None or stack_id < 0:
            return []
        try:
            value = self.map[stack_id]
        except KeyError:
            return []
        ips = _u64s(value)
        try:
            return ips[:ips.index(0)]
        except ValueError:
            return ips

    def resolve(self, stack_id, pid: int | None = None, kernel: bool = True) -> list[Symbol]:
        sym = self.symbolizer
        if kernel:
            return [sym.resolve_kernel(ip) for ip in self.get(stack_id)]
        if pid is None:
            return [Symbol(UNKNOWN, ip, None) for ip in self.get(stack_id)]
        return [sym.resolve_user(pid, ip) for ip in self.get(stack_id)]

    def symbolize(self, stack_id, pid: int | None = None, kernel: bool = True) -> list[str]:
        """Formatted frames ("vfs_read+0x12", "main+0x2f [app]"), innermost first."""
        return [s.format() for s in self.resolve(stack_id, pid, kernel)]

    def source_frames(self, stack_id, pid: int | None = None, kernel: bool = True,
                      return_addresses_from: int = 1) -> list:
        """The stack as ``srclines.SourceFrame``s, innermost first: function, file:line where
        debug info has it, inlined frames before the function holding them, module. User
        frames from ``return_addresses_from`` on are return addresses and resolve at their
        call (0 for a stack taken at a uretprobe, where even the first one is)."""
        from .srclines import UNKNOWN_FRAME, kernel_source_frames, user_source_stacks

        ips = self.get(stack_id)
        if kernel:
            return [frames[0] for frames in kernel_source_frames(ips, kernel=self.symbolizer.kernel)]
        if pid is None:
            return [UNKNOWN_FRAME] * len(ips)
        return user_source_stacks(pid, [ips], return_addresses_from=return_addresses_from,
                                  symbolizer=self.symbolizer)[0]

    def delete(self, stack_id) -> None:
        """Free a stack id (the map is not reference counted: a tool frees what it read)."""
        stack_id = _signed_id(stack_id)
        if stack_id is not None and stack_id >= 0:
            try:
                del self.map[stack_id]
            except KeyError:
                pass

    def clear(self) -> None:
        self.map.clear()


def _signed_id(stack_id) -> int | None:
    """A stack id read back through an unsigned field: 0xfffffff2 is -EFAULT."""
    if stack_id is None:
        return None
    stack_id = int(stack_id)
    return stack_id - (1 << 32) if (1 << 31) <= stack_id < (1 << 32) else stack_id


def _u64s(value) -> list[int]:
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        ips = array("Q")
        ips.frombytes(data[:len(data) // 8 * 8])  # map values are in host byte order
        return ips.tolist()
    if isinstance(value, dict):  # a struct with one array field
        value = next(iter(value.values()), [])
    return [int(v) for v in value]
