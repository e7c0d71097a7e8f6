"""Ground truth about interrupts for the tests: the kernel's own counts (/proc/interrupts,
/proc/softirqs) and work that raises known interrupts (O_DIRECT writes the disk answers with
an IRQ; UDP datagrams over a test veth, each raising NET_RX on the sending CPU)."""

from __future__ import annotations

import mmap
import os
import socket
import time

import pytest

from ebpfkit.net import in_netns
from helpers import force_receive_buffer

WRITES = 200
BLOCK = 4096
PORT = 9419
CPU = max(os.sched_getaffinity(0))  # the CPU send_udp() sends from


def interrupts() -> dict[int, tuple[str, int]]:
    """/proc/interrupts' numbered IRQs: {irq: (handler name, count summed over CPUs)}."""
    with open("/proc/interrupts") as f:
        ncpus = len(f.readline().split())
        result = {}
        for line in f:
            fields = line.split()
            if fields and fields[0].rstrip(":").isdigit():
                counts = [int(c) for c in fields[1:1 + ncpus]]
                result[int(fields[0].rstrip(":"))] = (fields[-1], sum(counts))
    return result


def disk_irqs(path) -> dict[int, str]:
    """The request-queue IRQs ({irq: name}) of the virtio disk ``path`` is on."""
    st = os.stat(path)
    block = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if os.path.exists(os.path.join(block, "partition")):
        block = os.path.dirname(block)
    device = os.path.basename(os.path.realpath(os.path.join(block, "device")))  # e.g. virtio1
    found = {irq: name for irq, (name, _) in interrupts().items()
             if name.startswith(f"{device}-") and not name.endswith("-config")}
    if not found:
        pytest.fail(f"{path} is on {os.path.basename(block)} ({device}), which has no IRQ of its "
                    f"own in /proc/interrupts: this test needs a virtio disk")
    return found


def direct_writes(path, n: int = WRITES) -> None:
    """``n`` O_DIRECT writes, each fsync'd: each waits for the disk, which answers with an IRQ."""
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
    buf.write(b"x" * BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    try:
        for i in range(n):
            os.pwrite(fd, buf, (i % 64) * BLOCK)
            os.fsync(fd)
    finally:
        os.close(fd)


def proc_softirqs(vector: str = "NET_RX") -> list[int]:
    """/proc/softirqs' counts for ``vector``, one per CPU."""
    with open("/proc/softirqs") as f:
        for line in f:
            name, *counts = line.split()
            if name == f"{vector}:":
                return [int(c) for c in counts]
    raise AssertionError(f"no {vector} in /proc/softirqs")


class UdpReceiver:
    """A UDP socket in the far namespace taking the packets (so none is answered with ICMP)."""

    def __init__(self, pair):
        self.sock = in_netns(pair.b.netns, socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((pair.b.address, PORT))
        force_receive_buffer(self.sock, 1 << 22)  # the tests send 1200 at once
        self.sock.setblocking(False)

    def drain(self) -> int:
        got = 0
        while True:
            try:
                self.sock.recv(2048)
                got += 1
            except BlockingIOError:
                return got

    def close(self):
        self.sock.close()


def send_udp(pair, packets: int, gap: float = 0.0) -> None:
    """``packets`` datagrams from the near end to the far one, one send at a time, from a
    thread pinned to CPU in the near namespace."""
    def sender():
        os.sched_setaffinity(0, {CPU})  # this thread only
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _ in range(packets):
                sock.sendto(b"x" * 64, (pair.b.address, PORT))
                if gap:
                    time.sleep(gap)
    in_netns(pair.a.netns, sender)


