"""BCC's ctypes keys and values come out of ebpfkit.bcc.neutral as ebpfkit's engine decodes
the same bytes: ints, str for char arrays, lists, a Struct; BCC's padding fields dropped."""

from __future__ import annotations

import ctypes

from ebpfkit.bcc.neutral import plain
from ebpfkit.engine.btftypes import Struct


class Inner(ctypes.Structure):
    _fields_ = [("count", ctypes.c_uint64), ("slots", ctypes.c_uint32 * 4)]


class Outer(ctypes.Structure):  # what BCC builds for struct { u32 irq; char name[8]; struct inner stat; }
    _fields_ = [("irq", ctypes.c_uint32), ("name", ctypes.c_char * 8), ("__pad_1", ctypes.c_uint8 * 4),
                ("stat", Inner)]


def test_a_struct_becomes_a_struct_of_plain_values():
    value = Outer(7, b"eth0", (ctypes.c_uint8 * 4)(), Inner(3, (ctypes.c_uint32 * 4)(1, 0, 2, 0)))
    got = plain(value)
    assert isinstance(got, Struct) and list(got) == ["irq", "name", "stat"]
    assert got == {"irq": 7, "name": "eth0", "stat": {"count": 3, "slots": [1, 0, 2, 0]}}
    assert got.stat.slots[2] == 2


def test_scalars_strings_and_arrays():
    assert plain(ctypes.c_uint64(2**63)) == 2**63 and plain(ctypes.c_int(-4)) == -4
    assert plain((ctypes.c_char * 6)(*b"ab\0cd")) == "ab"
    assert plain(b"caf\xc3\xa9\0junk") == "café"
    assert plain((ctypes.c_int16 * 3)(1, -2, 3)) == [1, -2, 3]
