"""Where an entry uprobe costs least.

A uprobe replaces an instruction by a breakpoint. When it is hit, x86's uprobes emulate a
few instructions (jumps, calls, conditional jumps, pushes) and execute every other one out of
line, single-stepped: two more exceptions, which in a virtual machine cost microseconds (on this
project's KVM hosts ~9.5 us, against ~0.5 us for an emulated one). glibc's free() begins
`test %rdi,%rdi; je ...`: a probe on the conditional jump sees the registers and memory a
probe on the first byte would (the test writes only the flags, which no probe reads), and its
instruction is emulated.

The probe then also fires when code elsewhere jumps straight to that conditional jump. Compilers
do not jump to a branch whose flags come from the instruction before it, and the move is made
only for that shape, so for an entry probe the two places are the same.
"""

from __future__ import annotations

import os

_REX = range(0x40, 0x50)
_FLAGS_ONLY = {0x84, 0x85, 0x38, 0x39, 0x3a, 0x3b}  # test r/m,r and cmp, 8/32/64-bit
_SHORT_JCC = range(0x70, 0x80)
_NEAR_JCC = range(0x80, 0x90)  # after 0x0f


def entry_offset(path: str, offset: int) -> int:
    """The offset (in ``path``, as uprobes take it) to put an entry probe at for the function at
    ``offset``: past a first instruction that only compares two registers when a conditional
    jump follows it; else ``offset`` itself. Only on x86-64; an unreadable file keeps ``offset``."""
    if os.uname().machine != "x86_64":
        return offset
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            code = f.read(8)
    except OSError:
        return offset
    skip = flags_only_length(code)
    return offset + skip if skip and is_conditional_jump(code[skip:]) else offset


def flags_only_length(code: bytes) -> int:
    """Length of ``code``'s first instruction if it is a register-to-register test or cmp (it
    writes only the flags), else 0."""
    i = 1 if code[:1] and code[0] in _REX else 0
    if len(code) < i + 2 or code[i] not in _FLAGS_ONLY:
        return 0
    return i + 2 if code[i + 1] >> 6 == 3 else 0  # ModRM mod 3: both operands registers


def is_conditional_jump(code: bytes) -> bool:
    return bool(code) and (code[0] in _SHORT_JCC or (len(code) > 1 and code[0] == 0x0F and code[1] in _NEAR_JCC))
