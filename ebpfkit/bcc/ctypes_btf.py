"""ctypes classes made from BTF: BCC's tables hand out keys, values and events as ctypes
objects (``k.value``, ``event.pid``, ``bytes(event.comm)``), so scripts written for BCC
read them unchanged. The layout is BTF's: each member at its offset."""

from __future__ import annotations

import ctypes

from ..engine.btftypes import BTF, Kind

_INTS = {(1, False): ctypes.c_uint8, (1, True): ctypes.c_int8, (2, False): ctypes.c_uint16,
         (2, True): ctypes.c_int16, (4, False): ctypes.c_uint32, (4, True): ctypes.c_int32,
         (8, False): ctypes.c_uint64, (8, True): ctypes.c_int64}


def ctype(btf: BTF, type_id: int, _cache: dict | None = None):
    """The ctypes type of BTF type ``type_id`` (of ``btf``)."""
    cache = btf.__dict__.setdefault("_ek_ctypes", {}) if _cache is None else _cache
    tid = btf.resolve(type_id)
    if tid not in cache:
        cache[tid] = _build(btf, tid, cache)
    return cache[tid]


def _build(btf: BTF, tid: int, cache: dict):
    t = btf.type(tid)
    if t.kind == Kind.INT:
        if t.name == "char":  # as BCC: char is c_char (bytes), unsigned char / u8 a number
            return ctypes.c_char
        if t.size == 16:
            return ctypes.c_uint8 * 16
        return _INTS[(t.size, t.signed)]
    if t.kind in (Kind.ENUM, Kind.ENUM64):
        return _INTS[(t.size, t.signed)]
    if t.kind == Kind.PTR:
        return ctypes.c_uint64
    if t.kind == Kind.FLOAT:
        return ctypes.c_double if t.size == 8 else ctypes.c_float
    if t.kind == Kind.ARRAY:
        return ctype(btf, t.type_id, cache) * t.nelems
    if t.kind in (Kind.STRUCT, Kind.UNION):
        return _record(btf, t, cache)
    if t.kind == Kind.VOID:
        return ctypes.c_uint8 * 0
    raise TypeError(f"no ctypes type for BTF {t.kind.name} '{btf.type_str(tid)}'")


def _record(btf: BTF, t, cache: dict):
    """A Structure (or Union) with BTF's offsets: padding fields fill the gaps."""
    base = ctypes.Union if t.kind == Kind.UNION else ctypes.Structure
    cls = type(t.name or f"anon_{t.id}", (base,), {"_pack_": 1})
    cache[t.id] = cls  # a member pointing back at this struct is only a c_uint64: no recursion
    fields, at, pad = [], 0, 0
    for m in t.members:
        if m.bitfield_size or m.bit_offset % 8:
            continue  # bitfields: left out (BCC's events rarely have them)
        offset = m.bit_offset // 8
        if base is ctypes.Structure and offset > at:
            fields.append((f"__pad{pad}", ctypes.c_uint8 * (offset - at)))
            pad += 1
        member = ctype(btf, m.type_id, cache)
        fields.append((m.name or f"__anon{pad}", member))
        pad += not m.name
        at = max(at, offset + ctypes.sizeof(member)) if base is ctypes.Structure else 0
    if base is ctypes.Structure and t.size > at:
        fields.append((f"__pad{pad}", ctypes.c_uint8 * (t.size - at)))
    cls._fields_ = fields
    return cls
