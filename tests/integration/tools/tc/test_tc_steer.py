"""tc steering on the lab node: the cluster's "DNS" address (10.96.0.10) is the remote's, and
pod2 holds it too, as a node-local cache does; a query from pod1 to it on UDP 53 is answered
by the remote through the node's stack, and by pod2 once that port is steered there (the
answer says who answered). Steered to a device of the node (one holding the address),
it arrives there: an nftables rule dropping queries that enter from pod1's veth no longer
sees them. Other ports and protocols are not steered."""

from __future__ import annotations

import os

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs, creates namespaces: needs root"),
]

DNS = "10.96.0.10"


@pytest.fixture
def lab(lab):
    """The lab node, the remote answering for the DNS address (on ports 53 and 5353)."""
    lab.add_address(lab.remote.netns, f"{DNS}/32")
    lab.add_route(lab.node.name, f"{DNS}/32", lab.remote.address)
    servers = [lab.serve_udp(lab.remote.netns, DNS, 53, b"remote"),
               lab.serve_udp(lab.remote.netns, DNS, 5353, b"remote 5353")]
    yield lab
    for server in servers:
        server.close()


def open_on(lab, **settings):
    from ebpfkit.tools import tc

    return tc.open_redirect(netns=lab.node.name, endpoints=[(p.netns, p.device) for p in lab.pods],
                            uplinks=[lab.remote.node_device], **settings)


def test_a_port_steered_to_an_endpoint_is_answered_there(lab):
    pod1, pod2 = lab.pods
    lab.add_address(pod2.netns, f"{DNS}/32")
    cache = lab.serve_udp(pod2.netns, DNS, 53, b"node-local cache")
    try:
        assert lab.ask_udp(pod1, DNS, 53) == b"remote"  # no steering: the node routes it out
        with open_on(lab, steering=[f"udp:53={pod2.netns}:eth0"]) as session:
            assert [lab.ask_udp(pod1, DNS, 53) for _ in range(5)] == [b"node-local cache"] * 5
            assert lab.ask_udp(pod1, DNS, 5353) == b"remote 5353"  # another port: not steered
            assert session.sample()["steered"]["packets"] == 5
            session.unsteer("udp", 53)
            assert lab.ask_udp(pod1, DNS, 53) == b"remote"
            session.steer(f"udp:53={pod2.netns}:eth0")
            assert lab.ask_udp(pod1, DNS, 53) == b"node-local cache"
        assert lab.ask_udp(pod1, DNS, 53) == b"remote"  # closed: the stack again
    finally:
        cache.close()


def test_a_port_steered_to_a_node_device_enters_there(lab):
    pod1 = lab.pods[0]
    lab.add_address(lab.node.name, f"{DNS}/32", device="ekdns0")  # the node's cache, on a device of its own
    cache = lab.serve_udp(lab.node.name, DNS, 53, b"node cache")
    lab.nft("add chain inet ebpfkit_lab input { type filter hook input priority 0 ; }")
    lab.nft(f"add rule inet ebpfkit_lab input iifname {pod1.node_device} udp dport 53 drop")
    try:
        assert lab.ask_udp(pod1, DNS, 53, timeout=0.5) is None  # dropped as it enters from pod1's veth
        with open_on(lab, steering=["udp:53=ekdns0"]) as session:
            assert lab.ask_udp(pod1, DNS, 53) == b"node cache"  # it entered by the dummy instead
            assert session.sample()["steered"]["packets"] == 1
    finally:
        cache.close()


def test_bad_steering_is_named(lab):
    from ebpfkit.errors import ConfigError
    from ebpfkit.tools import tc

    for rule, message in (("udp53=x", "is not PROTO:PORT"), ("icmp:1=x", "is not PROTO:PORT"),
                          ("udp:0=x", "must be 1 to 65535"), ("udp:53", "is not PROTO:PORT=NETNS:DEV"),
                          ("udp:53=nope0", "no device 'nope0'"), (f"udp:53={lab.pods[0].netns}:nope1", "no device")):
        with pytest.raises(ConfigError, match=message):
            tc.open_redirect(netns=lab.node.name, steering=[rule])


def test_the_steer_commands_on_an_attached_redirect(lab):
    import json
    import subprocess
    import sys

    from helpers import refused_for_tcx, tc_pinnable

    pod1, pod2 = lab.pods
    node = lab.node.name
    lab.add_address(pod2.netns, f"{DNS}/32")
    cache = lab.serve_udp(pod2.netns, DNS, 53, b"node-local cache")

    def ek(*args):
        return subprocess.run([sys.executable, "-m", "ebpfkit", "--format", "json", "tc", *args],
                              capture_output=True, text=True, timeout=120)

    try:
        done = ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0", "-s", "tcp:53=ekno0")
        if not tc_pinnable():  # the steer commands act on an attached (pinned) redirect
            assert refused_for_tcx(done), done.stderr  # said before any rule is looked at
            assert refused_for_tcx(ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0"))
            return
        assert done.returncode == 2 and "no device 'ekno0'" in done.stderr, done.stderr
        done = ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0")
        assert done.returncode == 0, done.stderr
        assert lab.ask_udp(pod1, DNS, 53) == b"remote"
        assert ek("steer", "add", "--netns", node, f"udp:53={pod2.netns}:eth0").returncode == 0
        assert lab.ask_udp(pod1, DNS, 53) == b"node-local cache"
        listed = json.loads(ek("steer", "list", "--netns", node).stdout)["rows"]
        assert listed == [{"protocol": "udp", "port": 53, "target": f"{pod2.netns}:eth0"}]
        assert json.loads(ek("status", "--netns", node).stdout)["steering"] == [f"udp:53={pod2.netns}:eth0"]
        assert ek("steer", "del", "--netns", node, "udp:53").returncode == 0
        assert lab.ask_udp(pod1, DNS, 53) == b"remote"
        again = ek("steer", "del", "--netns", node, "udp:53")
        assert again.returncode == 2 and "is not steered here" in again.stderr, again.stderr
    finally:
        ek("detach", "--netns", node)
        cache.close()
