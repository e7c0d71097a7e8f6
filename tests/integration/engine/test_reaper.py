"""A clsact filter (how tc programs attach on kernels without tcx links) outlives a killed
process unless its reaper removes it. This host has tcx, so the clsact path is taken on
purpose here; the VM's 6.1 takes it on its own (tests/vm/test_pingtrace_vm.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.helpers import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="attaches tc programs: needs root"),
]

CHILD = textwrap.dedent("""
    import sys, time
    import ebpfkit
    from ebpfkit.engine import links, reaper
    from ebpfkit.net.netns import in_netns

    netns_path, ifindex, then = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    src = ('#include "vmlinux.h"\\n#include <bpf/bpf_helpers.h>\\n'
           'SEC("tc") int keep(struct __sk_buff *skb) { return 0; }\\n'
           'char LICENSE[] SEC("license") = "GPL";\\n')
    obj = ebpfkit.compile(text=src, name="reaper_keep.bpf.c").load()
    link = in_netns(netns_path, links._tc_clsact, obj.programs["keep"], ifindex, "ingress")
    print(reaper._child.pid, flush=True)
    if then == "close":
        link.close()
        obj.close()
        print("closed", flush=True)
    else:
        time.sleep(120)
""")


def _filters(netns, device: str) -> str:
    """The kernel's own listing of the device's ingress filters (iproute2's tc)."""
    return subprocess.run(["ip", "netns", "exec", netns.name, "tc", "filter", "show", "dev", device,
                           "ingress"], capture_output=True, text=True, check=True).stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose: the reaper's parent may not have waited for it
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _start(veth_pair, netns, then: str) -> tuple[subprocess.Popen, int]:
    child = subprocess.Popen([sys.executable, "-c", CHILD, netns.path, str(veth_pair.a.ifindex), then],
                             stdout=subprocess.PIPE, text=True)
    reaper_pid = int(child.stdout.readline())
    return child, reaper_pid


def test_sigkill_leaves_no_clsact_filter(veth_pair, netns):
    child, reaper_pid = _start(veth_pair, netns, "sleep")
    try:
        assert "keep" in _filters(netns, veth_pair.a.ifname)
        assert _alive(reaper_pid)
        child.kill()
        child.wait(10)
        assert wait_for(lambda: "keep" not in _filters(netns, veth_pair.a.ifname), 10), \
            _filters(netns, veth_pair.a.ifname)
        assert wait_for(lambda: not _alive(reaper_pid), 10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_clean_close_removes_the_filter_and_the_reaper_goes(veth_pair, netns):
    child, reaper_pid = _start(veth_pair, netns, "close")
    assert child.stdout.readline().strip() == "closed"
    assert "keep" not in _filters(netns, veth_pair.a.ifname)
    assert child.wait(30) == 0
    assert wait_for(lambda: not _alive(reaper_pid), 10)


def test_reaper_leaves_a_filter_that_is_no_longer_ours(veth_pair, netns):
    """Between the death and the reaping, another program took the same handle and priority:
    the reaper checks the program id and leaves it."""
    child, reaper_pid = _start(veth_pair, netns, "sleep")
    try:
        os.kill(reaper_pid, signal.SIGSTOP)  # hold the reaper while the filter changes hands
        device = veth_pair.a.ifname
        shown = _filters(netns, device)
        pref = shown.split("pref ", 1)[1].split()[0]
        handle = shown.split("handle ", 1)[1].split()[0]
        # replace the program behind that filter with a pinned-less one from iproute2's own loader
        obj = _other_program()
        subprocess.run(["ip", "netns", "exec", netns.name, "tc", "filter", "replace", "dev", device,
                        "ingress", "pref", pref, "handle", handle, "bpf", "da", "object-file", obj,
                        "section", "tc"], check=True, capture_output=True)
        child.kill()
        child.wait(10)
        os.kill(reaper_pid, signal.SIGCONT)
        assert wait_for(lambda: not _alive(reaper_pid), 10)
        assert "other" in _filters(netns, device)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        try:
            os.kill(reaper_pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _other_program() -> str:
    import ebpfkit

    src = ('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\n'
           'SEC("tc") int other(struct __sk_buff *skb) { return 0; }\n'
           'char LICENSE[] SEC("license") = "GPL";\n')
    spec = ebpfkit.compile(text=src, name="reaper_other.bpf.c")
    spec.close()  # only its file is wanted
    return spec.path


QDISC_CHILD = textwrap.dedent("""
    import os, sys, time
    from ebpfkit.engine import reaper
    from ebpfkit.net.netns import hold_current, in_netns, iproute

    netns, ifindex, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with iproute(netns) as ipr:
        ipr.tc("replace", kind, ifindex, 0x10000)
    fd = in_netns(netns, hold_current)
    reaper.register_root_qdisc(fd, ifindex, kind, 0x10000)
    os.close(fd)
    print(reaper._child.pid, flush=True)
    time.sleep(120)
""")


def _root_qdisc(netns, device: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns.name, "tc", "qdisc", "show", "dev", device, "root"],
                          capture_output=True, text=True, check=True).stdout


def test_sigkill_puts_the_default_root_qdisc_back(veth_pair, netns):
    """A root qdisc a process put on a device (ratelimit's fq; pfifo here, which this host has)
    is deleted by the reaper when the process is killed, the kernel's default back."""
    child = subprocess.Popen([sys.executable, "-c", QDISC_CHILD, netns.name, str(veth_pair.a.ifindex), "pfifo"],
                             stdout=subprocess.PIPE, text=True)
    try:
        reaper_pid = int(child.stdout.readline())
        assert "qdisc pfifo 1:" in _root_qdisc(netns, veth_pair.a.ifname)
        child.kill()
        child.wait(10)
        assert wait_for(lambda: "pfifo" not in _root_qdisc(netns, veth_pair.a.ifname), 10), \
            _root_qdisc(netns, veth_pair.a.ifname)
        assert "noqueue" in _root_qdisc(netns, veth_pair.a.ifname)
        assert wait_for(lambda: not _alive(reaper_pid), 10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
