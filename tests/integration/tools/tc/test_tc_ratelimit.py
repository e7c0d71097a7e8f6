"""tc ratelimit as the kernel allows it: without an fq qdisc, which EDT needs, it says so (exit
3) leaving the device as it was; attach also needs tcx (pins); bad rules are named (exit 2). The rates
themselves are measured in the VM (tests/vm/test_tc_vm.py), whose kernels have fq."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs, creates namespaces: needs root"),
]


def ek(*args):
    return subprocess.run([sys.executable, "-m", "ebpfkit", "tc", "ratelimit", "run", *args], capture_output=True,
                          text=True, timeout=120)


def root_qdisc(lab, device: str) -> str:
    from ebpfkit.net.netns import iproute

    with iproute(lab.node.name) as ipr:
        index = ipr.link_lookup(ifname=device)[0]
        return [q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index) if q["parent"] == 0xFFFFFFFF][0]


def test_without_fq_it_says_so_and_leaves_the_device_alone(lab):
    """Where the kernel has no fq qdisc (this project's hosts), ratelimit exits 3; where it has
    one (a distribution kernel loads sch_fq on demand) it runs. Either way the device's root
    qdisc is as it was afterwards. (The limit itself is measured in the VM: test_tc_vm.py.)"""
    from ebpfkit.engine import features

    before = root_qdisc(lab, lab.remote.node_device)
    done = ek("--netns", lab.node.name, "-d", lab.remote.node_device, "-r", f"src {lab.pods[0].address} rate 10mbit",
              "1", "1")
    if features.probe("fq").supported:
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    else:
        assert done.returncode == 3 and "no fq qdisc" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert root_qdisc(lab, lab.remote.node_device) == before
    assert features.probe("tc").supported  # tc itself works here: it is fq that is missing


def test_bad_rules_and_devices_are_named(lab):
    node, dev = lab.node.name, lab.remote.node_device
    for args, message in (
            (["-d", dev, "-r", "src 10.0.0.1 rate fast"], "is not a rate"),
            (["-d", dev, "-r", "src 10.0.0.1 rate 0mbit"], "is not a rate"),
            (["-d", dev, "-r", "src 10.0.0.300 rate 1mbit"], "is not an IPv4 address"),
            (["-d", dev, "-r", "src 10.0.0.1 rate 1mbit horizon soon"], "is not a horizon"),
            (["-d", dev, "-r", "dst 10.0.0.1 rate 1mbit"], "is not 'src ADDR"),
            (["-d", dev, "-r", "endpoint nocolon rate 1mbit"], "is not NETNS:DEV"),
            (["-d", "nope3", "-r", "src 10.0.0.1 rate 1mbit"], "no device 'nope3'"),
            (["-d", dev, "-r", "cgroup /nonexistent/cg rate 1mbit"], "does not exist")):
        done = ek("--netns", node, *args, "1", "1")
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, \
            (args, done.stderr)


def test_attach_stats_and_detach_as_the_kernel_allows(lab):
    """attach leaves the pacing pinned where the kernel has fq and tcx (then stats and detach
    act on it); where it lacks either it exits 3 naming which, and pins nothing."""
    from ebpfkit.engine import features

    from helpers import refused_for_tcx, tc_pinnable

    node, dev = lab.node.name, lab.remote.node_device

    def ratelimit(*args):
        return subprocess.run([sys.executable, "-m", "ebpfkit", "tc", "ratelimit", *args, "--netns", node, "-d", dev],
                              capture_output=True, text=True, timeout=120)

    done = ratelimit("attach", "-r", f"src {lab.pods[0].address} rate 10mbit")
    if features.probe("fq").supported and tc_pinnable():
        assert done.returncode == 0, done.stderr
        assert ratelimit("stats").returncode == 0 and root_qdisc(lab, dev) == "fq"
        assert ratelimit("detach").returncode == 0
    elif not features.probe("fq").supported:
        assert done.returncode == 3 and "fq" in done.stderr and "Traceback" not in done.stderr, done.stderr
    else:
        assert refused_for_tcx(done), done.stderr
    assert not os.path.exists("/sys/fs/bpf/ebpfkit/tc")  # nothing left pinned
    for command, code, message in (("stats", 1, "is not attached"), ("detach", 0, "was not attached")):
        done = ratelimit(command)
        assert done.returncode == code and message in done.stderr, (command, done.stderr)
