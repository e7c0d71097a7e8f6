"""tc redirect's fast path against the node's own routing, side by side in one run (as root):

    python benchmarks/tc_bench.py [--runs 3] [--seconds 3] [--conntrack | --kube-proxy N] [--json FILE]

On the lab node of ebpfkit.tools.tc.lab (a "node" namespace with veths to two "pods" and an
uplink to a "remote", forwarding on, one nftables counter rule on its forward hook: a node
with next to no firewall), for pod -> pod and pod -> remote, with and without `tc redirect`:

- TCP_RR: one connection, a 14-byte message each way per transaction (sockperf ping-pong, its
  smallest), transactions/s;
- TCP_CRR: a new connection per transaction, one byte each way, then closed (crr.c), per second;
- stream: one TCP stream (iperf3), Gbit/s.

Rounds alternate plain and redirect, so drift hits both alike; medians of --runs. Targets are
the whitepaper's gains on a node (RR >= 1.28x, CRR >= 1.40x, stream >= 1.21x the plain path),
whose plain path was Calico's: iptables rules and connection tracking on every forwarded
packet. `--conntrack` gives the lab node's forward hook a connection-tracking rule (`ct state
established,related accept`), so its plain path tracks connections as such a node's does;
without it the plain path is a bare router's, the least a fast path can save. `--kube-proxy N`
gives the node what kube-proxy's iptables mode writes (as iptables-nft loads it) for N
services with one endpoint each: connection tracking; the nat table's KUBE-SERVICES chain,
one rule per service walked in order by every new connection's first packet (and a
KUBE-SVC/KUBE-SEP chain pair per service it would jump to); KUBE-POSTROUTING's masquerade
check; the filter table's KUBE-FORWARD chain on every forwarded packet. The benchmark's
traffic is pod to pod address, so it matches no service: the walk is what it costs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import build_c, median  # noqa: E402
from ebpfkit.tools import tc  # noqa: E402
from ebpfkit.tools.tc.lab import LabNode  # noqa: E402

TARGETS = {"rr": 1.28, "crr": 1.40, "stream": 1.21}
UNITS = {"rr": "transactions/s", "crr": "connections/s", "stream": "Gbit/s"}


def in_ns(netns: str, argv: list) -> list:
    return ["ip", "netns", "exec", netns, *argv]


def server(netns: str, argv: list) -> subprocess.Popen:
    proc = subprocess.Popen(in_ns(netns, argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def rr(src, dst, seconds: float) -> float:
    srv = server(dst.netns, ["sockperf", "sr", "--tcp", "-i", dst.address, "-p", "11111"])
    try:
        out = subprocess.run(in_ns(src.netns, ["sockperf", "pp", "--tcp", "-i", dst.address, "-p", "11111",
                                               "-t", str(max(1, round(seconds)))]),
                             capture_output=True, text=True, timeout=seconds + 30).stdout
    finally:
        stop(srv)
    found = re.search(r"\[Total Run\] RunTime=([\d.]+) sec.*?ReceivedMessages=(\d+)", out, re.S)
    if not found:
        raise RuntimeError(f"sockperf said: {out[-500:]}")
    return int(found[2]) / float(found[1])


def crr(src, dst, seconds: float, exe: Path) -> float:
    srv = subprocess.Popen(in_ns(dst.netns, [str(exe), "server", dst.address, "11112"]), stdout=subprocess.PIPE,
                           text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        out = subprocess.run(in_ns(src.netns, [str(exe), "client", dst.address, "11112", str(seconds)]),
                             capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    finally:
        stop(srv)
    return int(out) / seconds


def stream(src, dst, seconds: float) -> float:
    srv = server(dst.netns, ["iperf3", "-s", "-B", dst.address, "-p", "11113", "-1"])
    try:
        out = subprocess.run(in_ns(src.netns, ["iperf3", "-c", dst.address, "-p", "11113", "-t", str(seconds),
                                               "-J"]), capture_output=True, text=True, timeout=seconds + 30).stdout
    finally:
        stop(srv)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9


def kube_proxy_rules(services: int) -> str:
    """An nft script of kube-proxy's iptables-mode rules for ``services`` ClusterIP services
    (10.96.0.0/16, port 80, each with one endpoint in 10.244.0.0/16), in the chains it names."""
    lines = ["table ip kube_nat {",
             "  chain prerouting { type nat hook prerouting priority dstnat; policy accept; jump kube_services; }",
             "  chain postrouting { type nat hook postrouting priority srcnat; policy accept; "
             "jump kube_postrouting; }",
             "  chain kube_mark_masq { meta mark set meta mark or 0x4000; }",
             "  chain kube_postrouting { meta mark and 0x4000 != 0x4000 return; "
             "meta mark set meta mark xor 0x4000; masquerade; }"]
    service_rules = []
    for i in range(services):
        vip, endpoint = f"10.96.{i // 250}.{i % 250 + 1}", f"10.244.{i // 250}.{i % 250 + 1}"
        lines.append(f"  chain svc_{i} {{ ip saddr != 10.244.0.0/16 ip daddr {vip} tcp dport 80 "
                     f"jump kube_mark_masq; jump sep_{i}; }}")
        lines.append(f"  chain sep_{i} {{ ip saddr {endpoint} jump kube_mark_masq; "
                     f"meta l4proto tcp dnat to {endpoint}:8080; }}")
        service_rules.append(f"    ip daddr {vip} tcp dport 80 jump svc_{i}")
    lines += ["  chain kube_services {", *service_rules, "    fib daddr type local jump kube_nodeports", "  }",
              "  chain kube_nodeports { }", "}",
              "table ip kube_filter {",
              "  chain forward { type filter hook forward priority filter; policy accept; jump kube_forward; }",
              "  chain kube_forward { ct state invalid drop; meta mark and 0x4000 == 0x4000 accept; "
              "ct state related,established accept; }", "}"]
    return "\n".join(lines) + "\n"


def tune(lab) -> None:
    """Short-lived connections by the thousand: TIME_WAIT sockets reused, every port usable."""
    for place in (*lab.pods, lab.remote):
        for key, value in (("net/ipv4/tcp_tw_reuse", "1"), ("net/ipv4/ip_local_port_range", "1024 65535")):
            subprocess.run(in_ns(place.netns, ["sh", "-c", f"echo {value} > /proc/sys/{key}"]), check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--conntrack", action="store_true",
                        help="the node tracks forwarded connections (a firewall rule), as a Kubernetes node does")
    parser.add_argument("--kube-proxy", type=int, default=0, metavar="N",
                        help="the node has kube-proxy's iptables-mode rules for N services (implies connection "
                             "tracking)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tc-bench-"))
    exe = build_c(Path(__file__).with_name("crr.c"), work / "crr")
    results: dict = {}
    with LabNode(purpose="tcbench") as lab:
        tune(lab)
        if args.conntrack:
            lab.nft("add rule inet ebpfkit_lab forward ct state established,related accept")
        if args.kube_proxy:
            rules = work / "kube-proxy.nft"
            rules.write_text(kube_proxy_rules(args.kube_proxy))
            subprocess.run(in_ns(lab.node.name, ["nft", "-f", str(rules)]), check=True)
        paths = {"pod->pod": (lab.pods[0], lab.pods[1]), "pod->remote": (lab.pods[0], lab.remote)}
        endpoints = [(p.netns, p.device) for p in lab.pods]
        for run in range(args.runs):
            for mode in ("plain", "redirect"):
                session = (tc.open_redirect(netns=lab.node.name, endpoints=endpoints,
                                            uplinks=[lab.remote.node_device]) if mode == "redirect" else None)
                try:
                    for path, (src, dst) in paths.items():
                        for name, measure in (("rr", lambda s, d: rr(s, d, args.seconds)),
                                              ("crr", lambda s, d: crr(s, d, args.seconds, exe)),
                                              ("stream", lambda s, d: stream(s, d, args.seconds))):
                            value = measure(src, dst)
                            results.setdefault((path, name, mode), []).append(value)
                            print(f"run {run + 1} {mode:8} {path:12} {name:6} {value:12.2f} {UNITS[name]}",
                                  file=sys.stderr, flush=True)
                finally:
                    if session is not None:
                        session.close()
    node = (f"kube-proxy's rules for {args.kube_proxy} services" if args.kube_proxy else
            "connection tracking on" if args.conntrack else "no connection tracking")
    print(f"\ntc redirect vs the node's routing ({os.uname().release}, {node}; medians of {args.runs} runs of "
          f"{args.seconds:g} s)\n")
    print(f"{'path':12} {'measure':8} {'plain':>12} {'redirect':>12} {'ratio':>7}  target")
    doc = []
    for path in ("pod->pod", "pod->remote"):
        for name in ("rr", "crr", "stream"):
            plain, fast = median(results[(path, name, "plain")]), median(results[(path, name, "redirect")])
            ratio = fast / plain if plain else float("nan")
            verdict = "PASS" if ratio >= TARGETS[name] else "below"
            print(f"{path:12} {name:8} {plain:12.2f} {fast:12.2f} {ratio:6.2f}x  >= {TARGETS[name]}x {verdict}"
                  f"  ({UNITS[name]})")
            doc.append({"path": path, "measure": name, "plain": plain, "redirect": fast, "ratio": ratio,
                        "target": TARGETS[name], "unit": UNITS[name],
                        "runs": {m: results[(path, name, m)] for m in ("plain", "redirect")}})
    if args.json:
        Path(args.json).write_text(json.dumps({"kernel": os.uname().release, "conntrack": args.conntrack,
                                               "kube_proxy_services": args.kube_proxy, "rows": doc}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
