"""pingtrace where netem exists (the VM's kernels; the host has no sch_netem): the test delays
exactly the odd-numbered probes by 20 ms at one hop (a prio qdisc on the client's veth whose
u32 filter sends ICMP echoes with an odd sequence number to a netem child), and checks that
pingtrace puts that delay in that hop's qdisc stage, that `-m 10000` prints exactly those
probes, and that the reader's wakeup shows once the reply comes late. And that a server killed
with SIGKILL leaves nothing, on 6.1 too, where its tc program is a clsact filter."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from helpers import RunningTool, bpf_objects_held_by, ek, still_in_kernel
from ebpfkit.tools import pingtrace

pytestmark = pytest.mark.vm(kernel=["6.1"])

PROBES = 20
# long beside what the emulated guest's Python takes to read a reply (a few ms under TCG)
DELAY_US = 20_000
INTERVAL_US = 40_000


def tc(ns: str, *args: str) -> None:
    subprocess.run(["tc", "-n", ns, *args], check=True, capture_output=True, text=True)


@pytest.fixture
def odd_probes_delayed(netns, veth_pair):
    """Odd-numbered echoes leaving the client's ek0 wait DELAY_US in netem."""
    subprocess.run(["modprobe", "sch_netem"], check=True)
    dev = veth_pair.a.ifname
    tc(netns.name, "qdisc", "add", "dev", dev, "root", "handle", "1:", "prio", "bands", "3")
    tc(netns.name, "qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:", "netem", "delay", f"{DELAY_US}us")
    # the echo's sequence number is 26 bytes into the IPv4 packet (20 of header, 6 into ICMP)
    tc(netns.name, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
       "match", "ip", "protocol", "1", "0xff", "match", "u16", "0x0001", "0x0001", "at", "26", "flowid", "1:3")
    yield dev


@pytest.mark.vm(kernel=["6.1", "6.12"])  # every stage's hook on both kernels
def test_a_netem_delay_lands_in_that_hops_qdisc_stage(netns, veth_pair, odd_probes_delayed):
    a, dev = netns.name, odd_probes_delayed
    with pingtrace.open(target=veth_pair.b.address, count=PROBES, interval_us=INTERVAL_US, netns=a) as session:
        results = list(session.probes())
    assert len(results) == PROBES and not any(r.lost for r in results)
    in_qdisc = f"request qdisc_enqueue {dev}@{a} -> request qdisc_dequeue {dev}@{a}"
    for r in results:
        stages = {s.name: s.us for s in r.stages}
        assert sum(stages.values()) == pytest.approx(r.total_us, rel=0.01)
        if r.seq % 2:
            assert stages[in_qdisc] >= 0.9 * DELAY_US, (r.seq, stages)
            assert r.slowest.name == in_qdisc
            # the reply came while the reader slept: its wakeup is a checkpoint
            points = [c.point for c in r.checkpoints]
            last_receive = len(points) - 1 - points[::-1].index("receive")  # the reply's, back here
            assert last_receive < points.index("wakeup") < points.index("user_copy"), points
        else:
            assert stages[in_qdisc] < 0.5 * DELAY_US, (r.seq, stages)


def test_m_prints_exactly_the_delayed_probes(capsys, netns, veth_pair, odd_probes_delayed):
    rc, out, err = ek(capsys, "--format", "json", "pingtrace", "-c", veth_pair.b.address, "--netns", netns.name,
                      "-C", str(PROBES), "-i", str(INTERVAL_US), "-m", "10000")
    assert rc == 0, err
    printed = [json.loads(line) for line in out.splitlines() if '"seq"' in line]
    assert [p["seq"] for p in printed] == list(range(1, PROBES, 2))
    assert all(p["slowest"].startswith(f"request qdisc_enqueue {odd_probes_delayed}@") for p in printed)


@pytest.fixture
def every_probe_delayed(netns, veth_pair):
    """Everything leaving the client's ek0 waits PATH_MS in netem."""
    subprocess.run(["modprobe", "sch_netem"], check=True)
    tc(netns.name, "qdisc", "add", "dev", veth_pair.a.ifname, "root", "netem", "delay", f"{PATH_MS}ms")


# long beside the guest's stalls under TCG (tens of ms)
PATH_MS, EVERY_MS = 150, 100


@pytest.mark.parametrize("mode", ["compact", "pingpong", "auto"])
def test_mode_decides_whether_probes_overlap(netns, veth_pair, every_probe_delayed, mode):
    """Probes EVERY_MS apart on a path that takes PATH_MS: compact keeps the interval, so each
    probe leaves before the last one's reply; pingpong sends each an interval after the last
    reply; auto as soon as that reply is read and handled (the schedule has passed): its gaps
    are the time the guest takes to handle a result, tens of ms under TCG, never an interval."""
    with pingtrace.open(target=veth_pair.b.address, count=6, interval_us=EVERY_MS * 1000, netns=netns.name,
                        mode=mode) as session:
        results = list(session.probes())
    assert len(results) == 6 and not any(r.lost for r in results)
    assert [(r.checkpoints[0].point, r.checkpoints[-1].point) for r in results] == [("user_tx", "user_rx")] * 6
    assert all(r.rtt_us >= 0.9 * PATH_MS * 1000 for r in results)
    # ms from one probe's reply read to the next probe's send (compact: ideally -50)
    gaps = [(b.checkpoints[0].ns - a.checkpoints[-1].ns) / 1e6 for a, b in zip(results, results[1:])]
    if mode == "compact":
        assert all(g < 0 for g in gaps), gaps
    elif mode == "pingpong":
        assert all(g >= 0.95 * EVERY_MS for g in gaps), gaps
    else:
        assert all(0 <= g < 0.9 * EVERY_MS for g in gaps), gaps


def test_a_killed_server_leaves_nothing_attached(peer_netns, veth_pair):
    b, dev = peer_netns.name, veth_pair.b.ifname
    tool = RunningTool("pingtrace", "-s", "--netns", b)
    try:
        held = bpf_objects_held_by(tool.pid)
        clsact = "pt_reply_out" in tc_show(b, "filter", "show", "dev", dev, "egress")
        tool.stop(signal.SIGKILL)
    finally:
        tool.kill()
    assert tool.returncode == -signal.SIGKILL
    assert held and still_in_kernel(held) == set()
    assert "pt_reply_out" not in tc_show(b, "filter", "show", "dev", dev, "egress")
    kernel = tuple(int(x) for x in os.uname().release.split(".")[:2])
    assert clsact == (kernel < (6, 6)), "tc programs attach through clsact exactly where tcx is missing"


def tc_show(ns: str, *args: str) -> str:
    return subprocess.run(["tc", "-n", ns, *args], check=True, capture_output=True, text=True, timeout=60).stdout
