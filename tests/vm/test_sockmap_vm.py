"""sockmap's two attach paths, each on a kernel that takes it: on 6.1 (no sockmap bpf_links
before 6.10) sk_msg and sk_skb are attached to the map with BPF_PROG_ATTACH, the path the
host (6.18) never takes; on 6.12 through sockmap links, as on the host. Each variant asserts
the path its kernel takes, from the pins and the kernel's own link info.

Ground truth is the test's own traffic: sha256 of both ends, FIONREAD against what was
sent, and the kernel's list of programs before and after disable / SIGKILL."""

from __future__ import annotations

import array
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import termios
import threading

import pytest

from ebpfkit.tools import sockmap
from ebpfkit.engine import pinned
from ebpfkit.engine.constants import LinkType
from ebpfkit.engine.features import has_kernel_function
from helpers import wait_for

# 6.1: BPF_PROG_ATTACH on the map; 6.12: sockmap links (6.10+)
pytestmark = pytest.mark.vm(kernel=["6.1"], timeout=900)

MiB = 1 << 20
OUR_PROGRAMS = {"sockmap_redirect", "sockmap_pass"}


def loaded_sockmap_programs() -> list[str]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True)
    return [p.get("name", "") for p in json.loads(out.stdout or "[]")
            if p.get("name", "") in OUR_PROGRAMS or p.get("type") == "sk_msg"]


def pair():
    with socket.create_server(("127.0.0.1", 0)) as lst:
        client = socket.create_connection(lst.getsockname(), timeout=30)
        server, _ = lst.accept()
    server.settimeout(30)
    return client, server


def transfer(client, server, total):
    """Send ``total`` bytes client -> server and check they arrive intact."""
    got, sha_in = [0], hashlib.sha256()

    def receive():
        while chunk := server.recv(MiB):
            sha_in.update(chunk)
            got[0] += len(chunk)

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    sha_out, block = hashlib.sha256(), os.urandom(MiB)
    for i in range(total // MiB):
        chunk = block[i % 251:] + block[:i % 251]
        client.sendall(chunk)
        sha_out.update(chunk)
    client.shutdown(socket.SHUT_WR)
    reader.join(120)
    assert got[0] == total, f"{got[0]} of {total} bytes arrived"
    assert sha_in.digest() == sha_out.digest()


def fionread(sock) -> int:
    buf = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    return buf[0]


def assert_attach_path_of_this_kernel(directory: str, links: bool) -> None:
    """Links on 6.10+ (the pin is a sockmap link), else BPF_PROG_ATTACH (the map holds the
    program: no link pin, the program itself is pinned)."""
    pins = set(os.listdir(directory))
    if links:
        assert "link_sk_msg" in pins, pins
        fd = pinned.open_pin(os.path.join(directory, "link_sk_msg"))
        try:
            assert pinned.link_info(fd).type == LinkType.SOCKMAP
        finally:
            os.close(fd)
    else:
        assert "link_sk_msg" not in pins and "prog_sk_msg" in pins, pins


@pytest.mark.vm(kernel=["6.1", "6.12"], timeout=900)  # each kernel its own attach path
def test_enable_redirects_through_this_kernels_attach_path_and_disable_detaches(child_cgroup, ebpfkit_vm_kernel,
                                                                                  kernel_version):
    links = kernel_version >= (6, 10)
    assert links == (ebpfkit_vm_kernel == "6.12")  # 6.1 takes BPF_PROG_ATTACH, 6.12 links
    assert not loaded_sockmap_programs()
    enablement = sockmap.enable(child_cgroup.path)
    try:
        assert_attach_path_of_this_kernel(enablement.directory, links)
        assert "sockmap_redirect" in loaded_sockmap_programs()
        with child_cgroup.entered():
            client, server = pair()
        with client, server:
            transfer(client, server, 64 * MiB)
            stats = enablement.stats()
            assert stats["msgs_redirected"] > 0 and stats["bytes_redirected"] >= 64 * MiB, stats
        with child_cgroup.entered():
            a, b = pair()
        with a, b:
            before = enablement.stats()["bytes_redirected"]
            a.sendall(b"x" * 1000)
            assert wait_for(lambda: enablement.stats()["bytes_redirected"] == before + 1000, 10)
            assert b.recv(1000, socket.MSG_PEEK | socket.MSG_WAITALL) == b"x" * 1000
            # FIONREAD counts redirected bytes only where the kernel has tcp_bpf_ioctl (the
            # host's 6.18 does: tested there); status says which, and 6.1 indeed reports 0
            counts = enablement.status()["fionread_counts_redirected"]
            assert counts == has_kernel_function("tcp_bpf_ioctl")
            assert fionread(b) == (1000 if counts else 0)
            sockmap.disable(child_cgroup.path)
            enablement = None
            # accelerated before disable, still carrying data after it
            a.sendall(b"y" * 500)
            assert b.recv(1000, socket.MSG_WAITALL) == b"x" * 1000
            assert b.recv(500, socket.MSG_WAITALL) == b"y" * 500
    finally:
        if enablement is not None:
            sockmap.disable(child_cgroup.path)
    assert wait_for(lambda: not loaded_sockmap_programs(), 10), loaded_sockmap_programs()


def test_sigkill_of_a_foreground_run_leaves_no_program(child_cgroup):
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "sockmap", "run", "--cgroup",
                             child_cgroup.path, "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        assert wait_for(lambda: "sockmap_redirect" in loaded_sockmap_programs(), timeout=120), \
            proc.stdout.read() if proc.poll() is not None else "not attached in time"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    # the process's links (6.12) or the map (6.1) were the programs' only holders: gone with it
    assert wait_for(lambda: not loaded_sockmap_programs(), timeout=20), loaded_sockmap_programs()
