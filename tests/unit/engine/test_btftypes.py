"""Tests of ebpfkit.engine.btftypes: the BTF parser and the value codec.

Most tests compile a small BPF object with clang -g (its BTF is the real thing) and
check the codec against the compiler: _Static_assert pins the layout in the C source,
and an initialized .data global gives bytes laid out by clang itself. A few tests build
BTF by hand for what clang 14 does not emit (ENUM64, big endian, legacy bitfields).
"""

from __future__ import annotations

import math
import pickle
import shutil
import struct
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebpfkit.engine.btftypes import (
    BTF, EnumValue, Kind, Struct, Var, codec, raw_btf_of,
)
from ebpfkit.errors import LoadError, MapError

SOURCE = r"""
#define SEC(n) __attribute__((section(n), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define OFF(t, f) __builtin_offsetof(t, f)

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef int __s32;
typedef long long __s64;
typedef __u32 u32;

enum state { ST_IDLE = 0, ST_RUN = 1, ST_DEAD = 7, ST_NEG = -2 };
enum __attribute__((packed)) small { SM_A = 1, SM_B = 200 };
enum big { BIG_A = 0x80000000u, BIG_B = 0x90000000u };

struct inner { __u16 port; __u8 proto; };

struct event {
    u32 pid;
    __s32 tid;
    __u64 ts;
    __s64 delta;
    char comm[16];
    __u8 raw[4];
    struct inner in;
    union { __u32 addr4; __u8 addr6[16]; };
    struct { __u16 x; __u16 y; };
    unsigned flag:1;
    int neg:4;
    unsigned wide:13;
    enum state st_bits:4;
    _Bool on;
    enum state st;
    enum small sm;
    enum big bg;
    float f;
    double d;
    void *ptr;
    const char *name;
    signed char sc;
    unsigned char uc;
    __s8 s8;
    short sh;
    char grid[2][4];
    __u32 vals[3];
    struct inner pairs[2];
    unsigned __int128 huge;
    __int128 shuge;
};
_Static_assert(sizeof(struct event) == 192, "event size");
_Static_assert(OFF(struct event, comm) == 24 && OFF(struct event, raw) == 40, "");
_Static_assert(OFF(struct event, in) == 44 && OFF(struct event, addr4) == 48, "");
_Static_assert(OFF(struct event, x) == 64 && OFF(struct event, y) == 66, "");
_Static_assert(OFF(struct event, on) == 71 && OFF(struct event, st) == 72, "");
_Static_assert(OFF(struct event, f) == 84 && OFF(struct event, d) == 88, "");
_Static_assert(OFF(struct event, grid) == 118 && OFF(struct event, vals) == 128, "");
_Static_assert(OFF(struct event, pairs) == 140 && OFF(struct event, huge) == 160, "");

struct flat { __u32 pid; __u32 tid; __u64 ts; __s32 ret; char comm[16]; __u64 delta; };
_Static_assert(sizeof(struct flat) == 48, "flat size");

union value { __u64 u; __s32 i; char s[8]; struct inner in; };
struct key { u32 pid; char comm[16]; };
struct empty_tail { __u32 len; __u8 data[]; };
struct fwd_only;
typedef struct event event_t;

const volatile __u32 cfg_pid = 0;
const volatile __u64 cfg_min_ns = 0;
const volatile char cfg_comm[16] = "";
const volatile _Bool cfg_verbose = 0;
const volatile enum state cfg_state = ST_RUN;

__u64 bss_count;
event_t g_event;
struct flat g_flat;
union value g_value;
struct empty_tail *g_tail;
struct fwd_only *g_fwd;
int (*g_fn)(int a, const char *b);

struct event g_init = {
    .pid = 4242, .tid = -7, .ts = 0x1122334455667788ULL, .delta = -5,
    .comm = "bash", .raw = {1, 2, 3, 250}, .in = {.port = 8080, .proto = 6},
    .addr4 = 0x0100007f, .x = 3, .y = 65535,
    .flag = 1, .neg = -3, .wide = 5000, .st_bits = ST_DEAD, .on = 1,
    .st = ST_NEG, .sm = SM_B, .bg = BIG_B, .f = 1.5f, .d = -2.25,
    .sc = -100, .uc = 200, .s8 = -1, .sh = -30000,
    .grid = {"abc", "wxyz"}, .vals = {1, 2, 0xffffffff},
    .pairs = {{1, 2}, {3, 4}},
    .huge = ((unsigned __int128)1 << 100) + 5, .shuge = -((__int128)1 << 90),
};

struct {
    __uint(type, 1);
    __uint(max_entries, 1024);
    __type(key, struct key);
    __type(value, union value);
} counts SEC(".maps");

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *) 1;

SEC("tp/sched/sched_switch") int prog(void *ctx)
{
    struct key k = {};
    k.pid = cfg_pid + cfg_min_ns + cfg_comm[0] + cfg_verbose + cfg_state;
    union value *v = bpf_map_lookup_elem(&counts, &k);
    return v ? v->i : 0;
}

char LICENSE[] SEC("license") = "GPL";
"""

# What clang put in g_init, as the codec should decode it.
G_INIT = {
    "pid": 4242, "tid": -7, "ts": 0x1122334455667788, "delta": -5,
    "comm": "bash", "raw": [1, 2, 3, 250], "in": {"port": 8080, "proto": 6},
    "addr4": 0x0100007F, "addr6": [0x7F, 0, 0, 1] + [0] * 12, "x": 3, "y": 65535,
    "flag": 1, "neg": -3, "wide": 5000, "st_bits": 7, "on": True,
    "st": -2, "sm": 200, "bg": 0x90000000, "f": 1.5, "d": -2.25, "ptr": 0, "name": 0,
    "sc": -100, "uc": 200, "s8": -1, "sh": -30000,
    "grid": ["abc", "wxyz"], "vals": [1, 2, 0xFFFFFFFF],
    "pairs": [{"port": 1, "proto": 2}, {"port": 3, "proto": 4}],
    "huge": (1 << 100) + 5, "shuge": -(1 << 90),
}


def compile_bpf(tmp_dir, source: str, name: str = "prog", debug: bool = True):
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang not installed: these tests compile small BPF objects")
    src = tmp_dir / f"{name}.bpf.c"
    obj = tmp_dir / f"{name}.bpf.o"
    src.write_text(source)
    cmd = [clang, "-target", "bpf", "-O2", "-c", str(src), "-o", str(obj)]
    if debug:
        cmd.insert(1, "-g")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return obj


@pytest.fixture(scope="module")
def obj(tmp_path_factory):
    return compile_bpf(tmp_path_factory.mktemp("btf"), SOURCE)


@pytest.fixture(scope="module")
def btf(obj):
    return BTF.from_bytes(raw_btf_of(obj))


def member_type(btf, struct_name, field):
    for m in btf.type(btf.find(struct_name, Kind.STRUCT)).members:
        if m.name == field:
            return m.type_id
    raise AssertionError(f"no member {field}")


def var_type(btf, section, name):
    return next(v.type_id for v in btf.datasec(section) if v.name == name)


def section_initial_bytes(obj_path, suffix: str) -> bytes:
    """The initial contents of a global-data map (".data", ".rodata") as libbpf sees them."""
    from ebpfkit.engine import open_object

    with open_object(obj_path) as spec:
        return spec.section_bytes(suffix)


def g_init_bytes(obj, btf) -> bytes:
    var = next(v for v in btf.datasec(".data") if v.name == "g_init")
    data = section_initial_bytes(obj, ".data")
    return data[var.offset:var.offset + var.size]


# --- parsing -------------------------------------------------------------------------------

def test_parse_and_lookup(btf):
    ev = btf.find("event")
    assert btf.kind(ev) == Kind.STRUCT and btf.name(ev) == "event"
    assert btf.size(ev) == 192
    t = btf.type(ev)
    assert [m.name for m in t.members][:4] == ["pid", "tid", "ts", "delta"]
    assert btf.kind(btf.find("event_t")) == Kind.TYPEDEF
    assert btf.resolve(btf.find("event_t")) == ev
    assert btf.find("event", Kind.STRUCT) == btf.find("event", "struct") == ev
    assert btf.kind(btf.find("state", "enum")) == Kind.ENUM
    assert btf.kind(btf.find("fwd_only")) == Kind.FWD
    assert btf.kind(btf.find("value")) == Kind.UNION
    assert btf.size(btf.find("value")) == 8
    assert btf.size(member_type(btf, "event", "name")) == 8  # pointer
    assert btf.size(member_type(btf, "event", "grid")) == 8
    assert btf.size(member_type(btf, "empty_tail", "data")) == 0
    with pytest.raises(KeyError):
        btf.find("no_such_type")
    with pytest.raises(KeyError):
        btf.find("event", Kind.UNION)
    with pytest.raises(LoadError):
        btf.type(10**6)
    with pytest.raises(LoadError, match="has no size"):
        btf.size(btf.find("fwd_only"))


def test_int_encodings(btf):
    char = btf.type(btf.find("char", Kind.INT))
    assert char.size == 1 and char.bits == 8
    assert btf.type(btf.find("_Bool")).encoding & 4  # BTF_INT_BOOL
    assert btf.type(btf.find("long long")).signed
    assert not btf.type(btf.find("unsigned int")).signed
    assert btf.type(btf.find("__int128")).size == 16


def test_datasec_rodata_offsets(btf):
    rodata = btf.datasec(".rodata")
    assert [(v.name, v.offset, v.size) for v in rodata] == [
        ("cfg_pid", 0, 4), ("cfg_min_ns", 8, 8), ("cfg_comm", 16, 16),
        ("cfg_verbose", 32, 1), ("cfg_state", 36, 4)]
    assert all(isinstance(v, Var) for v in rodata)
    assert btf.type_str(rodata[0].type_id) == "const volatile __u32"
    assert btf.resolve(rodata[0].type_id) == btf.find("unsigned int")
    assert {".rodata", ".bss", ".data", ".maps"} <= set(btf.datasecs())
    with pytest.raises(KeyError):
        btf.datasec(".nope")


def test_datasec_codec_and_partial_update(btf):
    c = codec(btf, btf.find(".rodata", Kind.DATASEC))
    cfg = c.zero()
    assert list(cfg) == ["cfg_pid", "cfg_min_ns", "cfg_comm", "cfg_verbose", "cfg_state"]
    buf = bytearray(b"\xee" * c.size)  # bytes of other variables must survive
    c.encode_into(buf, {"cfg_pid": 42, "cfg_comm": "nginx", "cfg_state": "ST_DEAD"})
    assert buf[0:4] == struct.pack("<I", 42) and buf[4:16] == b"\xee" * 12
    assert buf[16:32] == b"nginx".ljust(16, b"\0")
    back = c.decode(buf)
    assert back.cfg_pid == 42 and back.cfg_comm == "nginx" and back.cfg_state.name == "ST_DEAD"


@pytest.mark.parametrize("where, expected", [
    (("event",), "struct event"),
    (("event_t",), "event_t"),
    (("value",), "union value"),
    (("state",), "enum state"),
    (("event", "pid"), "u32"),
    (("event", "comm"), "char[16]"),
    (("event", "raw"), "__u8[4]"),
    (("event", "grid"), "char[2][4]"),
    (("event", "pairs"), "struct inner[2]"),
    (("event", "ptr"), "void *"),
    (("event", "name"), "const char *"),
    (("event", "st"), "enum state"),
    (("event", "huge"), "unsigned __int128"),
    (("empty_tail", "data"), "__u8[0]"),
])
def test_type_str(btf, where, expected):
    tid = btf.find(where[0]) if len(where) == 1 else member_type(btf, *where)
    assert btf.type_str(tid) == expected


def test_type_str_globals(btf):
    bss = {v.name: v.type_id for v in btf.datasec(".bss")}
    assert btf.type_str(bss["g_fn"]) == "int (*)(int, const char *)"
    assert btf.type_str(bss["g_fwd"]) == "struct fwd_only *"
    assert btf.type_str(bss["g_tail"]) == "struct empty_tail *"
    assert btf.type_str(var_type(btf, ".rodata", "cfg_comm")) == "const volatile char[16]"
    assert btf.type_str(0) == "void"


def test_map_definition_key_value(btf):
    """A BTF-defined map: its key/value types come from the __type() pointer members."""
    (counts,) = btf.datasec(".maps")
    assert counts.name == "counts"
    members = {m.name: m.type_id for m in btf.type(btf.resolve(counts.type_id)).members}
    assert set(members) == {"type", "max_entries", "key", "value"}
    assert btf.type_str(members["type"]) == "int (*)[1]"
    max_entries = btf.type(btf.type(members["max_entries"]).type_id)
    assert max_entries.kind == Kind.ARRAY and max_entries.nelems == 1024
    key_id = btf.type(members["key"]).type_id
    value_id = btf.type(members["value"]).type_id
    assert btf.type_str(key_id) == "struct key" and btf.type_str(value_id) == "union value"
    key = codec(btf, key_id)
    assert key.size == 20
    assert key.decode(key.encode({"pid": 1, "comm": "sshd"})) == {"pid": 1, "comm": "sshd"}


# --- decoding against the compiler --------------------------------------------------------

def test_decode_matches_compiler_layout(obj, btf):
    c = codec(btf, btf.find("event"))
    v = c.decode(g_init_bytes(obj, btf))
    assert list(v) == list(G_INIT)  # declaration order, anonymous members inlined
    for name, expected in G_INIT.items():
        assert v[name] == expected, name
    assert isinstance(v["in"], Struct) and isinstance(v.pairs[1], Struct)
    assert isinstance(v.on, bool)
    assert isinstance(v.st, EnumValue) and v.st.name == "ST_NEG" and str(v.st) == "ST_NEG"
    assert v.st_bits.name == "ST_DEAD"
    assert v.sm.name == "SM_B" and v.bg.name == "BIG_B"  # 1-byte enum, unsigned enum


def test_encode_reproduces_compiler_bytes(obj, btf):
    c = codec(btf, btf.find("event"))
    value = dict(G_INIT)
    del value["addr6"]  # shares bytes with addr4; the encoder writes members in order
    value["st"], value["bg"] = "ST_NEG", "BIG_B"
    value["grid"] = ["abc", b"wxyz"]  # a str keeps room for the NUL; bytes fill the array
    assert c.encode(value) == g_init_bytes(obj, btf)


# --- round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("pid", 0xFFFFFFFF), ("tid", -(2**31)), ("ts", 2**64 - 1), ("delta", -(2**63)),
    ("comm", "systemd-journal"), ("raw", [9, 8, 7, 6]), ("in", {"port": 443, "proto": 17}),
    ("x", 65535), ("flag", 1), ("neg", -8), ("neg", 7), ("wide", 8191), ("on", True),
    ("st", EnumValue(1, "ST_RUN")), ("st", 1234), ("st_bits", 7), ("sm", 1), ("bg", 0x80000000),
    ("f", 0.25), ("d", math.pi), ("ptr", 0xFFFF888012345678), ("name", 1),
    ("sc", -128), ("uc", 255), ("s8", 127), ("sh", -1), ("grid", ["ab", "xyz"]),
    ("vals", [0, 5, 2**32 - 1]), ("pairs", [{"port": 5, "proto": 6}, {"port": 0, "proto": 0}]),
    ("huge", 2**128 - 1), ("shuge", -(2**127)), ("shuge", 2**127 - 1),
])
def test_roundtrip_each_kind(btf, field, value):
    c = codec(btf, btf.find("event"))
    out = c.encode({field: value})
    assert len(out) == c.size
    back = c.decode(out)
    assert back[field] == value
    others = {k: v for k, v in back.items() if k != field}
    assert others == {k: v for k, v in c.zero().items() if k != field}


def test_bitfields_do_not_disturb_neighbors(btf):
    c = codec(btf, btf.find("event"))
    buf = bytearray(c.encode({"flag": 1, "neg": -1, "wide": 8191, "st_bits": -8, "on": True}))
    c.encode_into(buf, {"neg": 0})
    v = c.decode(buf)
    assert (v.flag, v.neg, v.wide, v.st_bits, v.on) == (1, 0, 8191, -8, True)
    assert v.st_bits.name is None
    c.encode_into(buf, {"wide": 0, "flag": 0})
    v = c.decode(buf)
    assert (v.flag, v.neg, v.wide, v.st_bits) == (0, 0, 0, -8)


def test_union(btf):
    c = codec(btf, btf.find("value"))
    v = c.decode(c.encode({"i": -1}))
    assert list(v) == ["u", "i", "s", "in"]
    assert v.u == 0xFFFFFFFF and v.i == -1 and v["in"] == {"port": 0xFFFF, "proto": 0xFF}
    v = c.decode(c.encode({"s": "hello"}))
    assert v.s == "hello" and v.u == int.from_bytes(b"hello\0\0\0", "little")
    assert c.encode(v) == c.encode({"s": "hello"})  # a decoded union re-encodes the same


def test_exact_layouts(btf):
    key = codec(btf, btf.find("key"))
    assert key.encode({"pid": 7, "comm": "bash"}) == struct.pack("<I16s", 7, b"bash")
    assert key.encode((7, "bash")) == struct.pack("<I16s", 7, b"bash")
    inner = codec(btf, btf.find("inner"))
    assert inner.encode({"port": 0x1234, "proto": 6}) == struct.pack("<HBx", 0x1234, 6)
    value = codec(btf, btf.find("value"))
    assert value.encode({"i": -2}) == struct.pack("<i4x", -2)
    flat = codec(btf, btf.find("flat"))
    args = (1, 2, 3, -4, b"comm", 5)
    fmt = "<IIQi16s4xQ"
    assert flat.encode({"pid": 1, "tid": 2, "ts": 3, "ret": -4, "comm": "comm", "delta": 5}) \
        == struct.pack(fmt, *args)
    assert flat.decode(struct.pack(fmt, *args)) == {
        "pid": 1, "tid": 2, "ts": 3, "ret": -4, "comm": "comm", "delta": 5}
    ev = codec(btf, btf.find("event"))
    out = ev.encode({"flag": 1, "neg": -3, "wide": 5000})
    word = 1 | (0b1101 << 1) | (5000 << 5)  # LE: first bitfield in the lowest bits
    assert out[68:71] == word.to_bytes(3, "little")
    assert ev.encode({"d": 2.5})[88:96] == struct.pack("<d", 2.5)


def test_a_big_endian_view_reads_network_order(btf):
    """in_byteorder("big"): the same struct's codec, for data laid out as the program declares
    but in network byte order (a header on the wire); the native view is untouched."""
    net = btf.in_byteorder("big")
    assert btf.in_byteorder(btf.byteorder) is btf and net.byteorder == "big"
    flat = codec(net, net.find("flat"))
    args = (1, 2, 3, -4, b"comm", 5)
    wire = struct.pack(">IIQi16s4xQ", *args)
    assert flat.decode(wire) == {"pid": 1, "tid": 2, "ts": 3, "ret": -4, "comm": "comm", "delta": 5}
    assert flat.encode({"pid": 1, "tid": 2, "ts": 3, "ret": -4, "comm": "comm", "delta": 5}) == wire
    assert codec(btf, btf.find("flat")).encode({"pid": 1}) == struct.pack("<I44x", 1)


def test_decode_offset_and_buffer_types(btf):
    c = codec(btf, btf.find("key"))
    raw = c.encode({"pid": 99, "comm": "x"})
    padded = b"\xff" * 3 + raw
    for buf in (padded, bytearray(padded), memoryview(padded)):
        assert c.decode(buf, 3) == {"pid": 99, "comm": "x"}
    with pytest.raises(MapError, match="too short"):
        c.decode(raw[:-1])


def test_scalar_codecs(btf):
    u32 = codec(btf, btf.find("u32"))
    assert u32.size == 4 and u32.decode(b"\x01\0\0\0") == 1 and u32.encode(5) == b"\x05\0\0\0"
    assert u32.zero() == 0
    b = codec(btf, btf.find("_Bool"))
    assert b.decode(b"\x01") is True and b.encode(True) == b"\x01" and b.encode(0) == b"\0"
    f = codec(btf, btf.find("float"))
    assert f.decode(f.encode(0.5)) == 0.5 and f.encode(1) == struct.pack("<f", 1.0)
    state = codec(btf, btf.find("state"))
    assert state.encode("ST_NEG") == state.encode(-2) == state.encode(EnumValue(-2)) == struct.pack("<i", -2)
    assert codec(btf, btf.find("small")).size == 1


def test_codec_is_cached(btf):
    assert codec(btf, btf.find("event")) is codec(btf, btf.find("event"))


# --- strings and byte arrays ---------------------------------------------------------------

def test_char_arrays_are_strings(btf):
    c = codec(btf, btf.find("key"))
    out = c.encode({"comm": "a-very-long-command-name"})
    assert out[4:] == b"a-very-long-com\0"  # truncated to size - 1, NUL kept
    assert c.decode(out).comm == "a-very-long-com"
    assert c.encode({"comm": b"raw\xffbytes"})[4:] == b"raw\xffbytes".ljust(16, b"\0")
    assert c.encode({"comm": b"x" * 16})[4:] == b"x" * 16  # bytes may fill the array
    assert c.decode(struct.pack("<I16s", 0, b"ab\0cd")).comm == "ab"  # stops at NUL
    assert c.decode(struct.pack("<I16s", 0, b"\xffok")).comm == "\ufffdok"
    assert c.decode(struct.pack("<I16s", 0, b"y" * 16)).comm == "y" * 16  # no NUL at all
    assert c.encode({"comm": "é" * 10})[4:] == ("é" * 7).encode() + b"\0\0"  # whole chars


def test_u8_typedef_array_is_a_list(btf):
    c = codec(btf, btf.find("event"))
    assert c.zero().raw == [0, 0, 0, 0]
    assert c.decode(c.encode({"raw": b"\x01\x02"})).raw == [1, 2, 0, 0]
    assert c.decode(c.encode({"raw": (5,)})).raw == [5, 0, 0, 0]  # short lists zero-padded
    assert c.decode(c.encode({"addr6": bytes(range(16))})).addr6 == list(range(16))


def test_flexible_array(btf):
    c = codec(btf, btf.find("empty_tail"))
    assert c.size == 4 and c.decode(b"\x02\0\0\0") == {"len": 2, "data": []}


# --- Struct and EnumValue --------------------------------------------------------------------

def test_struct_value(btf):
    c = codec(btf, btf.find("key"))
    v = c.zero()
    assert isinstance(v, Struct) and isinstance(v, dict)
    v.pid = 5
    v["comm"] = "sh"
    assert v.pid == 5 and v == {"pid": 5, "comm": "sh"}
    assert repr(v) == "Struct(pid=5, comm='sh')"
    assert "pid" in dir(v)
    with pytest.raises(AttributeError, match="no field 'nope'"):
        v.nope
    assert pickle.loads(pickle.dumps(v)) == v
    assert c.decode(c.encode(v)) == v
    assert c.encode({}) == bytes(20) == c.encode(())


def test_enum_value():
    v = EnumValue(1, "ST_RUN")
    assert v == 1 and v.name == "ST_RUN" and str(v) == "ST_RUN" and f"{v}" == "ST_RUN"
    assert f"{v:03d}" == "001" and repr(v) == "EnumValue(ST_RUN=1)" and hash(v) == hash(1)
    unknown = EnumValue(9)
    assert unknown.name is None and str(unknown) == "9" and repr(unknown) == "EnumValue(9)"
    back = pickle.loads(pickle.dumps(v))
    assert back == 1 and back.name == "ST_RUN"


def test_enum_decode_unknown_value(btf):
    c = codec(btf, btf.find("state"))
    v = c.decode(struct.pack("<i", 42))
    assert v == 42 and v.name is None
    assert c.decode(struct.pack("<i", 7)) is c.decode(struct.pack("<i", 7))  # cached instances


# --- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("type_name, value, message", [
    ("key", {"pid": "abc"}, "field 'pid' of struct key: expected int, got 'abc'"),
    ("key", {"pid": 1.5}, "field 'pid' of struct key: expected int, got 1.5"),
    ("key", {"pid": -1}, "field 'pid' of struct key: -1 is out of range for u32 (0..4294967295)"),
    ("key", {"pid": 2**32}, "field 'pid' of struct key: 4294967296 is out of range for u32"),
    ("key", {"nope": 1}, "struct key: no field 'nope' (fields: pid, comm)"),
    ("key", 5, "struct key: expected a dict or tuple for a struct, got 5"),
    ("key", (1, "a", 3), "struct key: expected at most 2 fields, got a tuple of 3"),
    ("key", {"comm": 5}, "field 'comm' of struct key: expected str, got 5"),
    ("key", {"comm": b"x" * 17}, "field 'comm' of struct key: expected at most 16 bytes"),
    ("event", {"in": {"port": 70000}},
     "field 'in.port' of struct event: 70000 is out of range for __u16 (0..65535)"),
    ("event", {"vals": [1, "x"]}, "field 'vals[1]' of struct event: expected int, got 'x'"),
    ("event", {"pairs": [{}, {"proto": -1}]}, "field 'pairs[1].proto' of struct event: -1 is out of range"),
    ("event", {"vals": [1, 2, 3, 4]}, "field 'vals' of struct event: expected at most 3 elements, got 4"),
    ("event", {"vals": 3}, "field 'vals' of struct event: expected a list of at most 3 elements, got 3"),
    ("event", {"raw": b"12345"}, "field 'raw' of struct event: expected at most 4 bytes, got 5"),
    ("event", {"st": "ST_BOGUS"}, "field 'st' of struct event: unknown enumerator 'ST_BOGUS' of enum state"),
    ("event", {"st": 2.0}, "field 'st' of struct event: expected int or enumerator name, got 2.0"),
    ("event", {"st_bits": 16}, "field 'st_bits' of struct event: 16 is out of range for a 4-bit"),
    ("event", {"neg": 8}, "field 'neg' of struct event: 8 is out of range for a 4-bit int (-8..7)"),
    ("event", {"flag": "1"}, "field 'flag' of struct event: expected int, got '1'"),
    ("event", {"on": "yes"}, "field 'on' of struct event: expected bool, got 'yes'"),
    ("event", {"f": "x"}, "field 'f' of struct event: expected float, got 'x'"),
    ("event", {"f": 1e300}, "field 'f' of struct event: 1e+300 does not fit in float"),
    ("event", {"huge": -1}, "field 'huge' of struct event: -1 is out of range for unsigned __int128"),
    ("event", {"grid": ["a", 1]}, "field 'grid[1]' of struct event: expected str, got 1"),
    ("value", {"s": None}, "field 's' of union value: expected str, got None"),
    ("value", 7, "union value: expected a dict or tuple for a union, got 7"),
    ("u32", "12", "u32: expected int, got '12'"),
])
def test_encode_errors(btf, type_name, value, message):
    with pytest.raises(MapError) as exc:
        codec(btf, btf.find(type_name)).encode(value)
    assert str(exc.value).startswith(message)


def test_unencodable_types(btf):
    with pytest.raises(MapError, match="struct fwd_only"):
        codec(btf, btf.find("fwd_only"))
    with pytest.raises(MapError, match="cannot decode"):
        codec(btf, btf.find("prog"))  # a FUNC


# --- raw_btf_of ------------------------------------------------------------------------------

def test_raw_btf_of_errors(tmp_path):
    with pytest.raises(LoadError, match="cannot read"):
        raw_btf_of(tmp_path / "missing.o")
    junk = tmp_path / "junk"
    junk.write_bytes(b"not btf at all")
    with pytest.raises(LoadError, match="neither an ELF object nor raw BTF"):
        raw_btf_of(junk)


def test_raw_btf_of_object_without_btf(tmp_path):
    obj = compile_bpf(tmp_path, SOURCE, debug=False)
    with pytest.raises(LoadError, match="has no BTF") as exc:
        raw_btf_of(obj)
    assert "clang -g" in exc.value.hint


def test_raw_btf_file(tmp_path, obj):
    raw = raw_btf_of(obj)
    path = tmp_path / "types.btf"
    path.write_bytes(raw)
    again = BTF.from_bytes(raw_btf_of(path))
    assert again.find("event") == BTF.from_bytes(raw).find("event")


def test_parse_speed(btf, obj):
    import time
    raw = raw_btf_of(obj)
    t0 = time.perf_counter()
    for _ in range(20):
        BTF.from_bytes(raw)
    assert (time.perf_counter() - t0) / 20 < 0.05  # ~100 types: a few ms at most


# --- property tests ----------------------------------------------------------------------------

INT_FIELDS = {
    "pid": st.integers(0, 2**32 - 1), "tid": st.integers(-(2**31), 2**31 - 1),
    "ts": st.integers(0, 2**64 - 1), "delta": st.integers(-(2**63), 2**63 - 1),
    "sc": st.integers(-128, 127), "uc": st.integers(0, 255), "sh": st.integers(-(2**15), 2**15 - 1),
    "flag": st.integers(0, 1), "neg": st.integers(-8, 7), "wide": st.integers(0, 8191),
    "huge": st.integers(0, 2**128 - 1), "shuge": st.integers(-(2**127), 2**127 - 1),
    "comm": st.text(st.characters(min_codepoint=1, max_codepoint=127), max_size=15),
    "vals": st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3),
    "in": st.fixed_dictionaries({"port": st.integers(0, 65535), "proto": st.integers(0, 255)}),
    "d": st.floats(allow_nan=False),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.fixed_dictionaries({}, optional=INT_FIELDS))
def test_property_struct_roundtrip(btf, value):
    c = codec(btf, btf.find("event"))
    out = c.encode(value)
    assert len(out) == c.size
    back = c.decode(out)
    zero = c.zero()
    for name in back:
        assert back[name] == value.get(name, zero[name]), name
    assert c.encode(back) == out


FLAT_FIELDS = {
    "pid": st.integers(-1, 2**32), "tid": st.integers(0, 2**32 - 1), "ts": st.integers(0, 2**64 - 1),
    "ret": st.one_of(st.integers(-(2**31), 2**31 - 1), st.text(max_size=2)),
    "comm": st.one_of(st.text(max_size=20), st.binary(max_size=17)), "delta": st.integers(0, 2**64 - 1),
}


def checked_encode(c, value):
    """The field-by-field encoder alone (what encode() falls back to)."""
    out = bytearray(c.size)
    try:
        c.encode_into(out, value)
    except MapError as exc:
        return str(exc)
    return bytes(out)


def encoded(c, value):
    try:
        return c.encode(value)
    except MapError as exc:
        return str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.fixed_dictionaries(FLAT_FIELDS), as_tuple=st.booleans())
def test_property_one_pack_encoder_matches_field_by_field(btf, value, as_tuple):
    """A whole struct is packed in one call; the bytes, and the error of a value that does
    not fit (out of range, wrong type, a string too long), are those of the checked path."""
    c = codec(btf, btf.find("flat"))
    assert c.fast is not None
    if as_tuple:
        value = tuple(value[name] for name in ("pid", "tid", "ts", "ret", "comm", "delta"))
    assert encoded(c, value) == checked_encode(c, value)


def test_one_pack_encoder_covers_nested_and_enums(btf):
    c = codec(btf, btf.find("key"))
    assert c.fast is not None and c.fast({"pid": 7, "comm": "nginx"}) == checked_encode(c, {"pid": 7, "comm": "nginx"})
    inner = codec(btf, btf.find("inner"))
    assert inner.fast((80, 6)) == struct.pack("<HBx", 80, 6)
    state = codec(btf, var_type(btf, ".rodata", "cfg_state"))
    assert state.encode("ST_DEAD") == state.encode(7) == struct.pack("<i", 7)
    # a struct with bitfields or overlapping union members keeps the checked path only
    assert codec(btf, btf.find("event")).fast is None
    assert encoded(c, {"pid": 7}) == checked_encode(c, {"pid": 7})  # partial: checked path


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=5), st.lists(st.integers(-1, 256), max_size=5)),
       vals=st.lists(st.integers(-1, 2**32), max_size=4))
def test_property_array_encoders_match_field_by_field(btf, raw, vals):
    for field, value in (("raw", raw), ("vals", vals)):
        c = codec(btf, member_type(btf, "event", field))
        assert c.fast is not None
        assert encoded(c, value) == checked_encode(c, value), field


# --- hand-built BTF: what clang 14 does not emit ----------------------------------------------

class BtfBuilder:
    def __init__(self, endian="<"):
        self.e = endian
        self.types = bytearray()
        self.strings = bytearray(b"\0")

    def s(self, text: str) -> int:
        off = len(self.strings)
        self.strings += text.encode() + b"\0"
        return off

    def add(self, name, kind, size_or_type, vlen=0, kflag=0, extra=b""):
        info = (kflag << 31) | (kind << 24) | vlen
        self.types += struct.pack(self.e + "III", self.s(name) if name else 0, info, size_or_type) + extra

    def u32(self, *words):
        return struct.pack(self.e + f"{len(words)}I", *words)

    def blob(self, version=1) -> bytes:
        hdr = struct.pack(self.e + "HBBIIIII", 0xEB9F, version, 0, 24, 0, len(self.types),
                          len(self.types), len(self.strings))
        return hdr + bytes(self.types) + bytes(self.strings)


def bitfield_btf(endian):
    b = BtfBuilder(endian)
    b.add("u32", Kind.INT, 4, extra=b.u32(32))  # 1
    b.add("u16", Kind.INT, 2, extra=b.u32(16))  # 2
    members = b.u32(b.s("a"), 1, (4 << 24) | 0, b.s("b"), 1, (12 << 24) | 4,
                    b.s("c"), 2, 16, b.s("d"), 2, 32)
    b.add("s", Kind.STRUCT, 8, vlen=4, kflag=1, extra=members)  # 3
    return BTF.from_bytes(b.blob())


@pytest.mark.parametrize("endian, expected", [
    (">", b"\xab\xcd\x12\x34\x56\x78\0\0"),  # big endian: bitfields from the top bit
    ("<", b"\xda\xbc\x34\x12\x78\x56\0\0"),
])
def test_bitfields_both_endians(endian, expected):
    btf = bitfield_btf(endian)
    assert btf.byteorder == ("big" if endian == ">" else "little")
    c = codec(btf, btf.find("s"))
    value = {"a": 0xA, "b": 0xBCD, "c": 0x1234, "d": 0x5678}
    assert c.encode(value) == expected
    assert c.decode(expected) == value


def test_enum64_and_signed_enums():
    b = BtfBuilder()
    vals = b.u32(b.s("NEG"), 0xFFFFFFFB, 0xFFFFFFFF, b.s("ONE"), 1, 0)
    b.add("s64e", Kind.ENUM64, 8, vlen=2, kflag=1, extra=vals)  # 1: signed
    vals = b.u32(b.s("TOP"), 1, 0x80000000)
    b.add("u64e", Kind.ENUM64, 8, vlen=1, kflag=0, extra=vals)  # 2: unsigned
    vals = b.u32(b.s("HI"), 0x80000000)
    b.add("flags", Kind.ENUM, 4, vlen=1, extra=vals)  # 3: unsigned, old-style (no kind_flag)
    vals = b.u32(b.s("MINUS"), 0xFFFFFFFF)
    b.add("sgn", Kind.ENUM, 4, vlen=1, kflag=1, extra=vals)  # 4: signed via kind_flag
    btf = BTF.from_bytes(b.blob())
    s64 = codec(btf, 1)
    assert s64.decode(struct.pack("<q", -5)).name == "NEG" and s64.encode("NEG") == struct.pack("<q", -5)
    u64 = codec(btf, 2)
    top = u64.decode(struct.pack("<Q", 2**63 + 1))
    assert top == 2**63 + 1 and top.name == "TOP"
    assert codec(btf, 3).decode(b"\0\0\0\x80").name == "HI"
    assert codec(btf, 4).decode(b"\xff\xff\xff\xff") == -1
    assert btf.type_str(1) == "enum s64e"


def test_modifiers_tags_and_half_floats():
    b = BtfBuilder()
    b.add("int", Kind.INT, 4, extra=b.u32((1 << 24) | 32))  # 1: signed int
    b.add("user", Kind.TYPE_TAG, 1)  # 2
    b.add("", Kind.PTR, 2)  # 3: int __tag(user) *
    b.add("_Float16", Kind.FLOAT, 2)  # 4
    b.add("half_t", Kind.TYPEDEF, 4)  # 5
    b.add("", Kind.CONST, 5)  # 6
    b.add("", Kind.VOLATILE, 6)  # 7
    b.add("tag", Kind.DECL_TAG, 1, extra=struct.pack("<i", -1))  # 8
    btf = BTF.from_bytes(b.blob())
    assert btf.type_str(3) == "int *" and btf.resolve(2) == 1
    assert btf.type_str(7) == "volatile const half_t" and btf.resolve(7) == 4
    assert codec(btf, 7).decode(codec(btf, 7).encode(1.5)) == 1.5 and codec(btf, 7).size == 2
    assert btf.type(8).component_idx == -1
    assert codec(btf, 3).encode(0xDEAD) == struct.pack("<Q", 0xDEAD)


def test_legacy_int_bitfields():
    """Old BTF without kind_flag puts a bitfield's width in the INT type itself."""
    b = BtfBuilder()
    b.add("u32", Kind.INT, 4, extra=b.u32(32))  # 1
    b.add("u3", Kind.INT, 4, extra=b.u32(3))  # 2: 3-bit unsigned
    members = b.u32(b.s("lo"), 2, 5, b.s("word"), 1, 32)
    b.add("s", Kind.STRUCT, 8, vlen=2, extra=members)  # 3
    btf = BTF.from_bytes(b.blob())
    c = codec(btf, 3)
    assert c.encode({"lo": 5, "word": 1}) == struct.pack("<II", 5 << 5, 1)
    assert c.decode(struct.pack("<II", 0xFF, 2)) == {"lo": 7, "word": 2}


@pytest.mark.parametrize("mutate, message", [
    (lambda raw: b"\0\0" + raw[2:], "bad magic"),
    (lambda raw: raw[:20], "too short"),
    (lambda raw: raw[:-3], "truncated"),
    (lambda raw: raw[:2] + b"\x02" + raw[3:], "unsupported BTF version 2"),
])
def test_malformed_btf(mutate, message):
    b = BtfBuilder()
    b.add("int", Kind.INT, 4, extra=b.u32(32))
    with pytest.raises(LoadError, match=message):
        BTF.from_bytes(mutate(b.blob()))


def test_truncated_type_record():
    b = BtfBuilder()
    b.add("int", Kind.INT, 4, extra=b.u32(32))
    raw = b.blob()
    raw = raw[:12] + struct.pack("<I", len(b.types) - 2) + raw[16:]  # type_len cuts the record
    with pytest.raises(LoadError, match="type section is truncated"):
        BTF.from_bytes(raw)


def test_bad_string_offset_and_typedef_loop():
    b = BtfBuilder()
    b.types += struct.pack("<III", 999, int(Kind.TYPEDEF) << 24, 1)
    with pytest.raises(LoadError, match="string offset 999"):
        BTF.from_bytes(b.blob())
    b = BtfBuilder()
    b.add("a_t", Kind.TYPEDEF, 1)  # 1: typedef of itself
    btf = BTF.from_bytes(b.blob())
    with pytest.raises(LoadError, match="too many levels"):
        btf.resolve(1)


def test_many_types_parse_linearly():
    b = BtfBuilder()
    b.add("u32", Kind.INT, 4, extra=b.u32(32))
    for i in range(20000):
        b.add(f"t{i}", Kind.TYPEDEF, 1)
    members = b.u32(*[w for i in range(500) for w in (b.s(f"f{i}"), 1, 32 * i)])
    b.add("wide", Kind.STRUCT, 2000, vlen=500, extra=members)
    btf = BTF.from_bytes(b.blob())  # well under a second; a quadratic parser would crawl
    assert btf.find("t19999") == 20001 and btf.resolve(20001) == 1
    c = codec(btf, btf.find("wide"))
    assert c.decode(c.encode({"f499": 7})).f499 == 7


def test_unknown_kind():
    b = BtfBuilder()
    b.add("x", 25, 0)
    with pytest.raises(LoadError, match="unknown kind 25"):
        BTF.from_bytes(b.blob())
