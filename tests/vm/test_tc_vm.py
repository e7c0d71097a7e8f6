"""tc programs attach through a tcx bpf_link where the kernel has one (6.6+: the VM's 6.12, as
the host's 6.18) and through a clsact qdisc's filter before (the VM's 6.1). Each variant asserts
the path its kernel took, from the kernel's own views: the link's type, and `tc filter show`
(a clsact filter is listed there, a tcx link is not); and that the program counted exactly the
datagrams the test sent across a veth between two namespaces it created."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

import ebpfkit
from ebpfkit.engine import pinned
from ebpfkit.engine.constants import LinkType

pytestmark = pytest.mark.vm(kernel=["6.1", "6.12"])

# Counts the IPv4 UDP datagrams (no IP options: the test's own) to one port, at tc ingress.
SOURCE = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __u16 port = 0;
__u64 datagrams = 0;

SEC("tc")
int count_port(struct __sk_buff *skb)
{
	__u16 dport;

	if (skb->protocol != bpf_htons(0x0800))
		return 0; /* TC_ACT_OK */
	if (bpf_skb_load_bytes(skb, 14 + 20 + 2, &dport, sizeof(dport)) == 0 && bpf_ntohs(dport) == port)
		__sync_fetch_and_add(&datagrams, 1);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def tc_filters(ns: str, dev: str) -> str:
    return subprocess.run(["tc", "-n", ns, "filter", "show", "dev", dev, "ingress"], capture_output=True,
                          text=True, check=True).stdout


def test_tc_attach_takes_this_kernels_path_and_counts(veth_pair, netns, peer_netns, ebpfkit_vm_kernel,
                                                      kernel_version):
    tcx = kernel_version >= (6, 6)
    assert tcx == (ebpfkit_vm_kernel == "6.12")  # 6.1 takes clsact, 6.12 tcx
    a, b = veth_pair.a, veth_pair.b
    receiver = netns.run(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    sender = peer_netns.run(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
    n = 20
    try:
        receiver.bind((a.address, 0))
        receiver.settimeout(10)
        port = receiver.getsockname()[1]
        spec = ebpfkit.compile(text=SOURCE, name="tc_path.bpf.c")
        spec.rodata["port"] = port
        with spec.load() as obj:
            link = netns.run(obj.programs["count_port"].attach_tc, a.ifindex, "ingress")
            filters = tc_filters(netns.name, a.ifname)
            if tcx:
                assert link.is_bpf_link and pinned.link_info(link.fd).type == LinkType.TCX
                assert "(clsact)" not in link.target and "count_port" not in filters, (link.target, filters)
            else:
                assert not link.is_bpf_link
                assert link.target.endswith("(clsact)") and "count_port" in filters, (link.target, filters)
            for i in range(n):
                sender.sendto(b"%d" % i, (a.address, port))
            assert sorted(int(receiver.recv(64)) for _ in range(n)) == list(range(n))
            assert obj.bss["datagrams"] == n
            link.close()
            assert "count_port" not in tc_filters(netns.name, a.ifname)
            sender.sendto(b"after", (a.address, port))
            assert receiver.recv(64) == b"after"
            assert obj.bss["datagrams"] == n  # detached: no longer counted
    finally:
        receiver.close()
        sender.close()


# --- ebpfkit tc redirect on this kernel's path -----------------------------------------------------

def test_tc_redirect_skips_the_nodes_stack_on_this_kernels_path(ebpfkit_vm_kernel, kernel_version):
    """The lab node (tools/tc/lab.py): pod to pod and pod to remote arrive whole while the
    node's nftables forward counter stays at 0; on 6.1 through clsact filters (which the
    kernel lists while it runs, and which are gone after), on 6.12 through tcx links. A
    persistent attach needs tcx: 6.1 says so (exit 3), 6.12 pins it."""
    from ebpfkit.errors import NotSupportedError
    from ebpfkit.tools import tc
    from ebpfkit.tools.tc.lab import LabNode

    size = 1 << 20
    with LabNode() as lab:
        pod1, pod2 = lab.pods
        settings = {"netns": lab.node.name, "endpoints": [(p.netns, p.device) for p in lab.pods],
                    "uplinks": [lab.remote.node_device]}
        with tc.open_redirect(**settings) as session:
            filters = tc_filters(lab.node.name, pod1.node_device)
            assert ("tc_redirect" in filters) == (kernel_version < (6, 6)), filters
            lab.reset_forwarded()
            assert lab.transfer(pod1, pod2, size) == size and lab.transfer(pod1, lab.remote, size) == size
            assert lab.forwarded() == 0
            assert session.sample()["to_endpoint"]["packets"] > 0
        assert "tc_redirect" not in tc_filters(lab.node.name, pod1.node_device)
        lab.reset_forwarded()
        assert lab.transfer(pod1, pod2, size) == size and lab.forwarded() > 0
        if kernel_version < (6, 6):
            with pytest.raises(NotSupportedError, match="needs tcx links"):
                tc.attach_redirect(**settings)
        else:
            tc.attach_redirect(**settings).close()
            try:
                lab.reset_forwarded()
                assert lab.transfer(pod1, pod2, size) == size and lab.forwarded() == 0
            finally:
                assert tc.detach_redirect(lab.node.name)


def iperf3(lab, source, destination, seconds: float, udp_rate: str | None = None) -> float:
    """Bits per second the receiver got from ``source`` (TCP, or UDP at ``udp_rate``)."""
    import json
    import time

    server = subprocess.Popen(["ip", "netns", "exec", destination.netns, "iperf3", "-s", "-B", destination.address,
                               "-p", "5299", "-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        udp = ["-u", "-b", udp_rate] if udp_rate else []
        out = subprocess.run(["ip", "netns", "exec", source.netns, "iperf3", "-c", destination.address, "-p", "5299",
                              "-t", str(seconds), "-J", *udp], capture_output=True, text=True, timeout=120).stdout
    finally:
        server.kill()
        server.wait()
    end = json.loads(out)["end"]
    if not udp_rate:
        return end["sum_received"]["bits_per_second"]
    return end["sum"]["bits_per_second"] * (1 - end["sum"]["lost_percent"] / 100)  # what the server got


@pytest.mark.vm(kernel=["6.1"])  # 6.12's tcx path paces in the attach test below
def test_tc_ratelimit_paces_an_endpoint_to_its_rate_and_drops_beyond_the_horizon():
    """EDT at the uplink's egress for pod1 (a clsact filter): an iperf3 stream to the remote
    gets the configured rate within 5% at 10 and 100 Mbit/s (TCP goodput: the rate counts IP
    bytes); pod2, not limited, is not held to it; with a 1 ms horizon, a UDP flood at 5x the
    rate is dropped and counted. fq is on the device meanwhile and gone after."""
    from ebpfkit.tools import tc
    from ebpfkit.tools.tc.lab import LabNode

    with LabNode() as lab:
        pod1, pod2 = lab.pods
        uplink = lab.remote.node_device
        for mbit in (10, 100):
            with tc.open_ratelimit(netns=lab.node.name, device=uplink,
                                   rules=[f"endpoint {pod1.netns}:eth0 rate {mbit}mbit"]) as session:
                assert "qdisc fq" in qdiscs(lab.node.name, uplink)
                got = iperf3(lab, pod1, lab.remote, 5) / 1e6
                other = iperf3(lab, pod2, lab.remote, 2) / 1e6
                [row] = session.sample()
            goodput = mbit * 1448 / 1500  # TCP payload of a 1500-byte IP packet with timestamps
            assert abs(got - goodput) <= 0.05 * goodput, (mbit, got)
            assert other > 1.5 * mbit or other > 1.5 * got, (mbit, other)
            assert row["delayed"] > 0 and row["bytes"] > 0, row
        assert "qdisc fq" not in qdiscs(lab.node.name, uplink)
        with tc.open_ratelimit(netns=lab.node.name, device=uplink,
                               rules=[f"src {pod1.address} rate 10mbit horizon 1ms"]) as session:
            received = iperf3(lab, pod1, lab.remote, 3, udp_rate="50M") / 1e6
            [row] = session.sample()
        assert row["dropped"] > 0 and received <= 10 * 1.1, (row, received)


def qdiscs(netns: str, dev: str) -> str:
    return subprocess.run(["tc", "-n", netns, "qdisc", "show", "dev", dev], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("sig", ["SIGINT", "SIGKILL"])
def test_a_signalled_ratelimit_run_leaves_nothing(sig, kernel_version):
    """`tc ratelimit run` killed: its program goes (its tcx link with the process; on 6.1 its
    clsact filter, by the engine's reaper), and the device's qdisc is the kernel's default
    again (the reaper too, after a SIGKILL)."""
    import signal
    import sys

    from helpers import bpf_objects_held_by, still_in_kernel, wait_for

    from ebpfkit.tools.tc.lab import LabNode

    def egress_filters() -> str:
        return subprocess.run(["tc", "-n", lab.node.name, "filter", "show", "dev", uplink, "egress"],
                              capture_output=True, text=True, check=True).stdout

    with LabNode() as lab:
        uplink = lab.remote.node_device
        proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "tc", "ratelimit", "run", "--netns", lab.node.name,
                                 "-d", uplink, "-r", f"src {lab.pods[0].address} rate 10mbit", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for line in proc.stderr:
                if "Hit Ctrl-C" in line:
                    break
            held = bpf_objects_held_by(proc.pid)
            assert "qdisc fq" in qdiscs(lab.node.name, uplink)
            if kernel_version < (6, 6):
                assert "tc_ratelimit" in egress_filters()
            else:
                assert any(kind == "link" for kind, _ in held), held
            proc.send_signal(getattr(signal, sig))
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert wait_for(lambda: "qdisc fq" not in qdiscs(lab.node.name, uplink), 10), qdiscs(lab.node.name, uplink)
        assert wait_for(lambda: "tc_ratelimit" not in egress_filters(), 10), egress_filters()
        assert still_in_kernel(held) == set()


def test_tc_ratelimit_attach_outlives_its_command_where_there_are_tcx_links(kernel_version):
    """`tc ratelimit attach` (tcx links: 6.12) paces after the command has exited, `stats`
    reads it from the pins, `detach` removes it and puts the default qdisc back; 6.1 says it
    needs tcx links (exit 3)."""
    import json
    import sys

    from ebpfkit.tools.tc.lab import LabNode

    def ek(*args):
        return subprocess.run([sys.executable, "-m", "ebpfkit", "--format", "json", "tc", "ratelimit", *args],
                              capture_output=True, text=True, timeout=300)

    with LabNode() as lab:
        node, uplink, pod1 = lab.node.name, lab.remote.node_device, lab.pods[0]
        done = ek("attach", "--netns", node, "-d", uplink, "-r", f"endpoint {pod1.netns}:eth0 rate 10mbit")
        if kernel_version < (6, 6):
            assert done.returncode == 3 and "needs tcx links" in done.stderr, done.stderr
            assert "qdisc fq" not in qdiscs(node, uplink)
            return
        assert done.returncode == 0, done.stderr
        try:
            got = iperf3(lab, pod1, lab.remote, 4) / 1e6
            assert abs(got - 10 * 1448 / 1500) <= 0.05 * 10 * 1448 / 1500, got
            [row] = json.loads(ek("stats", "--netns", node, "-d", uplink).stdout)["rules"]
            assert row["delayed"] > 0 and row["bytes"] > 3_000_000, row
        finally:
            assert ek("detach", "--netns", node, "-d", uplink).returncode == 0
        assert "qdisc fq" not in qdiscs(node, uplink)
        assert not os.path.exists(f"/sys/fs/bpf/ebpfkit/tc/ratelimit@{node}")
