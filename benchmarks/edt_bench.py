"""EDT (tc ratelimit: fq holds each packet until the time a BPF program stamped on it) against
HTB (the classic token bucket, `tc qdisc ... htb`) at the same rate, side by side in one run
(as root, on a kernel with fq: the VM's):

    ebpfkit vm run --kernel 6.12 -- .venv/bin/python benchmarks/edt_bench.py [--rate 100mbit] [--runs 3]
        [--seconds 8] [--horizon 2s] [--json FILE]

On the lab node of ebpfkit.tools.tc.lab, a pod sends one bulk TCP stream (iperf3) to the remote
through the node's uplink, limited there to --rate, and meanwhile a request/response flow
(sockperf ping-pong over TCP, 14-byte messages, 1000 a second) from the same pod to the remote
goes through the same limit. The figure is that flow's latency (sockperf: half the round trip)
at p50/p90/p99/p99.9, and the stream's goodput. Target (the issue's, after Cilium's bandwidth manager):
p99 with EDT >= 5x lower than with HTB.

Four setups, round-robin: the classic one (the node routes the pod's packets; HTB on the uplink),
ebpfkit's (`tc redirect` hands them from the pod's veth to the uplink with bpf_redirect_neigh;
`tc ratelimit`'s EDT there), and the two crossings. What they show: the node's routing orphans
forwarded packets (ip_rcv drops their socket), so nothing holds the sender back and the queue in
front of the limit fills; handed over by redirect, a packet keeps its socket, and TCP small
queues keep the stream to a packet or two in the qdisc, whichever limiter holds them there.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import in_ns, median  # noqa: E402
from ebpfkit.tools import tc  # noqa: E402
from ebpfkit.tools.tc.lab import LabNode  # noqa: E402

# limiter, path: the classic setup (the node routes, HTB on its uplink), ebpfkit's (tc redirect,
# EDT), and the two crossings, which show what each half brings
CLASSIC, OURS = "HTB, routed", "EDT, redirect"
SETUPS = (CLASSIC, "HTB, redirect", OURS, "EDT, routed")
PERCENTILES = ("50.000", "90.000", "99.000", "99.900")  # those sockperf prints
TARGET_P99 = 5.0


class Htb:
    """One HTB class at the rate, every packet of the device in it (its default leaf: pfifo)."""

    def __init__(self, lab, device: str, rate: str):
        self.tc = ["tc", "-n", lab.node.name]
        self.device = device
        subprocess.run([*self.tc, "qdisc", "replace", "dev", device, "root", "handle", "1:", "htb", "default", "10"],
                       check=True)
        subprocess.run([*self.tc, "class", "add", "dev", device, "parent", "1:", "classid", "1:10", "htb",
                        "rate", rate, "quantum", "60000"], check=True)

    def close(self) -> None:
        subprocess.run([*self.tc, "qdisc", "del", "dev", self.device, "root"], check=True)


def measure(lab, pod, seconds: float) -> dict:
    remote = lab.remote
    servers = [subprocess.Popen(in_ns(remote.netns, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for argv in (["iperf3", "-s", "-B", remote.address, "-p", "11121", "-1"],
                            ["sockperf", "sr", "--tcp", "-i", remote.address, "-p", "11122"])]
    try:
        time.sleep(0.5)
        bulk = subprocess.Popen(in_ns(pod.netns, ["iperf3", "-c", remote.address, "-p", "11121",
                                                  "-t", str(seconds + 3), "-J"]),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.5)  # the stream has filled whatever queue it fills
        out = subprocess.run(in_ns(pod.netns, ["sockperf", "pp", "--tcp", "-i", remote.address, "-p", "11122",
                                               "--mps", "1000", "-t", str(round(seconds))]),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=seconds + 60).stdout  # (its statistics go to both)
        stream = json.loads(bulk.communicate(timeout=seconds + 60)[0])
    finally:
        for server in servers:
            server.kill()
            server.wait()
    row = {"goodput_mbit": stream["end"]["sum_received"]["bits_per_second"] / 1e6}
    for p in PERCENTILES:
        found = re.search(rf"percentile {re.escape(p)} =\s+([\d.]+)", out)
        if not found:
            raise RuntimeError(f"sockperf said: {out[-500:]}")
        row[_field(p)] = float(found[1])
    return row


def _field(percentile: str) -> str:
    return f"p{percentile.rstrip('0').rstrip('.')}_us"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--horizon", default="2s", help="EDT's: packets due later are dropped (default 2s)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    from ebpfkit.engine import features

    if not features.probe("fq").supported:
        print("this kernel has no fq qdisc (EDT needs it): run in the VM", file=sys.stderr)
        return 3
    results: dict = {}
    with LabNode(purpose="edtbench") as lab:
        pod, uplink = lab.pods[0], lab.remote.node_device
        for run in range(args.runs):  # round-robin, so drift hits every setup alike
            for setup in SETUPS:
                limiter, path = setup.split(", ")
                redirect = tc.open_redirect(netns=lab.node.name, endpoints=[(p.netns, p.device) for p in lab.pods],
                                            uplinks=[uplink]) if path == "redirect" else None
                try:
                    held = (Htb(lab, uplink, args.rate) if limiter == "HTB" else
                            tc.open_ratelimit(netns=lab.node.name, device=uplink,
                                              rules=[f"src {pod.address} rate {args.rate} horizon {args.horizon}"]))
                    try:
                        row = measure(lab, pod, args.seconds)
                    finally:
                        held.close()
                finally:
                    if redirect is not None:
                        redirect.close()
                results.setdefault(setup, []).append(row)
                print(f"run {run + 1} {setup}: {row}", file=sys.stderr, flush=True)
    print(f"\nEDT vs HTB at {args.rate}, pod -> remote (medians of {args.runs} runs of {args.seconds:g} s): "
          f"a request/response flow's latency beside a bulk stream from the same pod\n")
    fields = [_field(p) for p in PERCENTILES] + ["goodput_mbit"]
    print(f"{'limiter, path':18}" + "".join(f"{f:>13}" for f in fields) + f"{'p99 ratio':>11}")
    meds = {setup: {f: median([r[f] for r in rows]) for f in fields} for setup, rows in results.items()}
    classic = meds[CLASSIC]["p99_us"]
    for setup, med in meds.items():
        print(f"{setup:18}" + "".join(f"{med[f]:13.1f}" for f in fields) + f"{classic / med['p99_us']:10.1f}x")
    ratio = classic / meds[OURS]["p99_us"]
    print(f"\n(p99 ratio: {CLASSIC}'s p99 over the row's.) Target: p99 with EDT (ebpfkit: {OURS}) >= "
          f"{TARGET_P99:g}x lower than HTB ({CLASSIC}): {ratio:.1f}x, {'met' if ratio >= TARGET_P99 else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rate": args.rate, "runs": results, "medians": meds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
