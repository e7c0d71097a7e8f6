"""USDT probes: the statically defined probes a program or library declares in SystemTap's
ELF notes (``.note.stapsdt``; Python, the JVM, libc, databases carry them). This module lists
them (which binary, provider, name, address, semaphore, argument specs); attaching is
libbpf's (``bpf_program__attach_usdt``, links.usdt), which reads the same notes, sets the
semaphores through the kernel's uprobe reference counter, and decodes the arguments for the
program's side (``bpf_usdt_arg()`` of <bpf/usdt.bpf.h>)."""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from .symbols import SHT_NOTE, ElfSymbols, SymbolError

NT_STAPSDT = 3


class UsdtProbe(NamedTuple):
    path: str
    provider: str
    name: str
    pc: int         # the probe's address, a virtual address of the file
    semaphore: int  # the address of its enable counter (0: none)
    args: str       # the argument specs, e.g. "-4@%edi 8@-16(%rbp)": size@where, signed if negative

    @property
    def arg_sizes(self) -> list[int]:
        """Each argument's size in bytes, negative for a signed one."""
        return [int(spec.split("@", 1)[0]) for spec in self.args.split()]


class _Notes(ElfSymbols):
    """Only an ELF file's SDT notes (no symbols are read)."""

    def _read(self, f) -> None:
        sections = self._read_layout(f)
        base = next((s.addr for s in sections if s.name == ".stapsdt.base"), None)
        self.probes = []
        for sec in sections:
            if sec.type == SHT_NOTE and sec.name == ".note.stapsdt":
                self.probes += _parse(self._read_at(f, sec.offset, sec.size), self._end, self.path, base)


def _parse(data: bytes, end: str, path: str, actual_base: int | None) -> list[UsdtProbe]:
    probes, at = [], 0
    while at + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from(end + "III", data, at)
        name_at = at + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        at = desc_at + ((descsz + 3) & ~3)
        if kind != NT_STAPSDT or data[name_at:name_at + namesz].rstrip(b"\0") != b"stapsdt":
            continue
        desc = data[desc_at:desc_at + descsz]
        pc, note_base, semaphore = struct.unpack_from(end + "QQQ", desc)
        provider, name, args = (desc[24:].split(b"\0") + [b"", b""])[:3]
        if actual_base is not None:  # the file was prelinked (moved) after the notes were written
            shift = actual_base - note_base
            pc += shift
            semaphore = semaphore + shift if semaphore else 0
        probes.append(UsdtProbe(path, provider.decode(), name.decode(), pc, semaphore, args.decode()))
    return probes


def probes_in(path: str) -> list[UsdtProbe]:
    """Every USDT probe ``path`` declares (none for a file that is not ELF64)."""
    try:
        return _Notes(path).probes
    except (OSError, SymbolError, struct.error):
        return []


def binaries_of(pid: int) -> list[str]:
    """The files process ``pid`` maps executable (its program and libraries), as paths this
    process can open (through the process's root when it lives in another mount namespace)."""
    paths: list[str] = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) == 6 and "x" in fields[1] and fields[5].startswith("/"):
                path = fields[5].rstrip("\n")
                if path.endswith(" (deleted)"):
                    continue
                if not os.path.exists(path):
                    path = f"/proc/{pid}/root{path}"
                if path not in paths:
                    paths.append(path)
    return paths


def find(name: str, provider: str | None = None, path: str | None = None, pid: int | None = None) -> list[UsdtProbe]:
    """The probes called ``name`` (of ``provider`` when given) in ``path``, or in the files
    process ``pid`` maps: one per place the probe is written."""
    places = [path] if path else binaries_of(pid) if pid else []
    return [p for place in places for p in probes_in(place)
            if p.name == name and (provider is None or p.provider == provider)]
