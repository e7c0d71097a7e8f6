"""engine.inventory lists the kernel's programs, links and maps: checked against what the
test itself loads and attaches (ids from its own objects, types and names from its C), and
gone from the listing once it closes them."""

from __future__ import annotations

import os

import pytest

import ebpfkit
from ebpfkit.engine import inventory
from ebpfkit.engine.constants import LinkType, MapType, ProgType
from helpers import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

PROGRAM = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 8);
    __type(key, u32);
    __type(value, u64);
} inv_counts SEC(".maps");

SEC("tp/syscalls/sys_enter_getppid") int inv_tp(void *ctx) { return 0; }
SEC("raw_tp/sys_enter") int inv_raw_tp(void *ctx) { return 0; }
SEC("xdp") int inv_xdp(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "GPL";
"""


def test_listing_shows_what_was_loaded_and_attached_until_closed(veth_pair, netns):
    ifindex = veth_pair.a.ifindex
    with ebpfkit.compile(text=PROGRAM, name="inventory.bpf.c").load() as obj:
        progs = {name: p.info().id for name, p in obj.programs.items()}
        map_id = obj.maps["inv_counts"].raw.id
        attached = {"inv_tp": obj.programs["inv_tp"].attach(),
                    "inv_raw_tp": obj.programs["inv_raw_tp"].attach(),
                    "inv_xdp": netns.run(obj.programs["inv_xdp"].attach_xdp, ifindex, "generic")}

        listed = {p.id: p for p in inventory.programs()}
        types = {"inv_tp": ProgType.TRACEPOINT, "inv_raw_tp": ProgType.RAW_TRACEPOINT, "inv_xdp": ProgType.XDP}
        for name, prog_id in progs.items():
            assert (listed[prog_id].name, listed[prog_id].type) == (name, types[name])
            assert inventory.program(prog_id) == listed[prog_id]

        found = next(m for m in inventory.maps() if m.id == map_id)
        assert (found.type, found.name, found.key_size, found.value_size, found.max_entries) == \
            (MapType.HASH, "inv_counts", 4, 8, 8)
        assert inventory.map(map_id) == found

        links = {link.prog_id: link for link in inventory.links() if link.prog_id in progs.values()}
        expected = {"inv_tp": (LinkType.PERF_EVENT, "tracepoint sys_enter_getppid"),
                    "inv_raw_tp": (LinkType.RAW_TRACEPOINT, "sys_enter"),
                    "inv_xdp": (LinkType.XDP, f"ifindex {ifindex}")}
        for name, (link_type, target) in expected.items():
            link = links[progs[name]]
            assert (link.type, link.target) == (link_type, target), link
            assert link.id == attached[name].info().id
            assert inventory.link(link.id) == link
        link_ids = [link.id for link in links.values()]

    # freed after an RCU grace period
    assert wait_for(lambda: not set(progs.values()) & set(inventory.ids("prog"))), progs
    assert wait_for(lambda: not set(link_ids) & set(inventory.ids("link"))), link_ids
    assert wait_for(lambda: map_id not in inventory.ids("map")), map_id
    assert inventory.program(progs["inv_tp"]) is None and inventory.map(map_id) is None
    assert not {p.id for p in inventory.programs()} & set(progs.values())


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="prog, link, map"):
        inventory.ids("btf")


def test_detach_links_of_a_program_found_through_the_listing(veth_pair, netns):
    """pinned.detach_links_of: what `xdp ... detach` does to a foreground run's link, which
    no pin holds: found by program id among the kernel's links, detached, the link left."""
    from ebpfkit.engine.pinned import detach_links_of
    from ebpfkit.net import xdp_attached

    a = veth_pair.a
    with ebpfkit.compile(text=PROGRAM, name="inventory.bpf.c").load() as obj:
        prog = obj.programs["inv_xdp"]
        link = netns.run(prog.attach_xdp, a.ifindex, "generic")
        prog_id = prog.info().id
        assert xdp_attached(netns.name, a.ifname)["prog_id"] == prog_id
        assert not detach_links_of(LinkType.TCX, prog_id)  # another link type: left alone
        assert xdp_attached(netns.name, a.ifname)["prog_id"] == prog_id
        assert detach_links_of(LinkType.XDP, prog_id)
        assert xdp_attached(netns.name, a.ifname) == {}
        assert inventory.link(link.info().id) is not None  # detached, not destroyed: its fd is ours
        assert not detach_links_of(LinkType.XDP, prog_id + 1_000_000)


def test_program_info_carries_the_kernels_run_time_statistics():
    """What the exporter reports per program: run_cnt counts each run while run-time
    statistics are on; Object.program_ids() names the ids of its loaded programs."""
    from ebpfkit.engine import run_time_stats

    frame = bytes(14) + bytes(46)  # a zeroed Ethernet frame: inv_xdp passes anything
    with ebpfkit.compile(text=PROGRAM, name="inventory.bpf.c").load() as obj:
        assert obj.program_ids() == {name: p.info().id for name, p in obj.programs.items()}
        prog = obj.programs["inv_xdp"]
        with run_time_stats():
            before = inventory.program(prog.info().id)
            prog.test_run(frame, repeat=40)
            after = inventory.program(prog.info().id)
        assert after.run_cnt - before.run_cnt == 40 and after.run_time_ns > before.run_time_ns
