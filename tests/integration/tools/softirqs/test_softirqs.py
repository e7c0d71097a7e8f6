"""softirqs against the real kernel: UDP packets sent over a veth pair between two test
namespaces by a thread pinned to one CPU. A veth hands each packet to the receiving side's
backlog on the sending CPU (netif_rx) and raises NET_RX there; the softirq runs when the
send leaves its bottom-half-disabled section, still on that CPU, and processes whatever the
backlog holds. So one send at a time gives about one NET_RX per packet, and never more than
one per packet (batching, NAPI's or ksoftirqd's, only merges them) but for the host's own
traffic. The ground truth is the kernel's count, /proc/softirqs' NET_RX column for that CPU,
read around the same interval; per-CPU rows add up to the all-CPU total."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import bcc_dialect_through_ebpfkit, same_config_error, signalled_run_leaves_nothing
from irqs import CPU, UdpReceiver, proc_softirqs, send_udp

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

PACKETS = 300


@pytest.fixture
def receiver(veth_pair):
    receiver = UdpReceiver(veth_pair)
    send_udp(veth_pair, 5)  # neighbour resolution, before anything is measured
    time.sleep(0.1)
    receiver.drain()
    yield receiver
    receiver.close()


def net_rx(stats, cpu: int | None = None) -> int:
    return sum(s.count for s in stats if s.name == "NET_RX" and (cpu is None or s.cpu == cpu))


def close_to(tool: int, truth: int) -> bool:
    """The tool drains its map a few ms from where /proc/softirqs is read: within 10% (or 5)."""
    return abs(tool - truth) <= max(5, truth // 10)


@pytest.mark.parametrize("engine", ["ebpfkit", "bcc"])
def test_net_rx_per_cpu_follows_the_packets_and_proc_softirqs(veth_pair, receiver, engine, monkeypatch):
    """engine="bcc": its BCC-dialect program, here through ebpfkit's translation of it."""
    from ebpfkit.tools import softirqs

    if engine == "bcc":
        bcc_dialect_through_ebpfkit(monkeypatch, softirqs.session.Session)
    with softirqs.open(per_cpu=True, engine=engine) as per_cpu, softirqs.open(engine=engine) as total:
        assert per_cpu.hook in ((softirqs.session.BCC_HOOK,) if engine == "bcc" else
                                (softirqs.session.TYPED_HOOK, softirqs.session.RAW_HOOK))
        counted, truths = [], []
        for packets in (0, PACKETS, 4 * PACKETS):
            per_cpu.sample(), total.sample()
            before = proc_softirqs()
            start = time.monotonic()
            send_udp(veth_pair, packets)
            time.sleep(max(0.0, 0.3 - (time.monotonic() - start)))
            after = proc_softirqs()
            stats, all_cpus = per_cpu.sample(), total.sample()
            assert receiver.drain() == packets  # they all crossed the veth
            truth = after[CPU] - before[CPU]
            assert close_to(net_rx(stats, CPU), truth), (packets, net_rx(stats, CPU), truth)
            # per-CPU rows add up to the total (two sessions on the same events)
            assert close_to(net_rx(all_cpus), net_rx(stats)), (net_rx(all_cpus), net_rx(stats))
            assert all(s.cpu is None for s in all_cpus) and all(s.cpu is not None for s in stats)
            counted.append(net_rx(stats, CPU))
            truths.append(truth)
    quiet, small, large = counted
    # at most one NET_RX per packet (plus the host's own traffic, which the quiet interval shows)
    assert 1 <= small <= PACKETS + quiet + 20, counted
    assert small >= quiet + PACKETS // 2, counted  # one send at a time: about one per packet
    assert large >= small + PACKETS, counted       # four times the packets, proportionally more


def test_names_are_the_kernels_vectors():
    from ebpfkit.sysinfo.events import softirq_names
    from ebpfkit.tools import softirqs

    names = softirqs.vector_names()
    with open("/proc/softirqs") as f:
        listed = [line.split(":")[0].strip() for line in f.readlines()[1:]]
    assert list(names.values()) == listed  # the kernel's enum, in the kernel's order
    assert softirq_names() == names  # what names them where there is no BTF (engine="bcc")
    assert names[3] == "NET_RX" and names[1] == "TIMER"


def parse_json(text: str) -> list[dict]:
    return [row for line in text.splitlines() for row in json.loads(line)["rows"]]


def parse_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.parametrize("fmt, parse", [("json", parse_json), ("csv", parse_csv)])
def test_command_per_cpu_in_each_format(veth_pair, receiver, fmt, parse):
    """`softirqs -C` while packets flow: its NET_RX rows on CPU, over its intervals, lie
    between the packets sent in them and /proc/softirqs' count over the whole run."""
    before = proc_softirqs()
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "--format", fmt, "softirqs", "-C", "0.5", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "Hit Ctrl-C" in line:
            break
    send_udp(veth_pair, PACKETS, gap=0.001)
    stdout, stderr = proc.communicate(timeout=60)
    after = proc_softirqs()
    assert proc.returncode == 0, stderr
    rows = parse(stdout)
    assert {"name", "vector", "cpu", "count", "total_ns"} <= set(rows[0])
    counted = sum(int(r["count"]) for r in rows if r["name"] == "NET_RX" and int(r["cpu"]) == CPU)
    assert PACKETS // 2 <= counted <= after[CPU] - before[CPU], (counted, after[CPU] - before[CPU])
    assert all(int(r["vector"]) == 3 for r in rows if r["name"] == "NET_RX")


def test_bad_options_exit_2_with_the_reason(capsys):
    from ebpfkit.tools import softirqs

    same_config_error(capsys, softirqs.Config, {"counts_only": True, "dist": True},
                      ["softirqs", "-c", "-d", "1", "1"], "'-c' / '--count'", "cannot be combined with dist")
    for args in (["-1"], ["1", "-3"]):
        cli = subprocess.run([sys.executable, "-m", "ebpfkit", "softirqs", *args], capture_output=True,
                             text=True, timeout=60)
        assert cli.returncode == 2 and "Traceback" not in cli.stderr, (args, cli.stderr)


def test_engine_bcc_where_bcc_cannot_run_exits_3_saying_why():
    from ebpfkit.bcc import native

    cli = subprocess.run([sys.executable, "-m", "ebpfkit", "softirqs", "--engine", "bcc", "1", "1"],
                         capture_output=True, text=True, timeout=120)
    if native.kernel_headers() is None:
        assert cli.returncode == 3 and "engine='bcc' needs" in cli.stderr and "Traceback" not in cli.stderr, cli.stderr
    else:  # BCC compiles with this kernel's headers: it runs
        assert cli.returncode == 0 and "Traceback" not in cli.stderr, cli.stderr
    cli = subprocess.run([sys.executable, "-m", "ebpfkit", "softirqs", "--engine", "nope"], capture_output=True,
                         text=True, timeout=60)
    assert cli.returncode == 2 and "nope" in cli.stderr, cli.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_signal_leaves_nothing_attached(sig):
    signalled_run_leaves_nothing(["softirqs", "-d", "1"], sig)
