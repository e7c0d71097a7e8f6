"""Maps opened by fd, pin or id, typed through the BTF the kernel keeps for them; C enums
read from an object's BTF; and the hash functions that exist in C and in Python, the C one
run in the kernel (BPF_PROG_TEST_RUN) on the same inputs as the Python one."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ebpfkit
from ebpfkit.engine.btftypes import codec
from ebpfkit.engine.constants import MapType
from ebpfkit.engine.maps import KernelMap, create_map
from ebpfkit.engine.pinned import FdMap
from ebpfkit.engine.pinset import PinSet
from ebpfkit.errors import MapError

pytestmark = pytest.mark.integration

XDP_DIR = Path(ebpfkit.__file__).parent / "tools" / "xdp"
GUARD_DIR = Path(ebpfkit.__file__).parent / "tools" / "guard"

TYPED = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

enum pt_colour { PT_RED = 1, PT_GREEN = 2, PT_BLUE = 40 };
struct pt_point { __u32 x; __s16 y; char tag[6]; };
struct pt_sample { enum pt_colour colour; __u64 hits; };

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct pt_point);
	__type(value, struct pt_sample);
} samples SEC(".maps");

SEC("xdp")
int count_red(struct xdp_md *ctx)
{
	struct pt_point p = { .x = 7, .y = -3, .tag = "xdp" };
	struct pt_sample s = { .colour = PT_RED, .hits = 1 }, *old;

	old = bpf_map_lookup_elem(&samples, &p);
	if (old)
		s.hits = old->hits + 1;
	bpf_map_update_elem(&samples, &p, &s, BPF_ANY);
	return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture(scope="module")
def typed():
    obj = ebpfkit.compile(text=TYPED, name="btfmaps.bpf.c").load()
    yield obj
    obj.close()


def test_map_by_id_and_pin_is_typed_by_its_kernel_btf(typed):
    prog = typed.programs["count_red"]
    for _ in range(3):  # the program writes {x=7, y=-3, tag="xdp"} -> {PT_RED, hits}
        prog.test_run(bytes(64))
    pins = PinSet(f"pytest-btfmaps-{os.getpid()}")
    pin_dir = pins.path
    try:
        pins.create("test")
        pins.pin("samples", typed.maps["samples"].fd)
        with KernelMap.by_id(typed.maps["samples"].raw.id) as by_id, \
                KernelMap.open_pinned(os.path.join(pin_dir, "samples")) as by_pin:
            for m in (by_id, by_pin):
                ((key, value),) = m.items()
                assert key == {"x": 7, "y": -3, "tag": "xdp"}
                assert value.colour == 1 and value.colour.name == "PT_RED" and value.hits == 3
            by_pin[{"x": 1, "y": 2, "tag": "user"}] = {"colour": "PT_BLUE", "hits": 9}
            assert typed.maps["samples"][{"x": 1, "y": 2, "tag": "user"}].colour.name == "PT_BLUE"
            assert by_id.delete({"x": 1, "y": 2, "tag": "user"}) and len(by_id) == 1
            with pytest.raises(MapError, match="no field 'z'"):
                by_id[{"z": 1}] = {"hits": 1}
            assert by_id.btf.enum("pt_colour") == {"PT_RED": 1, "PT_GREEN": 2, "PT_BLUE": 40}
    finally:
        pins.remove()
    assert not os.path.exists(pin_dir)


def test_map_without_btf_is_ints_and_bytes():
    with KernelMap(FdMap(create_map(MapType.HASH, 4, 3, 4, "pytest_raw"))) as m:
        assert m.btf is None
        m[5] = b"abc"
        assert dict(m.items()) == {5: b"abc"}


def test_missing_enum_names_itself(typed):
    with pytest.raises(KeyError, match="no enum 'shade'"):
        typed.btf.enum("shade")
    assert typed.btf.enum("pt_colour", strip="PT_") == {"red": 1, "green": 2, "blue": 40}


def test_xdp_rule_constants_are_the_filters_enums():
    from ebpfkit.tools.xdp import rules

    spec = ebpfkit.compile(XDP_DIR / "xdp_filter.bpf.c")
    try:
        port_dir = spec.btf.enum("rule_port_dir", strip="RULE_PORT_")
        assert (rules.PORT_NONE, rules.PORT_DST, rules.PORT_SRC) == (port_dir["none"], port_dir["dst"],
                                                                     port_dir["src"])
        bits = spec.btf.enum("active_bits")
        for name in ("HAS_SRC4", "HAS_DST4", "HAS_SRC6", "HAS_DST6", "HAS_PORT_DST", "HAS_PORT_SRC",
                     "HAS_PROTO"):
            assert getattr(rules, name) == bits[name], name
    finally:
        spec.close()


# --- hashes in C and Python ----------------------------------------------------------------

def _hash_program(header_dir: Path, header: str, key: str, function: str):
    """A tiny XDP program returning ``function(key)`` of the key in the packet: the C hash
    of a tool's header, run in the kernel by BPF_PROG_TEST_RUN."""
    text = rf"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "ebpfkit.h"
#include "{header}"

EK_EXPORT_TYPE({key}); /* the test encodes the key through BTF */

SEC("xdp")
int hash_key(struct xdp_md *ctx)
{{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	{key} k;

	if (data + sizeof(k) > end)
		return -1;
	__builtin_memcpy(&k, data, sizeof(k));
	return {function}(&k);
}}
char LICENSE[] SEC("license") = "GPL";
"""
    spec = ebpfkit.compile(text=text, name=f"hash_{function}.bpf.c", cflags=("-I", str(header_dir)))
    return spec.load()


@pytest.fixture(scope="module")
def flow_hash_prog():
    obj = _hash_program(XDP_DIR, "xdp_lb.h", "struct lb_flow_key", "lb_flow_hash")
    yield obj
    obj.close()


@pytest.fixture(scope="module")
def filter_bit_prog():
    obj = _hash_program(GUARD_DIR, "guard.h", "struct guard_key", "guard_filter_bit")
    yield obj
    obj.close()


def _run(obj, key) -> int:
    data = codec(obj.btf, obj.btf.find(key[0], "struct")).encode(key[1])
    return obj.programs["hash_key"].test_run(data.ljust(64, b"\0")).retval


addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6))
ports = st.integers(0, 65535)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=st.one_of(st.tuples(st.ip_addresses(v=4), st.ip_addresses(v=4)),
                      st.tuples(st.ip_addresses(v=6), st.ip_addresses(v=6))),
       sport=ports, dport=ports, proto=st.sampled_from([6, 17, 132]))
def test_maglev_flow_hash_is_the_programs(flow_hash_prog, pair, sport, dport, proto):
    from ebpfkit.tools.xdp.lb import flow_hash

    src, dst = pair
    key = {"src": src.packed, "dst": dst.packed, "sport": sport, "dport": dport, "proto": proto,
           "family": src.version}
    assert _run(flow_hash_prog, ("lb_flow_key", key)) == flow_hash(str(src), str(dst), sport, dport, proto)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dev=st.one_of(st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 64) - 1)),
       ino=st.one_of(st.integers(0, 1 << 40), st.integers(0, (1 << 64) - 1)))
def test_guard_filter_bit_is_the_programs(filter_bit_prog, dev, ino):
    from ebpfkit.tools.guard.core import READ_MARK, filter_bit

    for key in ((dev, ino), (dev, READ_MARK), (dev, 0)):
        assert _run(filter_bit_prog, ("guard_key", {"dev": key[0], "ino": key[1]})) == filter_bit(key)


def test_hashes_differ_by_input(flow_hash_prog):
    # a program returning a constant would agree with nothing above; make sure it varies
    seen = {_run(flow_hash_prog, ("lb_flow_key", {"src": socket.inet_aton("10.0.0.1"), "sport": p,
                                                  "family": 4})) for p in range(50)}
    assert len(seen) == 50
