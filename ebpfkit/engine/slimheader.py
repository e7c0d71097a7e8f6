"""The part of vmlinux.h one program uses.

clang spends ~0.35 s parsing the whole kernel's vmlinux.h (120k+ types) for every compile,
however small the program. A program can only use kernel types it names, or reaches
through a member it names, so the engine writes a per-program header with just those
types (and everything they embed, which libbpf's btf_dump adds on its own) and clang
parses it in milliseconds.

Every identifier of the program and the headers it includes (libbpf's macro headers too,
so what their macros expand to counts) is looked up in an index of the kernel's type and
enumerator names. Struct members the program names that point to other structs pull those
in too (``BPF_CORE_READ(file, f_path.dentry, d_name)`` never spells ``dentry``'s struct).
libbpf's helper prototypes name ~40 structs (task_struct, sk_buff, ...) but declare them
themselves, so those are left out unless the program names them. The result is a subset
of vmlinux.h, so it can only miss a declaration, never change one; the compiler retries
with what clang reports missing, then with the full header.
"""

from __future__ import annotations

import os
import re
import struct
import sys
from collections import namedtuple

from . import cache
from .btf import KernelBTF
from ._log import get_logger

log = get_logger("ebpfkit.engine.slimheader")

INDEX_FORMAT = "2"  # 2: names as bytes

# BTF kinds (Documentation/bpf/btf.rst); plain ints, not btftypes.Kind: the walk is a hot loop
_PTR, _ARRAY, _STRUCT, _UNION, _ENUM, _TYPEDEF, _FUNC_PROTO, _ENUM64 = 2, 3, 4, 5, 6, 8, 13, 19
_SEE_THROUGH = frozenset({_TYPEDEF, 9, 10, 11, 18})  # typedef, volatile, const, restrict, type_tag


def _record_tables():
    """Per top byte of a record's info word (kind and kind_flag): its length in words as
    ``fixed + per_member * vlen``, and whether it is a kind a program can spell by name."""
    extra = {1: 1, 3: 3, 14: 1, 17: 1}  # INT, ARRAY, VAR, DECL_TAG
    per_member = {_STRUCT: 3, _UNION: 3, _ENUM: 2, 13: 2, 15: 3, _ENUM64: 3}  # ..., FUNC_PROTO, DATASEC
    fixed = [3 + extra.get(top & 0x1F, 0) for top in range(256)]
    per = [per_member.get(top & 0x1F, 0) for top in range(256)]
    named = frozenset(top for top in range(256) if top & 0x1F in (_STRUCT, _UNION, _ENUM, _TYPEDEF, _ENUM64))
    return fixed, per, named


_FIXED, _PER, _NAMED = _record_tables()

_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', re.M)
_NOT_CODE = re.compile(rb'^[ \t]*#[ \t]*include[^\n]*|//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                       re.S | re.M)
# libbpf's generated helper prototypes: it declares every struct they point to itself
_DECLARATIONS_ONLY = "bpf_helper_defs.h"
# what clang says when the slim header lacked something
_MISSING = re.compile(r"(?:unknown type name|undeclared identifier|incomplete type|incomplete definition)[^\n]*")
_QUOTED = re.compile(r"'(?:(?:struct|union|enum) )?([A-Za-z_]\w*)")


class KernelTypes:
    """The kernel BTF parsed once by libbpf: read in place (no copy) to find and select
    types, and handed to btf_dump to write the slim header. A context manager: the BTF
    is freed on exit.

    The name index (type and enumerator names -> type ids) takes one walk over 120k+
    records: 5-10 ms in C (_btfnames.c, built at install), 30-90 ms in Python (_walk, where
    no compiler was there); it is cached per BTF content hash.
    """

    def __init__(self, btf: KernelBTF):
        import ctypes

        from . import _libbpf as L

        self.btf = btf
        with btf.contents() as contents:  # libbpf copies them
            if contents.is_raw_btf():
                self._ptr = L.lib.btf__new(contents.address, contents.size)
            else:
                self._ptr = L.lib.btf__parse(os.fsencode(btf.path), None)
        if not self._ptr:
            raise OSError(L.errno(), f"libbpf cannot parse {btf.path}")
        size = ctypes.c_uint32()
        base = L.lib.btf__raw_data(self._ptr, ctypes.byref(size))
        raw = memoryview((ctypes.c_char * size.value).from_address(base)).cast("B")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = \
            struct.unpack_from("=HBBIIIII", raw)
        if magic != 0xEB9F:
            self.close()
            raise ValueError("BTF in the other byte order")
        self.words = raw[hdr_len + type_off:hdr_len + type_off + type_len].cast("I")
        self._types_at = base + hdr_len + type_off
        self._type_by_id = L.lib.btf__type_by_id  # the hot call of select(): looked up once
        self._offsets: dict = {}
        self._strings_at = base + hdr_len + str_off
        self.strings = memoryview((ctypes.c_char * str_len).from_address(self._strings_at)).cast("B")
        self._unsaved = None  # (path, index) to write to the cache
        self.names = self._index()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.save_index()
        self.close()

    def close(self) -> None:
        from . import _libbpf as L

        if self._ptr:
            self.words = self.strings = None
            L.lib.btf__free(self._ptr)
            self._ptr = None

    def _index(self) -> dict:
        path = os.path.join(cache.subdir(f"btf/{self.btf.digest}"), "names.rec")
        record = cache.read_record(path)
        if record and record.get("format") == INDEX_FORMAT:
            return record["names"]
        names = name_index(self.words, self.strings)
        self._unsaved = path, names
        return names

    def save_index(self) -> None:
        """Cache a newly built name index (the compiler calls this while clang works)."""
        if self._unsaved:
            path, names = self._unsaved
            self._unsaved = None
            cache.write_record(path, {"format": INDEX_FORMAT, "names": names})

    def ids(self, name: bytes) -> tuple:
        found = self.names.get(name)
        if found is None:
            return ()
        return found if isinstance(found, tuple) else (found,)

    def find(self, name: bytes, kind: int) -> int:
        """libbpf's own lookup of the type ``name`` of BTF ``kind``: its id, or a negative errno."""
        from . import _libbpf as L

        return L.lib.btf__find_by_name_kind(self._ptr, name, kind)

    def count(self) -> int:
        from . import _libbpf as L

        return L.lib.btf__type_cnt(self._ptr) - 1

    # -- records --

    def _at(self, type_id: int) -> int:
        """Word offset of a type's record (libbpf keeps the table of record offsets; a
        selection asks for the same record ~4 times, and a ctypes call costs ~1 us)."""
        at = self._offsets.get(type_id)
        if at is None:
            at = self._offsets[type_id] = (self._type_by_id(self._ptr, type_id) - self._types_at) >> 2
        return at

    def kind(self, type_id: int) -> int:
        return (self.words[self._at(type_id) + 1] >> 24) & 0x1F

    def ref(self, type_id: int) -> int:
        """The type a PTR/TYPEDEF/modifier/ARRAY refers to."""
        at = self._at(type_id)
        kind = (self.words[at + 1] >> 24) & 0x1F
        return self.words[at + 3] if kind == _ARRAY else self.words[at + 2]

    def members(self, type_id: int):
        """(name as bytes, type id) of a struct's or union's members."""
        import ctypes

        w, at = self.words, self._at(type_id)
        for i in range(w[at + 1] & 0xFFFF):
            m = at + 3 + 3 * i
            yield (ctypes.string_at(self._strings_at + w[m]) if w[m] else b""), w[m + 1]

    def member_types(self, type_id: int):
        """Type ids of a struct's or union's members."""
        w, at = self.words, self._at(type_id)
        return w[at + 4:at + 4 + 3 * (w[at + 1] & 0xFFFF):3]

    def signature(self, type_id: int):
        """Type ids of a function prototype's return value and parameters."""
        w, at = self.words, self._at(type_id)
        return (w[at + 2], *w[at + 4:at + 4 + 2 * (w[at + 1] & 0xFFFF):2])

    def enumerators(self, type_id: int) -> dict:
        """{name: value} of an ENUM or ENUM64 record, in declaration order."""
        import ctypes

        w, at = self.words, self._at(type_id)
        info = w[at + 1]
        kind, signed, count = (info >> 24) & 0x1F, bool(info >> 31), info & 0xFFFF
        step = 3 if kind == _ENUM64 else 2
        result = {}
        for m in range(at + 3, at + 3 + step * count, step):
            value = w[m + 1] | (w[m + 2] << 32 if kind == _ENUM64 else 0)
            bits = 64 if kind == _ENUM64 else 32
            if signed and value >> (bits - 1):
                value -= 1 << bits
            result[ctypes.string_at(self._strings_at + w[m]).decode()] = value
        return result

    def see_through(self, type_id: int) -> int:
        while type_id and self.kind(type_id) in _SEE_THROUGH:
            type_id = self.ref(type_id)
        return type_id

    def write(self, target: str, type_ids) -> None:
        from .btf import dump_types

        dump_types(self._ptr, self.btf.path, target, sorted(type_ids))


def native_walk():
    """The walk in C (the ``_btfnames`` module), or None where it was not built at install."""
    try:
        from . import _btfnames
    except ImportError:
        return None
    return _btfnames


def name_index(words: memoryview, strings: memoryview) -> dict:
    """Type and enumerator names -> type id or tuple of ids, from the type section
    (``words``) and string section of a BTF in native byte order."""
    native = native_walk()
    if native is None:
        return _walk(words, bytes(strings))
    return native.index(words.cast("B"), strings)


def _walk(w, strings: bytes) -> dict:
    """One pass over the type records: names of the kinds a program can spell (and of
    enumerators, which stand for their enum) -> type id, or a tuple of ids. (_btfnames.c
    does the same in C; this is for installs that could not build it.)"""
    fixed, per, named = _FIXED, _PER, _NAMED
    # Only an info word can have one of these top bytes (ids, sizes and string offsets
    # stay below 2^24), so no record after the last such word is a named one: pahole puts
    # the ~80k functions after all types, and the Python loop can stop half-way.
    tops = bytes(w.cast("B"))[3 if sys.byteorder == "little" else 0::4]
    last = max(tops.rfind(bytes([top])) for top in named)
    by_off: dict = {}  # name offset -> id or [ids]; decoded to names once, at the end
    get = by_off.get
    i, type_id = 0, 0
    while i < last:  # i + 1 is the record's info word
        type_id += 1
        info = w[i + 1]
        top = info >> 24
        if top in named:
            kind = top & 0x1F
            offs = (w[i],)
            if kind == _ENUM:
                offs += tuple(w[i + 3:i + 3 + 2 * (info & 0xFFFF):2])
            elif kind == _ENUM64:
                offs += tuple(w[i + 3:i + 3 + 3 * (info & 0xFFFF):3])
            for off in offs:
                if off:
                    old = get(off)
                    by_off[off] = type_id if old is None else (
                        old + [type_id] if isinstance(old, list) else [old, type_id])
        i += fixed[top] + per[top] * (info & 0xFFFF)
    # names stay bytes: the program's identifiers are bytes too, and 30k+ decodes cost ~3 ms
    return {strings[off:strings.index(b"\0", off)]: tuple(ids) if isinstance(ids, list) else ids
            for off, ids in by_off.items()}


class Names(namedtuple("_Names", "spelled declared")):
    """Identifiers (bytes) of a program and the headers it includes: ``spelled`` by the
    program, its own headers and libbpf's macro headers; ``declared`` only in libbpf's
    helper prototypes (bpf_helper_defs.h)."""


def program_names(path: str, include_dirs: list) -> Names:
    """The identifiers of the program at ``path`` and of every header it includes (found
    beside the including file, then in ``include_dirs``; vmlinux.h and headers not found
    there, like clang's own, are not read).

    The files are read as text, not preprocessed (that took a clang process, ~40 ms on a
    cold start): macro bodies and both sides of an #if count, so this is a superset of
    what the compile sees, less names made by ``##`` pasting, which clang then reports
    missing and the compiler adds. Comments and string literals do not count.
    """
    spelled: set = set()
    declared: set = set()
    seen, todo = set(), [path]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        with open(path, "rb") as f:
            text = f.read()
        for name in _INCLUDE.findall(text):
            name = os.fsdecode(name)
            if os.path.basename(name) == "vmlinux.h":  # the header being chosen, or a full one
                continue
            for d in (os.path.dirname(path), *include_dirs):
                found = os.path.normpath(os.path.join(d, name))  # one spelling per file for `seen`
                if os.path.isfile(found):
                    todo.append(found)
                    break
        into = declared if os.path.basename(path) == _DECLARATIONS_ONLY else spelled
        into.update(_IDENT.findall(_code(text)))
    return Names(spelled, declared - spelled)


def _code(text: bytes) -> bytes:
    """C text with its #include lines, comments and string and character literals blanked."""
    return _NOT_CODE.sub(b" ", text)


def select(index: KernelTypes, names: Names) -> set:
    """Ids of the kernel types the program spells, plus structs reached through members it
    names, plus the typedefs and enums libbpf's helper prototypes name (that header
    declares the structs it points to itself)."""
    chosen: set = set()
    for name in names.spelled:
        chosen.update(index.ids(name))
    for name in names.declared:
        chosen.update(t for t in index.ids(name) if index.kind(t) not in (_STRUCT, _UNION))
    names = names.spelled
    # members the program names (task->mm, file->f_path.dentry) may lead to structs it
    # never spells: walk records it uses, following named members (and anonymous ones,
    # which are inline), and take the struct each named pointer member points to
    todo = [t for t in chosen if index.kind(t) in (_STRUCT, _UNION, _TYPEDEF)]
    seen = set()
    while todo:
        type_id = index.see_through(todo.pop())
        if type_id in seen or index.kind(type_id) not in (_STRUCT, _UNION):
            continue
        seen.add(type_id)
        for name, member_type in index.members(type_id):
            if name and name not in names:
                continue
            target = index.see_through(member_type)
            while target and index.kind(target) == _ARRAY:
                target = index.see_through(index.ref(target))
            if target and index.kind(target) == _PTR:
                target = index.see_through(index.ref(target))
                if target and index.kind(target) in (_STRUCT, _UNION):
                    chosen.add(target)
            if target and index.kind(target) in (_STRUCT, _UNION):
                todo.append(target)
    return chosen | _passed_by_value(index, chosen)


def _passed_by_value(index: KernelTypes, chosen: set) -> set:
    """Structs and unions that function prototypes in the header take or return by value.

    btf_dump declares whatever a pointer leads to only forward, and that includes the
    parameters of a function pointer's prototype (``void (*cb)(struct io_tw_state)``).
    clang accepts that, but then the object's BTF has a prototype with an argument of no
    size, and the kernel rejects the whole BTF ("Invalid arg#N"). The full vmlinux.h has
    every definition, so these must be in the slim one too.
    """
    found: set = set()
    todo, seen = list(chosen), set()
    while todo:
        type_id = todo.pop()
        if not type_id or type_id in seen:
            continue
        seen.add(type_id)
        kind = index.kind(type_id)
        if kind in (_STRUCT, _UNION):  # defined in full: so is what it embeds
            todo.extend(index.member_types(type_id))
        elif kind == _PTR:  # a pointed-to struct is declared forward: look no further
            target = index.see_through(index.ref(type_id))
            if target and index.kind(target) not in (_STRUCT, _UNION):
                todo.append(target)
        elif kind == _FUNC_PROTO:
            for part in index.signature(type_id):
                part = index.see_through(part)
                if part and index.kind(part) in (_STRUCT, _UNION):
                    found.add(part)
                todo.append(part)
        elif kind in _SEE_THROUGH or kind == _ARRAY:
            todo.append(index.ref(type_id))
    return found


def missing_names(stderr: str) -> set:
    """Names clang reported as unknown, undeclared or incomplete."""
    found = set()
    for line in _MISSING.findall(stderr):
        found.update(_QUOTED.findall(line))
    return found
