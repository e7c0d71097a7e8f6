"""USDT notes as SystemTap's <sys/sdt.h> writes them (.note.stapsdt), read by engine/usdt.py:
the probe's place, semaphore and argument specs, moved with the file when it was prelinked."""

from __future__ import annotations

import struct

from ebpfkit.engine.usdt import UsdtProbe, _parse


def note(pc: int, base: int, semaphore: int, provider: str, name: str, args: str, kind: int = 3,
         owner: bytes = b"stapsdt\0") -> bytes:
    desc = struct.pack("<QQQ", pc, base, semaphore) + f"{provider}\0{name}\0{args}\0".encode()
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(owner), len(desc), kind) + pad(owner) + pad(desc)


def test_each_note_is_a_probe_with_its_place_semaphore_and_argument_sizes():
    data = note(0x4F20A1, 0x6D2000, 0xA84260, "python", "function__entry", "8@%rbp 8@%r12 -4@%eax") + \
        note(0x1000, 0x6D2000, 0, "libc", "setjmp", "") + \
        note(0x2000, 0x6D2000, 0, "x", "y", "", kind=1) + \
        note(0x3000, 0x6D2000, 0, "x", "z", "", owner=b"GNU\0")
    probes = _parse(data, "<", "/bin/x", actual_base=None)
    assert probes == [UsdtProbe("/bin/x", "python", "function__entry", 0x4F20A1, 0xA84260, "8@%rbp 8@%r12 -4@%eax"),
                      UsdtProbe("/bin/x", "libc", "setjmp", 0x1000, 0, "")]
    assert probes[0].arg_sizes == [8, 8, -4] and probes[1].arg_sizes == []


def test_a_prelinked_file_moves_its_probes_and_semaphores_with_its_base():
    data = note(0x4F20A1, 0x6D2000, 0xA84260, "python", "gc__start", "-4@%eax") + \
        note(0x1000, 0x6D2000, 0, "libc", "setjmp", "")
    moved = _parse(data, "<", "/bin/x", actual_base=0x6D3000)
    assert [(p.pc, p.semaphore) for p in moved] == [(0x4F30A1, 0xA85260), (0x2000, 0)]
