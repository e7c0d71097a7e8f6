"""tc programs attach through a tcx bpf_link where the kernel has one (6.6+: the VM's 6.12, as
the host's 6.18) and through a clsact qdisc's filter before (the VM's 6.1). Each variant asserts
the path its kernel took, from the kernel's own views: the link's type, and `tc filter show`
(a clsact filter is listed there, a tcx link is not); and that the program counted exactly the
datagrams the test sent across a veth between two namespaces it created."""

from __future__ import annotations

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
