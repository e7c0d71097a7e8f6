"""A pure-Python reader of BTF (the kernel's BPF Type Format) and a value codec built on it.

The engine decodes map keys/values, ring buffer events and config globals from the
object's own BTF, so no tool needs hand-written ctypes structures. ``BTF.from_bytes``
parses the raw format documented in the kernel's ``Documentation/bpf/btf.rst``
(header, type section, string section); ``codec(btf, type_id)`` compiles a type into a
decoder/encoder pair once and caches it, because events are decoded one by one at high
rates.

Python values: integers <-> int, ``bool`` <-> bool, floats <-> float, ``char[N]`` <-> str,
other arrays <-> list, structs and unions <-> :class:`Struct`, enums <-> :class:`EnumValue`,
pointers <-> int. Values that do not fit raise :class:`~ebpfkit.errors.MapError`.
"""

from __future__ import annotations

import ctypes
import enum
import os
import reprlib
import struct
from collections import namedtuple

from ..errors import LoadError, MapError

BTF_MAGIC = 0xEB9F
POINTER_SIZE = 8  # BPF is a 64-bit target


class Kind(enum.IntEnum):
    VOID = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


# INT encoding bits
INT_SIGNED = 1
INT_CHAR = 2
INT_BOOL = 4

_MODIFIERS = frozenset({Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.TYPE_TAG})
_QUALIFIERS = _MODIFIERS - {Kind.TYPEDEF}  # transparent even for the "char array is a string" rule
_CHAR_NAMES = frozenset({"char", "signed char", "unsigned char"})


# --- parsed records ----------------------------------------------------------------------

# namedtuples from collections, not typing.NamedTuple: typing costs a few ms on every start

# A struct/union member. ``bit_offset`` is from the start of the parent;
# ``bitfield_size`` is 0 for an ordinary member.
Member = namedtuple("Member", "name type_id bit_offset bitfield_size", defaults=(0,))
Enumerator = namedtuple("Enumerator", "name value")
Param = namedtuple("Param", "name type_id")
# A variable of a DATASEC: ``type_id`` is the variable's type (not the VAR record).
Var = namedtuple("Var", "name type_id offset size")

_TYPE_FIELDS = {
    "id": None, "kind": None, "name": "", "size": 0, "type_id": 0, "kind_flag": False, "vlen": 0,
    "encoding": 0, "bits": 0, "int_offset": 0,  # INT
    "index_type_id": 0, "nelems": 0,  # ARRAY
    # STRUCT / UNION / ENUM / ENUM64 / FUNC_PROTO / DATASEC
    "members": (), "enumerators": (), "params": (),
    "vars": (),  # DATASEC: (var_type_id, offset, size) triples
    "linkage": 0, "component_idx": -1,  # VAR/FUNC linkage, DECL_TAG component_idx
}


class Type(namedtuple("_Type", list(_TYPE_FIELDS), defaults=list(_TYPE_FIELDS.values())[2:])):
    """One BTF type record. Fields that do not apply to ``kind`` keep their defaults.

    ``type_id`` is the referenced type (PTR, TYPEDEF, modifiers, FUNC, VAR, DECL_TAG,
    return type of FUNC_PROTO, element type of ARRAY)."""

    __slots__ = ()

    @property
    def signed(self) -> bool:
        """INT: has the SIGNED encoding; ENUM/ENUM64: has signed values."""
        if self.kind == Kind.INT:
            return bool(self.encoding & INT_SIGNED)
        if self.kind in (Kind.ENUM, Kind.ENUM64):
            return self.kind_flag or any(e.value < 0 for e in self.enumerators)
        return False


_VOID = Type(id=0, kind=Kind.VOID, name="void")


# --- parser --------------------------------------------------------------------------------

class BTF:
    """Types parsed from raw BTF bytes. Type ids start at 1; 0 is ``void``."""

    def __init__(self, types: list, byteorder: str):
        self._types = types  # index == type id; _types[0] is void
        self.byteorder = byteorder  # "little" or "big"
        self.endian = "<" if byteorder == "little" else ">"  # struct module prefix
        self._by_name: dict | None = None
        self._codecs: dict = {}  # codec cache, see codec()

    def __repr__(self):
        return f"<BTF {len(self._types) - 1} types>"

    def in_byteorder(self, byteorder: str) -> "BTF":
        """These types with values in ``byteorder`` ("big" or "little"): the codecs of the view
        read and write it, as for a network header a program declares (its fields big-endian)."""
        if byteorder == self.byteorder:
            return self
        view = BTF(self._types, byteorder)
        view._by_name = self._by_name
        return view

    def __len__(self):
        """Number of type ids, including void (like libbpf's btf__type_cnt)."""
        return len(self._types)

    # parsing

    @classmethod
    def from_bytes(cls, raw: bytes) -> "BTF":
        raw = bytes(raw)
        if len(raw) < 24:
            raise LoadError(f"BTF data is too short ({len(raw)} bytes)")
        if struct.unpack_from("<H", raw)[0] == BTF_MAGIC:
            e, order = "<", "little"
        elif struct.unpack_from(">H", raw)[0] == BTF_MAGIC:
            e, order = ">", "big"
        else:
            raise LoadError("not BTF data (bad magic %#06x)" % struct.unpack_from("<H", raw)[0])
        _, version, _, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(e + "HBBIIIII", raw)
        if version != 1:
            raise LoadError(f"unsupported BTF version {version}")
        t0, s0 = hdr_len + type_off, hdr_len + str_off
        if t0 + type_len > len(raw) or s0 + str_len > len(raw):
            raise LoadError("BTF data is truncated")
        strings = _StringTable(raw[s0:s0 + str_len])
        return cls(_parse_types(raw[t0:t0 + type_len], e, strings), order)

    # lookups

    def _t(self, type_id: int) -> Type:
        try:
            if type_id < 0:
                raise IndexError
            return self._types[type_id]
        except (IndexError, TypeError):
            raise LoadError(f"BTF has no type id {type_id!r}") from None

    def type(self, type_id: int) -> Type:
        return self._t(type_id)

    def kind(self, type_id: int) -> Kind:
        return self._t(type_id).kind

    def name(self, type_id: int) -> str:
        return self._t(type_id).name

    def types(self):
        """Every type record, in id order (void excluded)."""
        return iter(self._types[1:])

    def resolve(self, type_id: int) -> int:
        """Skip typedefs and modifiers (const, volatile, restrict, type_tag)."""
        return self._skip(type_id, _MODIFIERS)

    def _skip(self, type_id: int, kinds) -> int:
        for _ in range(64):  # a loop here means malformed BTF
            t = self._t(type_id)
            if t.kind not in kinds:
                return type_id
            type_id = t.type_id
        raise LoadError(f"BTF type {type_id}: too many levels of typedefs/modifiers")

    def size(self, type_id: int) -> int:
        """Size in bytes, as sizeof() in C."""
        tid = self.resolve(type_id)
        t = self._t(tid)
        if t.kind in (Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64, Kind.FLOAT, Kind.DATASEC):
            return t.size
        if t.kind == Kind.PTR:
            return POINTER_SIZE
        if t.kind == Kind.ARRAY:
            return t.nelems * self.size(t.type_id)
        if t.kind == Kind.VAR:
            return self.size(t.type_id)
        raise LoadError(f"type '{self.type_str(type_id)}' has no size")

    def find(self, name: str, kind=None) -> int:
        """Id of the type called ``name`` (of ``kind``: a Kind or its name, e.g. "struct").
        Without a kind, a complete type is preferred to a forward declaration."""
        if self._by_name is None:
            index: dict = {}
            for t in self._types[1:]:
                if t.name:
                    index.setdefault(t.name, []).append(t.id)
            self._by_name = index
        if isinstance(kind, str):
            try:
                kind = Kind[kind.upper()]
            except KeyError:
                raise KeyError(f"unknown BTF kind {kind!r}") from None
        ids = self._by_name.get(name, ())
        if kind is not None:
            ids = [i for i in ids if self._types[i].kind == kind]
        else:
            ids = sorted(ids, key=lambda i: self._types[i].kind == Kind.FWD)
        if not ids:
            what = f"{kind.name.lower()} " if kind is not None else ""
            raise KeyError(f"no BTF type {what}'{name}'")
        return ids[0]

    def enum(self, name: str, strip: str | None = None) -> dict:
        """The enumerators of ``enum name`` as {name: value}, in declaration order: how
        constants shared by C and Python reach Python. ``strip``: a prefix to remove, the
        rest lower-cased (``strip="FS_"``: FS_WOULD_DROP -> would_drop). KeyError naming the
        enum if the BTF lacks it (clang keeps an enum only where something typed uses it:
        a field, a signature, or ebpfkit.h's EK_EXPORT_TYPE)."""
        for kind in (Kind.ENUM, Kind.ENUM64):
            try:
                values = self._t(self.find(name, kind)).enumerators
            except KeyError:
                continue
            if strip is None:
                return {e.name: e.value for e in values}
            return {e.name.removeprefix(strip).lower(): e.value for e in values}
        raise KeyError(f"no enum '{name}' in BTF (clang drops an enum nothing typed uses: "
                       f"type a field or a global with it)")

    def datasec(self, name: str) -> list:
        """Variables of section ``name`` (".rodata", ".bss", ".data", ...), by offset.
        Raises KeyError if the object has no such section."""
        sec = self._t(self.find(name, Kind.DATASEC))
        out = []
        for var_id, offset, size in sec.vars:
            v = self._t(var_id)
            if v.kind == Kind.VAR:
                out.append(Var(v.name, v.type_id, offset, size))
            else:  # a FUNC in an extern ".ksyms" section
                out.append(Var(v.name, var_id, offset, size))
        return sorted(out, key=lambda v: v.offset)

    def datasecs(self) -> list:
        """Names of the DATASEC types."""
        return [t.name for t in self._types[1:] if t.kind == Kind.DATASEC]

    # C spelling

    def type_str(self, type_id: int) -> str:
        """C-like spelling for messages: ``struct event``, ``u32[16]``, ``char *``."""
        return _type_str(self, type_id, 0)


class _StringTable:
    """Offsets into the string section -> str, decoded once per distinct offset."""

    def __init__(self, data: bytes):
        self._data = data
        self._cache: dict = {0: ""}

    def __call__(self, off: int) -> str:
        s = self._cache.get(off)
        if s is None:
            end = self._data.find(b"\0", off)
            if off >= len(self._data):
                raise LoadError(f"BTF string offset {off} is out of range")
            s = self._data[off:end if end >= 0 else len(self._data)].decode(errors="replace")
            self._cache[off] = s
        return s


def _parse_types(raw: bytes, e: str, string) -> list:
    """Walk the type section ``raw`` once (linear in its size)."""
    hdr = struct.Struct(e + "III")
    u32 = struct.Struct(e + "I")
    s32 = struct.Struct(e + "i")
    triple = struct.Struct(e + "III")
    pair = struct.Struct(e + "II")
    name_i32 = struct.Struct(e + "Ii")
    types = [_VOID]
    pos, end = 0, len(raw)
    try:
        while pos < end:
            name_off, info, size_type = hdr.unpack_from(raw, pos)
            pos += 12
            tid = len(types)
            vlen, kind, kflag = info & 0xFFFF, (info >> 24) & 0x1F, bool(info >> 31)
            try:
                kind = Kind(kind)
            except ValueError:
                raise LoadError(f"BTF type {tid} has unknown kind {kind}") from None
            name = string(name_off)
            common = dict(id=tid, kind=kind, name=name, kind_flag=kflag, vlen=vlen)
            if kind == Kind.INT:
                (word,) = u32.unpack_from(raw, pos)
                pos += 4
                t = Type(size=size_type, encoding=(word >> 24) & 0xF, int_offset=(word >> 16) & 0xFF,
                         bits=word & 0xFF, **common)
            elif kind == Kind.ARRAY:
                elem, index, nelems = triple.unpack_from(raw, pos)
                pos += 12
                t = Type(type_id=elem, index_type_id=index, nelems=nelems, **common)
            elif kind in (Kind.STRUCT, Kind.UNION):
                members = []
                for _ in range(vlen):
                    m_name, m_type, m_off = triple.unpack_from(raw, pos)
                    pos += 12
                    bits = 0
                    if kflag:  # high 8 bits: bitfield size, low 24: bit offset
                        bits, m_off = m_off >> 24, m_off & 0xFFFFFF
                    members.append(Member(string(m_name), m_type, m_off, bits))
                t = Type(size=size_type, members=tuple(members), **common)
            elif kind == Kind.ENUM:
                vals = []
                for _ in range(vlen):
                    e_name, val = name_i32.unpack_from(raw, pos)
                    pos += 8
                    vals.append(Enumerator(string(e_name), val))
                if not kflag and any(v.value < 0 for v in vals) and _unsigned_enum(vals):
                    vals = [Enumerator(v.name, v.value & 0xFFFFFFFF) for v in vals]
                t = Type(size=size_type, enumerators=tuple(vals), **common)
            elif kind == Kind.ENUM64:
                vals = []
                for _ in range(vlen):
                    e_name, lo, hi = triple.unpack_from(raw, pos)
                    pos += 12
                    val = hi << 32 | lo
                    if kflag and val >= 1 << 63:
                        val -= 1 << 64
                    vals.append(Enumerator(string(e_name), val))
                t = Type(size=size_type, enumerators=tuple(vals), **common)
            elif kind == Kind.FUNC_PROTO:
                params = []
                for _ in range(vlen):
                    p_name, p_type = pair.unpack_from(raw, pos)
                    pos += 8
                    params.append(Param(string(p_name), p_type))
                t = Type(type_id=size_type, params=tuple(params), **common)
            elif kind == Kind.VAR:
                (linkage,) = u32.unpack_from(raw, pos)
                pos += 4
                t = Type(type_id=size_type, linkage=linkage, **common)
            elif kind == Kind.DATASEC:
                secvars = []
                for _ in range(vlen):
                    secvars.append(triple.unpack_from(raw, pos))
                    pos += 12
                t = Type(size=size_type, vars=tuple(secvars), **common)
            elif kind == Kind.DECL_TAG:
                (idx,) = s32.unpack_from(raw, pos)
                pos += 4
                t = Type(type_id=size_type, component_idx=idx, **common)
            elif kind == Kind.FUNC:
                t = Type(type_id=size_type, linkage=vlen, **common)
            elif kind == Kind.FLOAT:
                t = Type(size=size_type, **common)
            else:  # PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG
                t = Type(type_id=size_type, **common)
            types.append(t)
    except struct.error:  # a record runs past the end of the section
        raise LoadError("BTF type section is truncated") from None
    return types


def _unsigned_enum(vals) -> bool:
    """Without kind_flag (clang < 15 never sets it) a negative s32 value is either a
    signed enumerator (-1) or an unsigned one >= 2**31 (a flag like 0x80000000). Guess
    unsigned only when every negative value is far from zero, i.e. looks like a flag."""
    return all(v.value < -0x10000 or v.value >= 0 for v in vals)


def _type_str(btf: BTF, type_id: int, depth: int) -> str:
    if depth > 32:
        return "..."
    t = btf._t(type_id)
    k = t.kind
    if k == Kind.VOID:
        return "void"
    if k in (Kind.INT, Kind.FLOAT, Kind.TYPEDEF):
        return t.name
    if k in (Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.ENUM64):
        tag = {Kind.STRUCT: "struct", Kind.UNION: "union"}.get(k, "enum")
        return f"{tag} {t.name}" if t.name else f"{tag} {{...}}"
    if k == Kind.FWD:
        return ("union " if t.kind_flag else "struct ") + t.name
    if k == Kind.PTR:
        target = btf._t(t.type_id)
        if target.kind == Kind.FUNC_PROTO:
            return _proto_str(btf, target, "(*)", depth)
        if target.kind == Kind.ARRAY:
            base, dims = _array_parts(btf, target, depth)
            return f"{base} (*){dims}"
        inner = _type_str(btf, t.type_id, depth + 1)
        return inner + ("*" if inner.endswith("*") else " *")
    if k == Kind.ARRAY:
        base, dims = _array_parts(btf, t, depth)
        return base + dims
    if k in (Kind.CONST, Kind.VOLATILE, Kind.RESTRICT):
        word = k.name.lower()
        inner = _type_str(btf, t.type_id, depth + 1)
        return f"{inner} {word}" if inner.endswith("*") else f"{word} {inner}"
    if k == Kind.TYPE_TAG:
        return _type_str(btf, t.type_id, depth + 1)
    if k == Kind.FUNC_PROTO:
        return _proto_str(btf, t, "", depth)
    if k == Kind.FUNC:
        return _proto_str(btf, btf._t(t.type_id), t.name, depth)
    if k == Kind.VAR:
        return f"{_type_str(btf, t.type_id, depth + 1)} {t.name}"
    if k == Kind.DATASEC:
        return f"section {t.name}"
    if k == Kind.DECL_TAG:
        return f"__attribute__((btf_decl_tag(\"{t.name}\")))"
    return f"<{k.name.lower()} {type_id}>"


def _array_parts(btf: BTF, t: Type, depth: int) -> tuple:
    """("int", "[2][3]") for int[2][3], an array of 2 int[3]."""
    dims = ""
    while t.kind == Kind.ARRAY:
        dims += f"[{t.nelems}]"
        t = btf._t(t.type_id)
    return _type_str(btf, t.id, depth + 1), dims


def _proto_str(btf: BTF, proto: Type, middle: str, depth: int) -> str:
    if proto.kind != Kind.FUNC_PROTO:
        return middle or "?"
    args = []
    for p in proto.params:
        args.append("..." if p.type_id == 0 else _type_str(btf, p.type_id, depth + 1))
    ret = _type_str(btf, proto.type_id, depth + 1)
    return f"{ret} {middle}({', '.join(args) or 'void'})"


# --- Python values -----------------------------------------------------------------------

class Struct(dict):
    """A decoded struct or union: a dict in field order that also allows ``v.pid``.
    (Fields named like dict methods, e.g. ``items``, need ``v["items"]``.)"""

    __slots__ = ()

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no field '{name}' (fields: {', '.join(self)})") from None

    def __setattr__(self, name, value):
        self[name] = value

    def __delattr__(self, name):
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __dir__(self):
        return list(self) + dir(dict)

    def __repr__(self):
        return "Struct(" + ", ".join(f"{k}={v!r}" for k, v in self.items()) + ")"


class EnumValue(int):
    """An enum value: an int that knows its enumerator ``name`` (None if unknown).
    str() gives the name, so it prints nicely."""

    def __new__(cls, value: int, name: str | None = None):
        obj = int.__new__(cls, value)
        obj.name = name
        return obj

    def __str__(self):
        return self.name if self.name is not None else int.__repr__(self)

    def __repr__(self):
        if self.name is None:
            return f"EnumValue({int.__repr__(self)})"
        return f"EnumValue({self.name}={int.__repr__(self)})"

    def __format__(self, spec):
        return str(self) if not spec else int.__format__(int(self), spec)

    def __reduce__(self):
        return (EnumValue, (int(self), self.name))


# --- codecs ----------------------------------------------------------------------------------

class _Bad(Exception):
    """A value that does not fit. Struct/array encoders add their field name or index to
    ``path`` as the exception passes through them; Codec.encode turns it into MapError."""

    def __init__(self, msg: str):
        super().__init__(msg)
        self.msg = msg
        self.path: list = []  # innermost first: ".name" or "[3]"


_repr = reprlib.Repr()
_repr.maxstring = 40
_repr.maxother = 40


def _got(value) -> str:
    return _repr.repr(value)


class Codec:
    """Converts one BTF type between bytes and Python values. Get one with ``codec()``.

    ``size``; ``decode(buf, offset=0)`` (bytes, bytearray or memoryview); ``encode(value)``
    -> exactly ``size`` bytes; ``encode_into(buf, value, offset=0)``; ``zero()``."""

    __slots__ = ("size", "type_id", "type_name", "fmt", "post", "to_item", "fast", "decode", "_dec", "_enc")

    def __init__(self, type_id, type_name, size, dec, enc, fmt=None, post=None, checked=None, to_item=None):
        self.type_id = type_id
        self.type_name = type_name  # C spelling, for messages
        self.size = size
        self._dec = dec  # (buf, offset) -> value; trusts that buf is long enough
        self._enc = enc  # (bytearray, offset, value) -> None, raises _Bad
        # How a parent struct unpacks this type in its single struct.Struct call: one
        # format item (e.g. "I" or "16s") and a function applied to the unpacked item;
        # and packs it: ``to_item`` turns a value into that item (None: the value itself).
        self.fmt = fmt or f"{size}s"
        self.post = post if fmt else (post or _from_bytes(dec))
        self.to_item = to_item if to_item or not self.fmt.endswith("s") else self.encode
        # value -> bytes in one struct.pack call where the type allows it; it raises
        # (anything) on a value it cannot take, and the checked path explains why.
        self.fast = None
        # decode(buf, offset=0) -> value. ``checked`` is a decoder that reports a short
        # buffer itself (struct decoders do, at no cost); others get a length check.
        self.decode = checked or self._checked_decode

    def __repr__(self):
        return f"<Codec {self.type_name} size={self.size}>"

    def _checked_decode(self, buf, offset: int = 0):
        if len(buf) - offset < self.size or offset < 0:
            raise _short(self.type_name, self.size, buf, offset)
        return self._dec(buf, offset)

    def encode(self, value) -> bytes:
        if self.fast is not None:
            try:
                return self.fast(value)
            except Exception:  # noqa: BLE001 - the checked path below names the problem
                pass
        out = bytearray(self.size)
        self.encode_into(out, value)
        return bytes(out)

    def encode_into(self, buf: bytearray, value, offset: int = 0) -> None:
        """Write ``value`` into ``buf`` at ``offset``; bytes of fields it lacks keep their
        contents (so a section's other variables survive a partial update)."""
        if len(buf) - offset < self.size or offset < 0:
            raise MapError(f"{self.type_name}: buffer too short to encode into")
        try:
            self._enc(buf, offset, value)
        except _Bad as exc:
            path = "".join(reversed(exc.path)).lstrip(".")
            where = f"field '{path}' of {self.type_name}" if path else self.type_name
            raise MapError(f"{where}: {exc.msg}") from None

    def zero(self):
        return self._dec(bytes(self.size), 0)


def _short(type_name, size, buf, offset) -> MapError:
    return MapError(f"{type_name}: {len(buf) - offset} bytes at offset {offset} "
                    f"are too short, need {size}")


def _from_bytes(dec):
    return lambda b: dec(b, 0)


def codec(btf: BTF, type_id: int) -> Codec:
    """The (cached) codec of ``type_id``."""
    c = btf._codecs.get(type_id)
    if c is None:
        c = _build(btf, type_id)
        btf._codecs[type_id] = c
    return c


def _build(btf: BTF, type_id: int) -> Codec:
    tid = btf.resolve(type_id)
    t = btf._t(tid)
    name = btf.type_str(type_id)
    k = t.kind
    if k == Kind.VAR:
        return codec(btf, t.type_id)
    if k == Kind.INT:
        if t.bits < t.size * 8 or t.int_offset:  # legacy INT-encoded bitfield
            return _bitfield_codec(btf, tid, name, t.int_offset, t.bits, t.size)
        return _int_codec(btf, t, name)
    if k == Kind.PTR:
        return _scalar_codec(btf, tid, name, POINTER_SIZE, "Q", _check_int)
    if k == Kind.FLOAT:
        fmt = {2: "e", 4: "f", 8: "d"}.get(t.size)
        if fmt is None:
            raise MapError(f"{name}: {t.size}-byte floats are not supported")
        return _scalar_codec(btf, tid, name, t.size, fmt, _check_float)
    if k in (Kind.ENUM, Kind.ENUM64):
        return _enum_codec(btf, t, name)
    if k == Kind.ARRAY:
        return _array_codec(btf, t, name)
    if k in (Kind.STRUCT, Kind.UNION):
        fields = _flatten(btf, t.members, 0)
        return _struct_codec(btf, tid, name, t.size, fields, k == Kind.UNION)
    if k == Kind.DATASEC:
        fields = [(v.name, v.offset * 8, 0, v.type_id) for v in btf.datasec(t.name)]
        return _struct_codec(btf, tid, name, t.size, fields, False)
    raise MapError(f"cannot decode or encode values of type '{name}'")


# scalars

_INT_FMT = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h",
            (4, False): "I", (4, True): "i", (8, False): "Q", (8, True): "q"}


def _check_int(value):
    if not isinstance(value, int):
        raise _Bad(f"expected int, got {_got(value)}")


def _check_float(value):
    if not isinstance(value, (int, float)):
        raise _Bad(f"expected float, got {_got(value)}")


def _int_range(size: int, signed: bool, bits: int = 0) -> tuple:
    bits = bits or size * 8
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _scalar_codec(btf, tid, name, size, fmt, check) -> Codec:
    """A type struct.Struct handles with one format character."""
    st = struct.Struct(btf.endian + fmt)
    unpack, pack = st.unpack_from, st.pack_into

    def dec(buf, off):
        return unpack(buf, off)[0]

    def enc(out, off, value):
        try:
            pack(out, off, value)
        except (struct.error, OverflowError, TypeError):
            check(value)  # raises for a wrong type; otherwise it's out of range
            if fmt in "efd":
                raise _Bad(f"{value!r} does not fit in {name}") from None
            lo, hi = _int_range(size, fmt.islower())
            raise _Bad(f"{value} is out of range for {name} ({lo}..{hi})") from None

    c = Codec(tid, name, size, dec, enc, fmt)
    c.fast = st.pack
    return c


def _bool_to_c(value) -> int:
    if not isinstance(value, int):  # True/False are ints; so is 0/1
        raise _Bad(f"expected bool, got {_got(value)}")
    return 1 if value else 0


def _int_codec(btf, t: Type, name) -> Codec:
    if t.encoding & INT_BOOL:  # _Bool: decoded through an unsigned int of its size
        inner = _int_codec(btf, Type(id=t.id, kind=Kind.INT, size=t.size, bits=t.bits), name)
        return _wrap(inner, bool, _bool_to_c)
    fmt = _INT_FMT.get((t.size, t.signed))
    if fmt is not None:
        return _scalar_codec(btf, t.id, name, t.size, fmt, _check_int)
    return _bigint_codec(btf, t.id, name, t.size, t.signed)


def _bigint_codec(btf, tid, name, size, signed) -> Codec:
    """__int128 and other sizes struct has no format for."""
    order = btf.byteorder
    lo, hi = _int_range(size, signed)

    def dec(buf, off):
        return int.from_bytes(buf[off:off + size], order, signed=signed)

    def enc(out, off, value):
        _check_int(value)
        if not lo <= value <= hi:
            raise _Bad(f"{value} is out of range for {name} ({lo}..{hi})")
        out[off:off + size] = int(value).to_bytes(size, order, signed=signed)

    return Codec(tid, name, size, dec, enc)


def _wrap(inner: Codec, to_py, to_c) -> Codec:
    """A codec that maps inner's decoded values through to_py and encoded ones through
    to_c (which validates and raises _Bad)."""
    idec, ienc = inner._dec, inner._enc

    def dec(buf, off):
        return to_py(idec(buf, off))

    def enc(out, off, value):
        ienc(out, off, to_c(value))

    if inner.post is not None or inner.fmt.endswith("s"):
        post = lambda item, p=inner.post: to_py(p(item))  # noqa: E731
    else:
        post = to_py
    scalar = inner.to_item is None
    c = Codec(inner.type_id, inner.type_name, inner.size, dec, enc, inner.fmt, post,
              to_item=to_c if scalar else None)
    if scalar and inner.fast is not None:
        c.fast = lambda value, pack=inner.fast: pack(to_c(value))
    return c


def _enum_converters(t: Type, name):
    """(int -> EnumValue, value -> int) for enum ``t``."""
    known = {}
    for e in t.enumerators:
        known.setdefault(e.value, EnumValue(e.value, e.name))
    by_name = {e.name: e.value for e in t.enumerators}

    def to_py(v):
        ev = known.get(v)
        return ev if ev is not None else EnumValue(v)

    def to_c(value):
        if isinstance(value, str):
            try:
                return by_name[value]
            except KeyError:
                choices = ", ".join(list(by_name)[:10]) + (", ..." if len(by_name) > 10 else "")
                raise _Bad(f"unknown enumerator {value!r} of {name} (one of: {choices})") from None
        if not isinstance(value, int):
            raise _Bad(f"expected int or enumerator name, got {_got(value)}")
        return int(value)

    return to_py, to_c


def _enum_codec(btf, t: Type, name) -> Codec:
    to_py, to_c = _enum_converters(t, name)
    fmt = _INT_FMT.get((t.size, t.signed))
    if fmt is None:
        inner = _bigint_codec(btf, t.id, name, t.size, t.signed)
    else:
        inner = _scalar_codec(btf, t.id, name, t.size, fmt, _check_int)
    return _wrap(inner, to_py, to_c)


# arrays

def _array_codec(btf, t: Type, name) -> Codec:
    n = t.nelems
    elem_id = btf._skip(t.type_id, _QUALIFIERS)
    elem_t = btf._t(elem_id)
    if elem_t.kind == Kind.INT and elem_t.name in _CHAR_NAMES and elem_t.size == 1:
        return _string_codec(t.id, name, n)
    ec = codec(btf, t.type_id)
    esz = ec.size
    size = n * esz

    if not ec.fmt.endswith("s") and n:  # elements of one struct format character
        st = struct.Struct(f"{btf.endian}{n}{ec.fmt}")
        unpack = st.unpack_from
        post = ec.post
        if post is None:
            def dec(buf, off):
                return list(unpack(buf, off))
        else:
            def dec(buf, off):
                return [post(x) for x in unpack(buf, off)]
    else:
        edec = ec._dec

        def dec(buf, off):
            return [edec(buf, off + i * esz) for i in range(n)]

    eenc = ec._enc
    raw_ok = esz == 1 and btf._t(btf.resolve(t.type_id)).kind == Kind.INT

    def enc(out, off, value):
        if raw_ok and isinstance(value, (bytes, bytearray, memoryview)):
            if len(value) > n:
                raise _Bad(f"expected at most {n} bytes, got {len(value)}")
            out[off:off + len(value)] = value
            return
        if not isinstance(value, (list, tuple)):
            raise _Bad(f"expected a list of at most {n} elements, got {_got(value)}")
        if len(value) > n:
            raise _Bad(f"expected at most {n} elements, got {len(value)}")
        for i, v in enumerate(value):
            try:
                eenc(out, off + i * esz, v)
            except _Bad as exc:
                exc.path.append(f"[{i}]")
                raise

    c = Codec(t.id, name, size, dec, enc)
    if ec.to_item is None and not ec.fmt.endswith("s") and n:
        c.fast = _array_packer(struct.Struct(f"{btf.endian}{n}{ec.fmt}").pack, n, raw_ok)
    if raw_ok:
        c.to_item = _raw_bytes_item(n, c.encode)
    return c


def _array_packer(pack, n: int, raw_ok: bool):
    """Encode a whole array of scalars (all ``n`` of them, or raw bytes) in one call."""
    def fast(value):
        if isinstance(value, (list, tuple)) and len(value) == n:
            return pack(*value)
        if raw_ok and isinstance(value, (bytes, bytearray)) and len(value) <= n:
            return bytes(value).ljust(n, b"\0")
        raise TypeError  # the checked path says what is wrong
    return fast


def _raw_bytes_item(n: int, encode):
    """A byte array's item for its parent's pack call: bytes as they are (pack pads them
    with NULs, as the checked path leaves the rest zero), anything else encoded."""
    def to_item(value):
        if type(value) is bytes and len(value) <= n:
            return value
        return encode(value)
    return to_item


def _string_codec(tid, name, n) -> Codec:
    def to_str(b):
        return b.split(b"\0", 1)[0].decode("utf-8", "replace")

    def dec(buf, off):
        return to_str(bytes(buf[off:off + n]))

    def enc(out, off, value):
        if isinstance(value, str):
            b = value.encode()
            if len(b) > n - 1:  # keep room for the NUL; don't split a character
                b = b[:max(n - 1, 0)].decode("utf-8", "ignore").encode()
        elif isinstance(value, (bytes, bytearray, memoryview)):
            b = bytes(value)  # raw bytes may fill the whole array
            if len(b) > n:
                raise _Bad(f"expected at most {n} bytes, got {len(b)}")
        else:
            raise _Bad(f"expected str, got {_got(value)}")
        out[off:off + n] = b.ljust(n, b"\0")

    return Codec(tid, name, n, dec, enc, f"{n}s", to_str)


# bitfields

def _bitfield_codec(btf, type_id, name, bit_off, nbits, size=0) -> Codec:
    """Reads ``nbits`` bits at ``bit_off`` (from offset 0) of an int/enum/bool type.
    The codec's size covers the bytes it touches."""
    tid = btf.resolve(type_id)
    t = btf._t(tid)
    signed = t.signed
    to_py, to_c = (lambda v: v), None
    if t.kind in (Kind.ENUM, Kind.ENUM64):
        to_py, to_c = _enum_converters(t, name)
    elif t.kind == Kind.INT and t.encoding & INT_BOOL:
        to_py = bool
    elif t.kind != Kind.INT:
        raise MapError(f"{name}: bitfield of non-integer type")
    first, last = bit_off // 8, (bit_off + nbits + 7) // 8
    span = last - first
    order = btf.byteorder
    shift = bit_off - first * 8 if order == "little" else last * 8 - bit_off - nbits
    mask = (1 << nbits) - 1
    top = 1 << (nbits - 1)
    lo, hi = _int_range(0, signed, nbits)

    def dec(buf, off):
        v = (int.from_bytes(buf[off + first:off + last], order) >> shift) & mask
        if signed and v & top:
            v -= 1 << nbits
        return to_py(v)

    def enc(out, off, value):
        if to_c is not None:
            value = to_c(value)
        elif not isinstance(value, int):
            raise _Bad(f"expected int, got {_got(value)}")
        if not lo <= value <= hi:
            raise _Bad(f"{value} is out of range for a {nbits}-bit {name} ({lo}..{hi})")
        cur = int.from_bytes(out[off + first:off + last], order)
        cur = (cur & ~(mask << shift)) | ((int(value) & mask) << shift)
        out[off + first:off + last] = cur.to_bytes(span, order)

    return Codec(tid, name, max(size, last), dec, enc)


# structs and unions

def _flatten(btf, members, base_bits: int) -> list:
    """(name, bit_offset, bitfield_size, type_id) of each named member; anonymous
    struct/union members are inlined, as C lets you access their fields directly."""
    out = []
    for m in members:
        bit_off = base_bits + m.bit_offset
        if m.name:
            out.append((m.name, bit_off, m.bitfield_size, m.type_id))
            continue
        inner = btf._t(btf.resolve(m.type_id))
        if inner.kind in (Kind.STRUCT, Kind.UNION):
            out.extend(_flatten(btf, inner.members, bit_off))
        # else: an unnamed bitfield, i.e. padding
    return out


def _struct_codec(btf, tid, name, size, fields, is_union) -> Codec:
    endian = btf.endian
    names = [f[0] for f in fields]
    # Byte-aligned members that don't overlap an earlier one are unpacked by one
    # struct.Struct call (with "x" pad bytes); bitfields and overlapping union members
    # ("extras") are read by their own codecs and inserted at their place in the order.
    fmt, pos, posts, extras, by_name = [], 0, [], [], {}
    for i, (fname, bit_off, bits, ftype) in enumerate(fields):
        legacy = _legacy_bitfield(btf, ftype)
        if legacy:
            bit_off, bits = bit_off + legacy[0], legacy[1]
        if bits or bit_off % 8:
            bits = bits or btf.size(ftype) * 8
            fc = _bitfield_codec(btf, ftype, btf.type_str(ftype), bit_off, bits)
            extras.append((i, 0, fc._dec))
            by_name[fname] = (0, fc._enc)
            continue
        fc = codec(btf, ftype)
        off = bit_off // 8
        by_name[fname] = (off, fc._enc)
        if off < pos or off + fc.size > size:
            extras.append((i, off, fc._dec))
            continue
        if off > pos:
            fmt.append(f"{off - pos}x")
        fmt.append(fc.fmt)
        if fc.post is not None:
            posts.append((i - len(extras), fc.post))
        pos = off + fc.size
    if size > pos:  # trailing padding: unpack_from then checks the whole size
        fmt.append(f"{size - pos}x")
    unpack = struct.Struct(endian + "".join(fmt)).unpack_from
    short = lambda buf, off: _short(name, size, buf, off)  # noqa: E731
    dec = _make_struct_decoder(unpack, names, posts, extras, short)
    enc = _make_struct_encoder(by_name, names, "union" if is_union else "struct")
    c = Codec(tid, name, size, dec, enc, checked=dec)
    if not extras:
        items = [codec(btf, f[3]).to_item for f in fields]
        c.fast = _make_struct_packer(struct.Struct(endian + "".join(fmt)).pack, names, items)
    return c


def _legacy_bitfield(btf, type_id):
    """Old BTF (kind_flag 0) encodes a bitfield in the INT type's offset/bits."""
    t = btf._t(btf.resolve(type_id))
    if t.kind == Kind.INT and (t.bits < t.size * 8 or t.int_offset):
        return t.int_offset, t.bits
    return None


def _make_struct_decoder(unpack, names, posts, extras, short):
    """Generate the decoder's source: one unpack call into locals, then one store per
    field into a Struct. This is about twice as fast as a generic loop, and events are
    decoded one by one. Only local names (v0, p0, x0) are made up here; field names are
    inserted as repr() literals.

    unpack's format covers the whole size, so a short buffer makes it raise: the
    decoder reports that as MapError (``short``) and needs no length check."""
    post_of = dict(posts)
    extra_at = {i: (xoff, xdec) for i, xoff, xdec in extras}
    env = {"unpack": unpack, "Struct": Struct, "error": struct.error, "short": short}
    n_unpacked = len(names) - len(extras)
    targets = "".join(f"v{k}, " for k in range(n_unpacked)) or "_"
    lines = ["def dec(buf, off=0):",
             "    try:",
             f"        {targets} = unpack(buf, off)",
             "    except error:",
             "        raise short(buf, off) from None",
             "    s = Struct()"]
    k = 0  # index into the unpacked values
    for i, name in enumerate(names):
        if i in extra_at:
            xoff, env[f"x{i}"] = extra_at[i]
            value = f"x{i}(buf, off + {xoff})"
        else:
            value = f"v{k}"
            if k in post_of:
                env[f"p{k}"] = post_of[k]
                value = f"p{k}({value})"
            k += 1
        lines.append(f"    s[{name!r}] = {value}")
    lines.append("    return s")
    exec("\n".join(lines), env)  # noqa: S102 - generated from the fixed template above
    return env["dec"]


def _make_struct_packer(pack, names, to_items):
    """Generate an encoder of a whole struct given whole (a dict with every field, or a
    tuple of all of them) in one ``pack`` call: maps write millions of rules and keys this
    way, about three times faster than field by field. Anything else (a partial dict, an
    unknown field, a bad value) raises, and the checked encoder takes over. As with the
    decoder, only local names are made up; field names are inserted as repr() literals."""
    env = {"pack": pack, "DictType": dict, "TupleType": tuple, "n_fields": len(names)}
    args, locals_ = [], []
    for i, (name, to_item) in enumerate(zip(names, to_items)):
        value = f"value[{name!r}]"
        if to_item is not None:
            env[f"c{i}"] = to_item
            value = f"c{i}({value})"
        args.append(value)
        locals_.append(f"c{i}(f{i})" if to_item is not None else f"f{i}")
    unpacked = "".join(f"f{i}, " for i in range(len(names)))
    lines = ["def fast(value):",
             "    if isinstance(value, DictType) and len(value) == n_fields:",
             f"        return pack({', '.join(args)})",
             f"    {unpacked} = value  # a tuple of every field; else ValueError/TypeError" if names else
             "    raise TypeError",
             "    if not isinstance(value, TupleType):",
             "        raise TypeError",
             f"    return pack({', '.join(locals_)})"]
    exec("\n".join(lines), env)  # noqa: S102 - generated from the fixed template above
    return env["fast"]


def _make_struct_encoder(by_name, names, what):
    def enc(out, off, value):
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, tuple):
            if len(value) > len(names):
                raise _Bad(f"expected at most {len(names)} fields, got a tuple of {len(value)}")
            items = zip(names, value)
        else:
            raise _Bad(f"expected a dict or tuple for a {what}, got {_got(value)}")
        for fname, v in items:
            try:
                foff, fenc = by_name[fname]
            except (KeyError, TypeError):
                raise _Bad(f"no field {fname!r} (fields: {', '.join(names)})") from None
            try:
                fenc(out, off + foff, v)
            except _Bad as exc:
                exc.path.append("." + fname)
                raise
    return enc


# --- reading BTF through libbpf ----------------------------------------------------------

def raw_btf_data(btf_ptr) -> bytes:
    """The raw bytes of a libbpf ``struct btf *`` (e.g. from bpf_object__btf)."""
    from ._libbpf import lib

    size = ctypes.c_uint32()
    ptr = lib.btf__raw_data(btf_ptr, ctypes.byref(size))
    if not ptr:
        raise LoadError("libbpf could not serialize the BTF")
    return ctypes.string_at(ptr, size.value)


_KERNEL_BTFS: dict = {}  # btf id -> BTF: a loaded object's BTF never changes


def kernel_btf_by_id(btf_id: int) -> BTF:
    """The BTF the kernel holds under ``btf_id`` (a loaded object's, which its maps and
    programs name in their info), parsed once per process."""
    from ._libbpf import errno, lib, strerror

    btf = _KERNEL_BTFS.get(btf_id)
    if btf is None:
        ptr = lib.btf__load_from_kernel_by_id(btf_id)
        if not ptr:
            raise LoadError(f"cannot read BTF object {btf_id} from the kernel: {strerror(errno())}")
        try:
            btf = BTF.from_bytes(raw_btf_data(ptr))
        finally:
            lib.btf__free(ptr)
        _KERNEL_BTFS[btf_id] = btf
    return btf


def raw_btf_of(path) -> bytes:
    """The BTF of an ELF object or of a raw BTF file, via libbpf.

    An ELF object is opened with bpf_object__open_file (nothing goes to the kernel)
    rather than btf__parse: clang leaves DATASEC sizes and variable offsets at 0 and only
    object opening fills them in from the ELF symbol table."""
    from ._libbpf import capture_libbpf_messages, errno, lib, strerror

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            is_elf = f.read(4) == b"\x7fELF"
    except OSError as exc:
        raise LoadError(f"cannot read {path}: {exc.strerror}") from None
    no_btf = LoadError(f"{path} has no BTF",
                       hint="compile BPF programs with clang -g so the object carries BTF")
    if not is_elf:
        btf = lib.btf__parse(os.fsencode(path), None)
        if not btf:
            raise LoadError(f"{path} is neither an ELF object nor raw BTF ({strerror(errno())})")
        try:
            return raw_btf_data(btf)
        finally:
            lib.btf__free(btf)
    with capture_libbpf_messages() as msgs:
        obj = lib.bpf_object__open_file(os.fsencode(path), None)
    if not obj:
        detail = msgs.lines[-1] if msgs.lines else strerror(errno())
        btf = lib.btf__parse(os.fsencode(path), None)  # tells "no BTF" from other failures
        if not btf:
            raise no_btf
        lib.btf__free(btf)
        raise LoadError(f"libbpf cannot open {path}: {detail.removeprefix('libbpf: ')}")
    try:
        btf = lib.bpf_object__btf(obj)
        if not btf:
            raise no_btf
        return raw_btf_data(btf)
    finally:
        lib.bpf_object__close(obj)
