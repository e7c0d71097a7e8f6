"""Tests of ebpfkit.engine.symbols without root: ELF parsing checked against nm and readelf
on programs built here with gcc, process maps of our own children, a fake kallsyms and a
fake stack map."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from ebpfkit.engine import symbols as S
from ebpfkit.engine.symbols import (
    ElfExports, ElfSymbols, KernelSymbols, ProcessSymbols, StackTraces, Symbol, SymbolError, Symbolizer,
    elf_entry_file_offset, elf_symbol_offset,
)

pytestmark = pytest.mark.skipif(not all(map(shutil.which, ("gcc", "nm", "readelf"))),
                                reason="needs gcc, nm and readelf")

PROGRAM = r"""
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) int alpha(int x) { return x * 3 + 1; }

__attribute__((noinline)) int beta(int x)
{
    int s = 0;
    for (int i = 0; i < x; i++)
        s += alpha(i);
    return s;
}

int main(int argc, char **argv)
{
    char c;
    printf("%p %p\n", (void *)alpha, (void *)beta);
    fflush(stdout);
    if (read(0, &c, 1) < 0) /* wait until the test is done with us */
        return 2;
    return beta(argc) & 1;
}
"""

LIBRARY = r"""
__attribute__((noinline)) int gamma_fn(int x) { return x * 7 + 3; }
int delta_fn(int x) { return gamma_fn(x) + 1; }
"""

BUILDS = {"pie": ["-fPIE", "-pie"], "nopie": ["-fno-pie", "-no-pie"]}


def _gcc(tmp_path, source: str, out: str, flags) -> str:
    src = tmp_path / (out + ".c")
    src.write_text(source)
    path = str(tmp_path / out)
    subprocess.run(["gcc", "-O1", "-g0", *flags, "-o", path, str(src)], check=True)
    return path


@pytest.fixture(params=sorted(BUILDS))
def program(request, tmp_path):
    return _gcc(tmp_path, PROGRAM, f"prog_{request.param}", BUILDS[request.param])


def _nm(path: str) -> dict[str, int]:
    out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    rows = (ln.split() for ln in out.splitlines())
    return {parts[2]: int(parts[0], 16) for parts in rows if len(parts) == 3}


def _readelf_symbols(path: str) -> dict[str, tuple[int, int]]:
    """name -> (value, size) of FUNC symbols, from readelf -sW."""
    out = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[3] == "FUNC" and parts[6] != "UND":
            found.setdefault(parts[7], (int(parts[1], 16), int(parts[2], 0)))
    return found


def _readelf_loads(path: str) -> list[tuple[int, int, int]]:
    """(offset, vaddr, filesz) of each LOAD program header, from readelf -lW."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True).stdout
    return [(int(p[1], 16), int(p[2], 16), int(p[4], 16))
            for p in (ln.split() for ln in out.splitlines()) if p and p[0] == "LOAD"]


def _file_offset(path: str, vaddr: int) -> int:
    for offset, seg_vaddr, filesz in _readelf_loads(path):
        if seg_vaddr <= vaddr < seg_vaddr + filesz:
            return vaddr - seg_vaddr + offset
    raise AssertionError(f"{vaddr:#x} in no LOAD segment")


@pytest.fixture
def running(program):
    """The program running, blocked on stdin; yields (process, alpha addr, beta addr)."""
    proc = subprocess.Popen([program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        alpha, beta = (int(x, 16) for x in proc.stdout.readline().split())
        yield proc, alpha, beta
    finally:
        proc.kill()
        proc.wait()


# --- ELF files ---

def test_symbol_addresses_match_nm(program):
    elf = ElfSymbols(program)
    nm = _nm(program)
    for name in ("alpha", "beta", "main"):
        assert elf.symbol_vaddr(name) == nm[name]
    assert elf.is_pie_or_shared == program.endswith("_pie")


def test_file_offsets_match_readelf(program):
    funcs = _readelf_symbols(program)
    for name in ("alpha", "beta", "main"):
        assert elf_symbol_offset(program, name) == _file_offset(program, funcs[name][0])


def test_entry_file_offset_matches_readelf(program):
    out = subprocess.run(["readelf", "-hW", program], capture_output=True, text=True, check=True).stdout
    entry = int(next(ln for ln in out.splitlines() if "Entry point" in ln).split()[-1], 16)
    assert elf_entry_file_offset(program) == _file_offset(program, entry)


def test_segments_match_readelf(program):
    elf = ElfSymbols(program)
    assert [(s.offset, s.vaddr, s.filesz) for s in elf.segments] == _readelf_loads(program)


def test_resolve_vaddr_inside_beta(program):
    elf = ElfSymbols(program)
    beta, size = _readelf_symbols(program)["beta"]
    assert elf.resolve_vaddr(beta) == ("beta", 0)
    assert elf.resolve_vaddr(beta + size - 1) == ("beta", size - 1)
    assert elf.resolve_vaddr(beta + size) != ("beta", size)  # just past the end: not beta


def test_unknown_symbol_and_bad_files(program, tmp_path):
    with pytest.raises(SymbolError, match="no function 'nope'"):
        elf_symbol_offset(program, "nope")
    junk = tmp_path / "junk"
    junk.write_bytes(b"not an elf at all")
    with pytest.raises(SymbolError, match="not an ELF"):
        ElfSymbols(str(junk))
    with pytest.raises(SymbolError, match="cannot open"):
        S.elf_symbols(str(tmp_path / "missing"))
    truncated = tmp_path / "truncated"
    truncated.write_bytes(open(program, "rb").read()[:40])
    with pytest.raises(SymbolError):
        S.elf_symbols(str(truncated))


def test_cache_follows_file_identity(program, tmp_path):
    first = S.elf_symbols(program)
    assert S.elf_symbols(program) is first
    rebuilt = _gcc(tmp_path, PROGRAM.replace("x * 3", "x * 5 + x"), os.path.basename(program), ["-O0"])
    assert rebuilt == program
    assert S.elf_symbols(program) is not first  # a new file (inode/mtime) is parsed again


def test_shared_library_in_this_process(tmp_path):
    lib_path = _gcc(tmp_path, LIBRARY, "libsym_test.so", ["-shared", "-fPIC"])
    lib = ctypes.CDLL(lib_path)
    addr = ctypes.cast(lib.gamma_fn, ctypes.c_void_p).value
    assert elf_symbol_offset(lib_path, "gamma_fn") == _file_offset(lib_path, _nm(lib_path)["gamma_fn"])
    sym = ProcessSymbols(os.getpid()).resolve(addr + 2)
    assert sym == Symbol("gamma_fn", 2, "libsym_test.so")
    assert str(sym) == "gamma_fn+0x2 [libsym_test.so]"


LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


@pytest.mark.skipif(not os.path.exists(LIBC), reason="needs Debian's libc path")
def test_exported_lookup_agrees_with_every_symbol_of_libc():
    """The hash-table lookup (what attaching by name uses) finds every function libc exports at
    the address reading all its symbols gives, versioned names (memcpy@GLIBC_2.2.5) included."""
    exports, full = ElfExports(LIBC), ElfSymbols(LIBC)
    assert exports.has_hash_table and not exports.has_symtab
    names = list(full._by_name)
    assert len(names) > 1000
    assert {n: exports.lookup(n) for n in names} == {n: full.symbol_vaddr(n, False) for n in names}
    assert exports.lookup("no_such_function_here") is None
    assert exports.lookup("stdout") is None  # an object, not a function


@pytest.mark.parametrize("hash_style", ["gnu", "sysv"])
def test_exported_and_local_functions_by_name(tmp_path, hash_style):
    """A library with the GNU hash table and one without (sysv only) give the same offsets as
    nm; a static function is found by reading .symtab, and not at all once stripped."""
    source = LIBRARY + "static __attribute__((noinline, used)) int hidden_fn(int x) { return x - 1; }\n"
    lib = _gcc(tmp_path, source, f"lib_{hash_style}.so", ["-shared", "-fPIC", f"-Wl,--hash-style={hash_style}"])
    assert ElfExports(lib).has_hash_table == (hash_style == "gnu")
    nm = _nm(lib)
    for name in ("gamma_fn", "delta_fn", "hidden_fn"):
        assert elf_symbol_offset(lib, name, debug_file=False) == _file_offset(lib, nm[name])
    stripped = str(tmp_path / f"stripped_{hash_style}.so")
    subprocess.run(["strip", "-o", stripped, lib], check=True)
    assert elf_symbol_offset(stripped, "delta_fn", debug_file=False) == _file_offset(lib, nm["delta_fn"])
    with pytest.raises(SymbolError, match="hidden_fn"):
        elf_symbol_offset(stripped, "hidden_fn", debug_file=False)


# --- processes ---

def test_resolve_in_running_process(running, program):
    proc, alpha, beta = running
    symbols = ProcessSymbols(proc.pid)
    module = os.path.basename(program)
    assert symbols.resolve(beta + 3) == Symbol("beta", 3, module)
    assert symbols.resolve(alpha) == Symbol("alpha", 0, module)
    assert symbols.resolve(beta + 3).format() == f"beta+0x3 [{module}]"


def test_resolve_after_exit_uses_maps_read_before(running, program):
    proc, _, beta = running
    symbolizer = Symbolizer(kernel=KernelSymbols("/nonexistent"))
    symbolizer.remember(proc.pid)
    proc.kill()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie now: its maps read as empty
    symbolizer.process(proc.pid).refresh()
    assert symbolizer.resolve_user(proc.pid, beta + 1) == Symbol("beta", 1, os.path.basename(program))
    proc.wait()
    assert symbolizer.resolve_user(proc.pid, beta + 1) == Symbol("beta", 1, os.path.basename(program))
    assert not symbolizer.resolve_user(proc.pid, 0x10).known


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/map_files needs CAP_SYS_ADMIN")
def test_deleted_binary_resolves_through_map_files(running, program):
    proc, _, beta = running
    os.unlink(program)
    symbols = ProcessSymbols(proc.pid)
    assert symbols.mapping(beta).path.endswith(" (deleted)")
    assert symbols.resolve(beta + 3) == Symbol("beta", 3, os.path.basename(program))


def test_unknown_process_and_address():
    symbolizer = Symbolizer(kernel=KernelSymbols("/nonexistent"))
    assert symbolizer.resolve_user(2 ** 22 + 12345, 0x401000) == Symbol(S.UNKNOWN, 0x401000, None)
    assert str(Symbol(S.UNKNOWN, 0x401000, None)) == "[unknown] 0x401000"


def test_stripped_binary_names_the_module(program, tmp_path):
    stripped = str(tmp_path / "stripped")
    subprocess.run(["strip", "-o", stripped, program], check=True)
    assert ElfSymbols(stripped).symbol_vaddr("beta") is None
    beta_offset = _file_offset(program, _nm(program)["beta"])  # strip keeps the layout
    proc = subprocess.Popen([stripped], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        beta = int(proc.stdout.readline().split()[1], 16)
        sym = ProcessSymbols(proc.pid).resolve(beta + 2)
    finally:
        proc.kill()
        proc.wait()
    assert sym == Symbol(S.UNKNOWN, beta_offset + 2, "stripped")
    assert sym.format() == f"[unknown] [stripped+{beta_offset + 2:#x}]"


def test_read_maps_of_self():
    maps = S.read_maps(os.getpid())
    assert maps == sorted(maps)
    assert os.path.realpath("/proc/self/exe") in {m.path for m in maps}  # only executable ones
    assert all(m.start < m.end for m in maps)


# --- kernel symbols (a fake kallsyms) ---

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t helper_b
ffffffff81000800 T vfs_read
ffffffff81002000 D some_data
ffffffff81003000 W weak_fn
ffffffffc0001000 t mod_fn\t[ext4]
ffffffffc0002000 T mod_last\t[xfs]
"""


def test_kallsyms_parsing(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    k = KernelSymbols(str(path))
    assert k.available and not k.restricted and len(k) == 7  # the data symbol is skipped
    assert k.resolve(0xFFFFFFFF81000812) == Symbol("vfs_read", 0x12, None)
    assert str(k.resolve(0xFFFFFFFF81000812)) == "vfs_read+0x12"
    assert k.resolve(0xFFFFFFFF81001004).name == "helper_b"  # out of order in the file
    assert k.resolve(0xFFFFFFFF81002010) == Symbol("helper_b", 0x1010, None)  # data is not text
    assert k.resolve(0xFFFFFFFF81003001).name == "weak_fn"
    assert str(k.resolve(0xFFFFFFFFC0001010)) == "mod_fn+0x10 [ext4]"
    assert k.resolve(0xFFFFFFFFC0002000) == Symbol("mod_last", 0, "xfs")
    assert k.resolve(0x1000) == Symbol(S.UNKNOWN, 0x1000, None)
    assert k.address("vfs_read") == 0xFFFFFFFF81000800 and k.address("some_data") is None
    assert "weak_fn" in k and "some_data" not in k


def test_kallsyms_hidden_addresses_are_reported(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text("".join("0000000000000000" + line[16:] + "\n" for line in KALLSYMS.splitlines()))
    k = KernelSymbols(str(path))
    assert not k.available and k.restricted
    assert "every address as 0" in k.problem and "kptr_restrict" in k.problem
    assert not k.resolve(0xFFFFFFFF81000812).known


def test_kallsyms_unreadable(tmp_path):
    k = KernelSymbols(str(tmp_path / "missing"))
    assert not k.available and "cannot read" in k.problem


def test_real_kallsyms_if_readable():
    k = KernelSymbols()
    if not k.available:
        pytest.skip(k.problem)
    addr = k.address("vfs_read")
    assert addr and k.resolve(addr + 5) == Symbol("vfs_read", 5, None)


# --- stack trace maps (a fake map: dict of id -> raw value bytes) ---

def _raw_stack(*ips, depth=127) -> bytes:
    return b"".join(ip.to_bytes(8, "little") for ip in ips).ljust(depth * 8, b"\0")


def test_stack_traces_get_and_symbolize(tmp_path):
    path = tmp_path / "kallsyms"
    path.write_text(KALLSYMS)
    fake = {7: _raw_stack(0xFFFFFFFF81000812, 0xFFFFFFFFC0001010), 8: [0xFFFFFFFF81001004, 0, 5]}
    stacks = StackTraces(fake, Symbolizer(kernel=KernelSymbols(str(path))))
    assert stacks.get(7) == [0xFFFFFFFF81000812, 0xFFFFFFFFC0001010]
    assert stacks.get(8) == [0xFFFFFFFF81001004]  # a decoded u64 array works too; zeros end it
    assert stacks.symbolize(7) == ["vfs_read+0x12", "mod_fn+0x10 [ext4]"]
    for no_stack in (-14, -17, 0xFFFFFFF2, None, 99):  # -EFAULT, -EEXIST, as u32, missing
        assert stacks.get(no_stack) == [] and stacks.symbolize(no_stack) == []
    stacks.delete(7)
    assert 7 not in fake
    stacks.delete(-14)


def test_stack_traces_user_frames(running, program):
    proc, alpha, beta = running
    stacks = StackTraces({1: _raw_stack(alpha + 4, beta + 9)},
                         Symbolizer(kernel=KernelSymbols("/nonexistent")))
    module = os.path.basename(program)
    assert stacks.symbolize(1, pid=proc.pid, kernel=False) == [f"alpha+0x4 [{module}]",
                                                               f"beta+0x9 [{module}]"]
    assert stacks.symbolize(1, kernel=False) == [f"[unknown] {alpha + 4:#x}", f"[unknown] {beta + 9:#x}"]
