"""tc redirect against the real kernel, on a node made of namespaces (tools/tc/lab.py): a
"node" with veths to two "pods" and an uplink to a "remote". The ground truth: the bytes of
each TCP transfer the test makes, and the node's own nftables counter on its forward hook,
which counts every packet the node's stack routes: with the fast path on it stays at zero for
those transfers (the stack was skipped), with it off it moves."""

from __future__ import annotations

import os

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs, creates namespaces: needs root"),
]

SIZE = 4 << 20


def open_on(lab, **settings):
    from ebpfkit.tools import tc

    settings.setdefault("uplinks", [lab.remote.node_device])
    return tc.open_redirect(netns=lab.node.name, endpoints=[(p.netns, p.device) for p in lab.pods], **settings)


def test_without_it_the_nodes_stack_forwards_everything(lab):
    pod1, pod2 = lab.pods
    assert lab.transfer(pod1, pod2, SIZE) == SIZE
    assert lab.transfer(pod1, lab.remote, SIZE) == SIZE
    assert lab.forwarded() > 2 * SIZE // 65536  # both ways, at least a packet per 64 KiB sent


def test_pod_to_pod_and_to_remote_skip_the_nodes_stack(lab):
    pod1, pod2 = lab.pods
    with open_on(lab) as session:
        lab.reset_forwarded()
        assert lab.transfer(pod1, pod2, SIZE) == SIZE
        assert lab.transfer(pod2, pod1, SIZE) == SIZE
        assert lab.transfer(pod1, lab.remote, SIZE) == SIZE
        assert lab.transfer(lab.remote, pod2, SIZE) == SIZE
        assert lab.forwarded() == 0  # nothing of it went through the node's stack
        counts = session.sample()
    assert counts["to_endpoint"]["packets"] >= 4 * SIZE // 65536   # into the pods, from pods and remote
    assert counts["routed"]["packets"] + counts["to_neigh"]["packets"] >= 2 * SIZE // 65536  # out to remote
    assert counts["to_endpoint"]["bytes"] >= 3 * SIZE  # three transfers' data ended in a pod


def test_between_two_nodes_both_stacks_are_skipped(lab):
    """Two lab nodes linked as a cluster's are: a pod of one reaches a pod of the other
    through both nodes' stacks, and with the fast path on both through neither."""
    from ebpfkit.tools import tc
    from ebpfkit.tools.tc.lab import LabNode

    with LabNode(purpose="tclab2", network="10.78") as other:
        here, there = lab.connect(other)
        pod, far = lab.pods[0], other.pods[1]
        assert lab.transfer(pod, far, SIZE) == SIZE
        assert lab.forwarded() > SIZE // 65536 and other.forwarded() > SIZE // 65536
        lab.reset_forwarded()
        other.reset_forwarded()
        with open_on(lab, uplinks=[lab.remote.node_device, here]) as near_side, \
                tc.open_redirect(netns=other.node.name, endpoints=[(p.netns, p.device) for p in other.pods],
                                 uplinks=[there]) as far_side:
            assert lab.transfer(pod, far, SIZE) == SIZE
            assert lab.transfer(far, pod, SIZE) == SIZE
            assert (lab.forwarded(), other.forwarded()) == (0, 0)
            assert far_side.sample()["to_endpoint"]["bytes"] >= SIZE  # handed into the far pod
            assert near_side.sample()["to_endpoint"]["bytes"] >= SIZE  # and the way back into ours


def test_the_node_still_answers_for_itself_and_what_it_does_not_own_goes_to_its_stack(lab):
    """Traffic to the node's own address is passed to its stack (and answered)."""
    pod1 = lab.pods[0]
    node_side = type(pod1)(lab.node.name, pod1.node_device, pod1.gateway, pod1.device, pod1.address)
    with open_on(lab) as session:
        assert lab.transfer(pod1, node_side, 100_000) == 100_000
        assert session.sample()["passed"]["packets"] > 0


def test_removing_it_mid_transfer_keeps_the_connection_working(lab):
    pod1, pod2 = lab.pods
    session = open_on(lab)
    try:
        lab.reset_forwarded()
        assert lab.transfer(pod1, pod2, 2 * SIZE, while_sending=session.close) == 2 * SIZE
    finally:
        session.close()
    assert lab.forwarded() > 0  # the rest went through the node's stack again


def test_an_endpoint_removed_takes_the_stack_again_and_one_added_the_fast_path(lab):
    pod1, pod2 = lab.pods
    with open_on(lab) as session:
        session.remove_endpoint(pod2.netns, pod2.device)
        lab.reset_forwarded()
        assert lab.transfer(pod1, pod2, SIZE) == SIZE
        assert lab.forwarded() > 0
        session.add_endpoint(pod2.netns, pod2.device)
        lab.reset_forwarded()
        assert lab.transfer(pod1, pod2, SIZE) == SIZE
        assert lab.forwarded() == 0


def test_bad_endpoints_and_devices_are_named(lab):
    from ebpfkit.errors import ConfigError
    from ebpfkit.tools import tc

    pod1 = lab.pods[0]
    cases = [({"endpoints": [("ebpfkit-no-such-ns", "eth0")]}, "no network namespace 'ebpfkit-no-such-ns'"),
             ({"endpoints": [(pod1.netns, "nope0")]}, "no device 'nope0'"),
             ({"endpoints": [(pod1.netns, "lo")]}, "not a veth"),
             ({"uplinks": ["nope1"]}, "no device 'nope1'"),
             ({"endpoints": [(lab.pods[1].netns, "eth0")], "netns": lab.remote.netns}, "is not in namespace")]
    for settings, message in cases:
        settings.setdefault("netns", lab.node.name)
        with pytest.raises(ConfigError, match=message):
            tc.open_redirect(**settings)


def test_a_killed_process_leaves_nothing_attached_and_the_stack_takes_over(lab):
    """SIGKILL of a process holding the session: its tcx links go with it (no pins); before tcx
    (6.6) its clsact filters are removed by its reaper."""
    import signal
    import subprocess
    import sys

    from helpers import bpf_objects_held_by, still_in_kernel, tc_pinnable

    pod1, pod2 = lab.pods
    code = ("import sys, time\nfrom ebpfkit.tools import tc\n"
            f"s = tc.open_redirect(netns={lab.node.name!r}, endpoints=[(n, 'eth0') for n in sys.argv[1:]], "
            f"uplinks=[{lab.remote.node_device!r}])\nprint('ready', flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, pod1.netns, pod2.netns], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        held = bpf_objects_held_by(proc.pid)
        links = sum(kind == "link" for kind, _ in held)
        assert links == (3 if tc_pinnable() else 0), held  # two endpoints' veths and the uplink
        lab.reset_forwarded()
        assert lab.transfer(pod1, pod2, SIZE) == SIZE and lab.forwarded() == 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert still_in_kernel(held) == set()
    lab.reset_forwarded()
    assert lab.transfer(pod1, pod2, SIZE) == SIZE and lab.forwarded() > 0
