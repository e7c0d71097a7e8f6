"""pingtrace on a veth path between two network namespaces, against ping and against nothing:

    sudo .venv/bin/python benchmarks/pingtrace_bench.py [--runs 5] [--probes 2000]

1. RTT: `ping -i 0.001` (iputils) and pingtrace's probes (`-i 1000`: 1000 probes a second),
   each from the client namespace to the server's address, alternating, each round's median
   RTT; the report gives the median over rounds and the ratio (target: pingtrace <= 1.1x ping).
   ping's RTT is its own (user space to kernel receive stamp); pingtrace's is user space to
   user space (its user_tx to its user_rx), the same span plus the read.
2. Throughput: iperf3 (TCP, 3 s) from the client namespace to an iperf3 server in the other,
   bare and with `ebpfkit pingtrace` attached and probing (1 a second), paired per round
   (target: >= 0.97x bare). Every packet of the stream passes four of pingtrace's hooks (queue,
   xmit, backlog, receive) and is read and rejected by each.
   The floor: ping again, with a program that only reads the clock on each of pingtrace's
   hooks (tp_btf: device queue, qdisc enqueue and dequeue, driver xmit, netif_rx, receive,
   the copy to the reader, the reader's wakeup, drops): what the hooks alone add to a packet
   on this path, the least any per-stage tracer using them adds, as a ratio to bare ping.
3. A 1 ms spike at one hop: a tc program on the server's veth holds echo requests for 1 ms
   during 50 ms, while pingtrace probes at 1000 a second with `-m 500`: detected if the probes
   it prints name that hop's stage as the slowest, at >= 0.9 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from _common import in_ns, median  # noqa: E402

RTT_TARGET, THROUGHPUT_TARGET = 1.1, 0.97
SPIKE_US, SPIKE_WINDOW_S = 1000, 0.05

SPIKE_PROGRAM = r"""
/* pingtrace_bench's spike: echo requests (ICMP type 8) held hold_ns at this hop. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

volatile __u64 hold_ns = 0; /* set from user space: 0 lets everything pass at once */

struct eth { __u8 dst[6], src[6]; __be16 proto; };
struct ip4 { __u8 version_ihl, tos; __be16 len, id, frag; __u8 ttl, protocol; __u16 check; __be32 saddr, daddr; };
struct icmp { __u8 type, code; __u16 check; };

static long held(__u32 i, void *until)
{
	return bpf_ktime_get_ns() >= *(__u64 *)until;
}

SEC("tc")
int spike(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct eth *eth = data;
	struct ip4 *ip = (void *)(eth + 1);
	struct icmp *icmp = (void *)(ip + 1);
	__u64 until;

	if (!hold_ns || (void *)(icmp + 1) > end || eth->proto != bpf_htons(0x0800) ||
	    ip->version_ihl != 0x45 || ip->protocol != 1 || icmp->type != 8)
		return 0;
	until = bpf_ktime_get_ns() + hold_ns;
	bpf_loop(1 << 23, held, &until, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""


FLOOR_PROGRAM = r"""
/* pingtrace_bench's floor: on each of pingtrace's hooks, only a clock read (kept in a global). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

volatile __u64 last_ns;

#define STAMP(name, hook)                              \
	SEC("tp_btf/" #hook)                           \
	int BPF_PROG(name)                             \
	{                                              \
		last_ns = bpf_ktime_get_ns();          \
		return 0;                              \
	}

STAMP(floor_dev_queue, net_dev_queue)
STAMP(floor_qdisc_enqueue, qdisc_enqueue)
STAMP(floor_qdisc_dequeue, qdisc_dequeue)
STAMP(floor_xmit, net_dev_start_xmit)
STAMP(floor_netif_rx, netif_rx)
STAMP(floor_receive, netif_receive_skb)
STAMP(floor_copy, skb_copy_datagram_iovec)
STAMP(floor_waking, sched_waking)
STAMP(floor_drop, kfree_skb)

char LICENSE[] SEC("license") = "GPL";
"""


def ping_rtts(client: str, address: str, count: int) -> list[float]:
    """ping's own RTT of each reply, µs."""
    out = subprocess.run(in_ns(client, ["ping", "-n", "-i", "0.001", "-c", str(count), "-W", "1", address]),
                         capture_output=True, text=True, timeout=count * 0.01 + 30).stdout
    return [float(m) * 1000 for m in re.findall(r"time=([\d.]+) ms", out)]


def pingtrace_rtts(client: str, address: str, count: int) -> list[float]:
    from ebpfkit.tools import pingtrace

    with pingtrace.open(target=address, count=count, interval_us=1000, netns=client) as session:
        return [p.rtt_us for p in session.probes() if not p.lost]


def python_send_rtts(client: str, address: str, count: int) -> list[float]:
    """No BPF at all: pingtrace's request, sent from a Python loop at 1000/s on a raw socket in
    the client namespace (polling between probes, as ping and pingtrace do), its RTT taken as ping takes its own (clock read before sendto(), the
    kernel's receive stamp of the reply, SO_TIMESTAMPNS), µs: what a probe sent from Python
    costs before any checkpoint, and with the floor programs attached, what the hooks add."""
    import select
    import socket

    from ebpfkit.net.netns import in_netns
    from ebpfkit.tools.pingtrace import wire

    sock = in_netns(client, lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
    sock.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS (Python names only SO_TIMESTAMP)
    rtts, session = [], 0x5eed
    try:
        for seq in range(count):
            message = wire.request(0x4242, session, seq)
            sent = time.time_ns()
            sock.sendto(message, (address, 0))
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline and select.select([sock], [], [], 1)[0]:
                data, ancillary, _flags, _addr = sock.recvmsg(65535, 64)
                probe = wire.parse(data)
                if probe.icmp_type == wire.ICMP_ECHO_REPLY and probe.seq == seq and probe.session == session:
                    sec, nsec = struct.unpack("qq", ancillary[0][2][:16])
                    rtts.append((sec * 10**9 + nsec - sent) / 1000)
                    break
            next_at = time.monotonic() + 0.001
            while time.monotonic() < next_at:  # polled, not slept, as ping and pingtrace do
                os.sched_yield()
    finally:
        sock.close()
    return rtts


def iperf3_bps(client: str, server: str, address: str, seconds: int = 3) -> float:
    port = "5301"
    srv = subprocess.Popen(in_ns(server, ["iperf3", "-s", "-1", "-p", port]), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = subprocess.run(in_ns(client, ["iperf3", "-c", address, "-p", port, "-t", str(seconds), "-J"]),
                             capture_output=True, text=True, timeout=seconds + 30)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    finally:
        srv.kill()
        srv.wait()


class Floor:
    """FLOOR_PROGRAM loaded and attached (system-wide, as pingtrace's hooks are)."""

    def __init__(self, workdir: Path):
        from ebpfkit.engine import compile as compile_bpf

        self.source = workdir / "floor.bpf.c"
        self.source.write_text(FLOOR_PROGRAM)
        compile_bpf(str(self.source))  # compiled (and cached) once, before any round

    def __enter__(self):
        from ebpfkit.engine import compile as compile_bpf

        self.obj = compile_bpf(str(self.source)).load()
        self.obj.attach()
        return self

    def __exit__(self, *exc):
        self.obj.close()


class PingtraceRunning:
    """`ebpfkit pingtrace` probing once a second (attached: its hooks see every packet)."""

    def __init__(self, client: str, address: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "pingtrace", "-c", address, "--netns", client],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
        for line in self.proc.stderr:
            if "Hit Ctrl-C" in line:
                return
        raise RuntimeError(f"pingtrace did not start: {self.proc.stderr.read()}")

    def stop(self) -> None:
        self.proc.send_signal(2)
        self.proc.communicate(timeout=30)


def spike(client: str, server: str, address: str, server_ifindex: int, workdir: Path) -> dict:
    """Probes at 1000/s with -m 500 while the server's hop holds requests SPIKE_US for
    SPIKE_WINDOW_S: what pingtrace printed about them."""
    from ebpfkit.engine import compile as compile_bpf
    from ebpfkit.net.netns import in_netns

    source = workdir / "spike.bpf.c"
    source.write_text(SPIKE_PROGRAM)
    obj = compile_bpf(str(source)).load()
    try:
        in_netns(server, lambda: obj.programs["spike"].attach_tc(server_ifindex, "ingress"))
        proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "--format", "json", "pingtrace", "-c", address,
                                 "--netns", client, "-i", "1000", "-t", "1.5", "-m", "500"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        time.sleep(0.8)  # started and probing
        obj.bss["hold_ns"] = SPIKE_US * 1000
        time.sleep(SPIKE_WINDOW_S)
        obj.bss["hold_ns"] = 0
        out, err = proc.communicate(timeout=60)
    finally:
        obj.close()
    probes = [json.loads(line) for line in out.splitlines() if '"seq"' in line]
    hop = f"request receive ek1@{server} -> reply dev_queue ek1@{server}"
    at_hop = [p for p in probes if not p["lost"] and p["slowest"] == hop and p["slowest_us"] >= 0.9 * SPIKE_US]
    return {"printed": len(probes), "at_hop": len(at_hop), "detected": bool(at_hop)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--probes", type=int, default=2000, help="ping replies and probes per round (default 2000)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("pingtrace loads BPF programs and makes namespaces: run as root", file=sys.stderr)
        return 4
    for tool in ("ping", "iperf3"):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            print(f"{tool} is not installed: apt-get install {'iputils-ping' if tool == 'ping' else tool} "
                  "(scripts/setup.sh --bench)", file=sys.stderr)
            return 3
    from ebpfkit.net.netns import NetNS
    from ebpfkit.net.veth import create_veth

    started = time.monotonic()
    ping, trace, py_send, floor, bare_bps, traced_bps = [], [], [], [], [], []
    with NetNS("ptbench-client") as client, NetNS("ptbench-server") as server, \
            tempfile.TemporaryDirectory(prefix="ebpfkit-pingtrace-bench-") as tmp:
        pair = create_veth(client, server, addresses=("10.199.9.1/24", "10.199.9.2/24"))
        address = pair.b.address
        ping_rtts(client.name, address, 50)  # warm: neighbours resolved, caches hot
        pingtrace_rtts(client.name, address, 50)
        floor_hooks = Floor(Path(tmp))

        def floor_rtts(client_name, addr, count):
            with floor_hooks:
                return python_send_rtts(client_name, addr, count)

        ways = {ping_rtts: ping, pingtrace_rtts: trace, python_send_rtts: py_send, floor_rtts: floor}
        for run in range(args.runs):
            order = list(ways)[run % len(ways):] + list(ways)[:run % len(ways)]
            for fn in order:
                ways[fn].append(statistics.median(fn(client.name, address, args.probes)))
            bare = iperf3_bps(client.name, server.name, address)
            tool = PingtraceRunning(client.name, address)
            try:
                traced = iperf3_bps(client.name, server.name, address)
            finally:
                tool.stop()
            bare_bps.append(bare)
            traced_bps.append(traced)
            print(f"round {run + 1}/{args.runs} ({time.monotonic() - started:.0f} s): RTT p50 ping {ping[-1]:.1f} us, "
                  f"pingtrace {trace[-1]:.1f} us, Python sender {py_send[-1]:.2f} us, with the floor programs "
                  f"{floor[-1]:.2f} us; iperf3 bare {bare / 1e9:.2f} Gbit/s, with pingtrace "
                  f"{traced / 1e9:.2f}", file=sys.stderr, flush=True)
        spiked = spike(client.name, server.name, address, pair.b.ifindex, Path(tmp))

    rtt_ratio = median(trace) / median(ping)
    bps_ratio = median([t / b for b, t in zip(bare_bps, traced_bps)])
    print(f"pingtrace vs ping and vs nothing, {args.runs} rounds; kernel {os.uname().release}; veth between two "
          f"namespaces")
    print(f"RTT p50 (median of rounds, {args.probes} each at 1000/s): ping {median(ping):.1f} us, pingtrace "
          f"{median(trace):.1f} us: {rtt_ratio:.2f}x (target <= {RTT_TARGET}x: "
          f"{'PASS' if rtt_ratio <= RTT_TARGET else 'FAIL'})")
    print(f"pingtrace's request from a Python loop, no BPF: {median(py_send):.2f} us, "
          f"{median(py_send) / median(ping):.2f}x ping (what sending from Python costs)")
    print(f"floor: the same with a clock read on each of pingtrace's hooks: {median(floor):.2f} us, "
          f"{median(floor) / median(ping):.2f}x ping, +{median(floor) - median(py_send):.2f} us (what the hooks alone "
          f"add; the least any per-stage tracer of a Python-sent probe costs)")
    print(f"iperf3 TCP: bare {median(bare_bps) / 1e9:.2f} Gbit/s, with pingtrace attached {median(traced_bps) / 1e9:.2f}"
          f" Gbit/s; paired ratio {bps_ratio:.3f} (target >= {THROUGHPUT_TARGET}: "
          f"{'PASS' if bps_ratio >= THROUGHPUT_TARGET else 'FAIL'})")
    print(f"1 ms spike at the server's hop for {SPIKE_WINDOW_S * 1000:.0f} ms, probes at 1000/s with -m 500: "
          f"{spiked['printed']} probes printed, {spiked['at_hop']} naming that hop at >= 0.9 ms: "
          f"{'DETECTED' if spiked['detected'] else 'MISSED'}")
    print(f"(benchmark took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
