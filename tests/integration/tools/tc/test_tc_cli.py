"""`ebpfkit tc` commands on the namespace node of tools/tc/lab.py: attach leaves the fast path
running after the command (the node's nftables forward counter stays at 0 for transfers
between pods), endpoints change it live, stats and status show it, detach removes program,
links and pins (the counter moves again); a foreground run killed by a signal leaves nothing.
Bad input exits 2 (1 for what is or is not attached), never with a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import refused_for_tcx, signalled_run_leaves_nothing, tc_pinnable

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs, creates namespaces: needs root"),
]

SIZE = 2 << 20


def ek(*args, fmt: str | None = None) -> subprocess.CompletedProcess:
    pre = ["--format", fmt] if fmt else []
    return subprocess.run([sys.executable, "-m", "ebpfkit", *pre, "tc", *args], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, NO_COLOR="1", COLUMNS="200"))


def skips_the_stack(lab, source, destination) -> bool:
    lab.reset_forwarded()
    assert lab.transfer(source, destination, SIZE) == SIZE
    return lab.forwarded() == 0


def test_attach_endpoints_stats_status_detach(lab):
    from ebpfkit.tools.tc import pins

    pod1, pod2 = lab.pods
    node = lab.node.name
    done = ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0", "-u", lab.remote.node_device,
              fmt="json")
    if not tc_pinnable():
        assert refused_for_tcx(done), done.stderr
        assert not os.path.exists(pins.pin_set(node).path)
        return
    assert done.returncode == 0, done.stderr
    path = pins.pin_set(node).path
    assert json.loads(done.stdout)["pinned_at"] == path
    assert os.path.isdir(path) and "link-" in " ".join(os.listdir(path))
    assert skips_the_stack(lab, pod1, lab.remote)  # the command has exited: the pins hold it
    assert not skips_the_stack(lab, pod1, pod2)    # pod2 is no endpoint yet: its replies take the stack

    assert ek("endpoint", "add", "--netns", node, f"{pod2.netns}:eth0").returncode == 0
    assert skips_the_stack(lab, pod1, pod2) and skips_the_stack(lab, pod2, lab.remote)
    listed = json.loads(ek("endpoint", "list", "--netns", node, fmt="json").stdout)
    assert sorted((r["netns"], r["addresses"]) for r in listed["rows"]) == \
        sorted([(pod1.netns, pod1.address), (pod2.netns, pod2.address)])

    counters = json.loads(ek("stats", "--netns", node, fmt="json").stdout)["counters"]
    assert counters["to_endpoint"]["bytes"] >= SIZE  # pod1 -> pod2 once pod2 was an endpoint
    # out by the FIB: pod1 -> remote, pod1 -> pod2 (no endpoint yet: routed to its veth), pod2 -> remote
    assert counters["routed"]["bytes"] + counters["to_neigh"]["bytes"] >= 3 * SIZE
    status = json.loads(ek("status", "--netns", node, fmt="json").stdout)
    assert status["uplinks"] == [lab.remote.node_device] and len(status["endpoints"]) == 2

    assert ek("endpoint", "del", "--netns", node, f"{pod2.netns}:eth0").returncode == 0
    assert not skips_the_stack(lab, pod1, pod2)

    done = ek("detach", "--netns", node)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(path)
    assert not skips_the_stack(lab, pod1, lab.remote)
    again = ek("detach", "--netns", node)
    assert again.returncode == 0 and "not attached" in again.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_signalled_run_leaves_nothing(lab, sig):
    pod1, pod2 = lab.pods
    signalled_run_leaves_nothing(["tc", "redirect", "run", "--netns", lab.node.name, "-e", f"{pod1.netns}:eth0",
                                  "-e", f"{pod2.netns}:eth0", "-u", lab.remote.node_device, "1"], sig)
    assert not skips_the_stack(lab, pod1, pod2)


def test_bad_input_is_named_and_exits_2_or_1(lab):
    pod1 = lab.pods[0]
    node = lab.node.name
    cases = [(["redirect", "attach", "--netns", node, "-e", "nocolon"], 2, "is not NETNS:DEV"),
             (["redirect", "attach", "--netns", node, "-e", "ebpfkit-none:eth0"], 2, "no network namespace"),
             (["redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:lo"], 2, "not a veth"),
             (["redirect", "attach", "--netns", node, "-u", "nope9"], 2, "no device 'nope9'"),
             (["redirect", "attach", "--netns", "ebpfkit-none", "-u", "x"], 2, "no network namespace"),
             (["endpoint", "add", "--netns", node, f"{pod1.netns}:eth0"], 1, "not attached"),
             (["stats", "--netns", node], 1, "not attached")]
    for args, code, message in cases:
        done = ek(*args)
        assert done.returncode == code and message in done.stderr and "Traceback" not in done.stderr, \
            (args, done.returncode, done.stderr)
    if not tc_pinnable():
        assert refused_for_tcx(ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0"))
        return
    assert ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0").returncode == 0
    twice = ek("redirect", "attach", "--netns", node, "-e", f"{pod1.netns}:eth0")
    assert twice.returncode == 1 and "already attached" in twice.stderr, twice.stderr
    gone = ek("endpoint", "del", "--netns", node, f"{lab.pods[1].netns}:eth0")
    assert gone.returncode == 2 and "is not an endpoint here" in gone.stderr, gone.stderr
