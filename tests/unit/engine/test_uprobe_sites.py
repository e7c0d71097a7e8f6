"""engine/uprobe_sites: an entry probe moves past a register compare only when a conditional
jump follows it; everything else stays on the function's first byte."""

from __future__ import annotations

import platform

import pytest

from ebpfkit.engine.uprobe_sites import entry_offset, flags_only_length, is_conditional_jump

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the instruction shapes are x86-64's")

GLIBC_FREE = bytes.fromhex("4885ff" "0f84c2000000" "55")  # test %rdi,%rdi; je rel32; push %rbp
SHAPES = [
    (GLIBC_FREE, 3),
    (bytes.fromhex("4885ff" "7413"), 3),                # test %rdi,%rdi; je rel8 (jemalloc's sized delete)
    (bytes.fromhex("85ff" "75f0"), 2),                  # test %edi,%edi; jne rel8
    (bytes.fromhex("4839f7" "7f05"), 3),                # cmp %rsi,%rdi; jg rel8
    (bytes.fromhex("84c0" "0f8510000000"), 2),          # test %al,%al; jne rel32
    (bytes.fromhex("4885ff" "55"), 0),                  # test, then a push: no jump to land on
    (bytes.fromhex("48853d10000000" "7405"), 0),        # test %rdi,rip-relative memory: not registers only
    (bytes.fromhex("4889f8" "7405"), 0),                # mov %rdi,%rax writes a register
    (bytes.fromhex("803d0102030400" "7405"), 0),        # cmpb $0,mem (glibc's memalign): memory, immediate
    (bytes.fromhex("4154"), 0),                         # push %r12 (malloc): emulated already
    (b"", 0),
]


@pytest.mark.parametrize("code, moved", SHAPES)
def test_entry_moves_only_past_a_register_compare_before_a_conditional_jump(tmp_path, code, moved):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x90" * 16 + code)
    assert entry_offset(str(lib), 16) == 16 + moved


def test_pieces():
    assert flags_only_length(GLIBC_FREE) == 3 and is_conditional_jump(GLIBC_FREE[3:])
    assert not is_conditional_jump(bytes.fromhex("0f1f00"))  # nopl: 0x0f, but no jcc
    assert flags_only_length(b"\x48") == 0  # cut short


def test_an_unreadable_file_keeps_the_offset(tmp_path):
    assert entry_offset(str(tmp_path / "missing.so"), 1234) == 1234

