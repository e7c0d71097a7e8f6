"""tc redirect's fast path against the node's own routing, side by side in one run (as root):

    python benchmarks/tc_bench.py [--runs 3] [--seconds 3] [--conntrack] [--kube-proxy N] [--calico N]
                                  [--cpu N] [--json FILE]

On two lab nodes of ebpfkit.tools.tc.lab (each a "node" namespace with veths to two "pods" and
an uplink to a "remote", forwarding on, one nftables counter rule on its forward hook: a node
with next to no firewall), linked as two nodes of a cluster, with and without `tc redirect` (on
both nodes): pod -> pod on the first node, pod -> remote (out of its uplink: one node's path),
and cross-node, a pod of the first to a pod of the second (the path of both nodes, as the
whitepaper's cross-node figures). In the plain rounds, also two namespaces on one veth with no
node between them: the floor no node's path, fast or not, gets under:

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
`--calico N` gives it what Calico's iptables dataplane writes for N pods on the node (see
calico_rules): the whitepaper's baseline. A Calico node runs kube-proxy too: give both.
`--cpu N` runs everything on one CPU. Left to the scheduler, client and server sit on two
CPUs and every message wakes the other one: in a VM an inter-processor interrupt and a halted
vCPU's exit, tens of microseconds that dwarf the path a packet takes; on one CPU a
transaction costs what its two stacks and the node's path cost, which is what a fast path saves.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks._common import build_c, in_ns, median  # noqa: E402
from ebpfkit.tools import tc  # noqa: E402
from ebpfkit.net import NetNS, create_veth  # noqa: E402
from ebpfkit.tools.tc.lab import LabNode, Place  # noqa: E402

TARGETS = {"rr": 1.28, "crr": 1.40, "stream": 1.21}
UNITS = {"rr": "transactions/s", "crr": "connections/s", "stream": "Gbit/s"}
CLUSTER = "10.76.0.0/14"  # both lab nodes' pods (10.77/16, 10.78/16): Calico's pool, not masqueraded within


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


def calico_rules(workloads: int, devices: list, pool: str) -> str:
    """An nft script of what Calico's iptables dataplane (felix) writes, as iptables-nft loads
    it, on a node with ``workloads`` pods whose node-side veths are ``devices`` plus made-up
    caliXXXXXXXXXXX ones. Per forwarded packet: raw's mark reset and the strict reverse-path
    check of a workload's packets (a FIB lookup), mangle's accept of tracked connections,
    filter's cali-FORWARD with the from-workload dispatch (a two-level tree of interface
    matches, as felix splits it) into the endpoint's chain, whose first rule accepts a tracked
    connection; a new connection's first packet also walks the endpoint's profile and policy
    chains (an ingress policy for the benchmark's ports on the real pods) and nat's hooks."""
    # felix names a pod's veth cali + 11 hex digits of a hash: spread over 16 first digits
    names = list(devices) + [f"cali{hashlib.sha1(str(i).encode()).hexdigest()[:11]}"
                             for i in range(max(0, workloads - len(devices)))]
    groups: dict = {}  # felix's dispatch tree: sorted names, split on their first differing character
    for name in sorted(names):
        groups.setdefault(name[:5], []).append(name)
    families = ["cali", *sorted({name.rstrip("0123456789") for name in devices})]  # felix's one `-i cali+`
    lines = ["table ip cali_raw {",
             "  chain prerouting { type filter hook prerouting priority raw; policy accept; jump cali_prerouting; }",
             "  chain cali_rpf_skip { }", "  chain cali_from_host_endpoint { }",
             "  chain cali_prerouting {",
             "    meta mark set meta mark and 0xfff0ffff",
             *[f'    iifname "{family}*" meta mark set meta mark or 0x40000' for family in families],
             "    meta mark and 0x40000 == 0x40000 jump cali_rpf_skip",
             "    meta mark and 0x40000 == 0x40000 fib saddr . mark . iif oif missing drop",
             "    meta mark and 0x40000 == 0 jump cali_from_host_endpoint",
             "    meta mark and 0x10000 == 0x10000 accept", "  }", "}",
             "table ip cali_mangle {",
             "  chain prerouting { type filter hook prerouting priority mangle; policy accept; jump cali_prerouting; }",
             "  chain postrouting { type filter hook postrouting priority mangle; policy accept; "
             "jump cali_postrouting; }",
             "  chain cali_from_host_endpoint { }", "  chain cali_to_host_endpoint { }",
             "  chain cali_prerouting { ct state related,established accept; meta mark and 0x10000 == 0x10000 accept; "
             "jump cali_from_host_endpoint; meta mark and 0x10000 == 0x10000 accept; }",
             "  chain cali_postrouting { meta mark and 0x10000 == 0x10000 return; "
             "meta mark set meta mark and 0xfff0ffff; ct status dnat return; jump cali_to_host_endpoint; "
             "meta mark and 0x10000 == 0x10000 accept; }", "}",
             "table ip cali_nat {",
             "  chain prerouting { type nat hook prerouting priority dstnat; policy accept; jump cali_prerouting; }",
             "  chain postrouting { type nat hook postrouting priority srcnat; policy accept; jump cali_postrouting; }",
             "  chain cali_fip_dnat { }", "  chain cali_fip_snat { }",
             "  chain cali_prerouting { jump cali_fip_dnat; }",
             f"  chain cali_nat_outgoing {{ ip saddr {pool} ip daddr != {pool} masquerade; }}",
             "  chain cali_postrouting { jump cali_fip_snat; jump cali_nat_outgoing; }", "}",
             "table ip cali_filter {",
             "  chain forward { type filter hook forward priority filter; policy accept; jump cali_forward; "
             "meta mark and 0x10000 == 0x10000 accept; meta mark set meta mark or 0x10000; }",
             "  chain cali_from_hep_forward { }", "  chain cali_to_hep_forward { }", "  chain cali_cidr_block { }",
             "  chain cali_pro_kns_default { meta mark set meta mark or 0x10000; }",
             "  chain cali_pri_kns_default { meta mark set meta mark or 0x10000; }",
             f"  chain cali_pi_bench {{ ip saddr {pool} tcp dport {{ 11111, 11112, 11113 }} "
             "meta mark set meta mark or 0x10000; meta mark and 0x10000 == 0x10000 return; }",
             "  chain cali_forward {",
             "    meta mark set meta mark and 0xfff1ffff",
             "    meta mark and 0x10000 == 0 jump cali_from_hep_forward",
             *[f'    iifname "{family}*" jump cali_from_wl_dispatch' for family in families],
             *[f'    oifname "{family}*" jump cali_to_wl_dispatch' for family in families],
             "    jump cali_to_hep_forward", "    jump cali_cidr_block", "  }"]
    for way, match in (("from", "iifname"), ("to", "oifname")):
        top = [f'{match} "{prefix}*" goto cali_{way}_wl_dispatch_{prefix}' for prefix in groups]
        lines.append(f"  chain cali_{way}_wl_dispatch {{ {'; '.join(top)}; drop; }}")
        for prefix, members in groups.items():
            rules = [f'{match} "{name}" goto cali_{way[0]}w_{name}' for name in members]
            lines.append(f"  chain cali_{way}_wl_dispatch_{prefix} {{ {'; '.join(rules)}; drop; }}")
    for name in names:
        head = ("ct state related,established accept; ct state invalid drop; "
                "meta mark set meta mark and 0xfffcffff;")
        lines.append(f"  chain cali_fw_{name} {{ {head} udp dport 4789 drop; meta l4proto 4 drop; "
                     "jump cali_pro_kns_default; meta mark and 0x10000 == 0x10000 return; drop; }")
        policy = ("jump cali_pi_bench; meta mark and 0x10000 == 0x10000 return; "
                  if name in devices else "")
        lines.append(f"  chain cali_tw_{name} {{ {head} {policy}jump cali_pri_kns_default; "
                     "meta mark and 0x10000 == 0x10000 return; drop; }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def tune(places) -> None:
    """Short-lived connections by the thousand: TIME_WAIT sockets reused, every port usable."""
    for place in places:
        for key, value in (("net/ipv4/tcp_tw_reuse", "1"), ("net/ipv4/ip_local_port_range", "1024 65535")):
            subprocess.run(in_ns(place.netns, ["sh", "-c", f"echo {value} > /proc/sys/{key}"]), check=True)


@contextmanager
def direct_pair():
    """Two namespaces on one veth, no node between them: the floor under any node's path."""
    with NetNS("tcbench-a") as a, NetNS("tcbench-b") as b:
        create_veth(a, b, names=("eth0", "eth1"), addresses=("10.75.0.1/24", "10.75.0.2/24"))
        ends = (Place(a.name, "eth0", "10.75.0.1", "", ""), Place(b.name, "eth1", "10.75.0.2", "", ""))
        tune(ends)
        yield ends


def firewall(lab, args, work: Path) -> None:
    """The node's netfilter rules as the options ask, and the tuning short connections need."""
    tune((*lab.pods, lab.remote))
    if args.conntrack:
        lab.nft("add rule inet ebpfkit_lab forward ct state established,related accept")
    if args.kube_proxy:
        rules = work / f"kube-proxy-{lab.network}.nft"
        rules.write_text(kube_proxy_rules(args.kube_proxy))
        subprocess.run(in_ns(lab.node.name, ["nft", "-f", str(rules)]), check=True)
    if args.calico:
        rules = work / f"calico-{lab.network}.nft"
        devices = [p.node_device for p in lab.pods]  # the uplink is no workload's: the remote is a pod elsewhere
        rules.write_text(calico_rules(args.calico, devices, CLUSTER))
        subprocess.run(in_ns(lab.node.name, ["nft", "-f", str(rules)]), check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--conntrack", action="store_true",
                        help="the node tracks forwarded connections (a firewall rule), as a Kubernetes node does")
    parser.add_argument("--kube-proxy", type=int, default=0, metavar="N",
                        help="the node has kube-proxy's iptables-mode rules for N services (implies connection "
                             "tracking)")
    parser.add_argument("--calico", type=int, default=0, metavar="N",
                        help="the node has Calico's iptables-mode rules for N pods (implies connection tracking)")
    parser.add_argument("--cpu", type=int, metavar="N",
                        help="run every process of the benchmark (clients, servers, the softirqs their sends "
                             "raise) on CPU N: no cross-CPU wakeups, whose cost in a VM hides the path's")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    missing = [tool for tool in ("sockperf", "iperf3", "nft") if not shutil.which(tool)]
    if missing:  # else the first round fails, minutes in, on a bare "not found"
        raise SystemExit(f"not installed: {', '.join(missing)} (scripts/setup.sh --bench)")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # inherited by every process started from here
    work = Path(tempfile.mkdtemp(prefix="tc-bench-"))
    exe = build_c(Path(__file__).with_name("crr.c"), work / "crr")
    results: dict = {}
    with LabNode(purpose="tcbench") as lab, LabNode(purpose="tcbench2", network="10.78") as lab2, \
            direct_pair() as direct:
        link, link2 = lab.connect(lab2)
        for node in (lab, lab2):
            firewall(node, args, work)
        paths = {"pod->pod": (lab.pods[0], lab.pods[1]), "pod->remote": (lab.pods[0], lab.remote),
                 "cross-node": (lab.pods[0], lab2.pods[0])}
        for run in range(args.runs):
            for mode in ("plain", "redirect"):
                sessions = []
                try:
                    if mode == "redirect":  # both nodes: the cross-node path skips the stack on each
                        for node, uplinks in ((lab, [lab.remote.node_device, link]), (lab2, [link2])):
                            sessions.append(tc.open_redirect(netns=node.node.name, uplinks=uplinks,
                                                             endpoints=[(p.netns, p.device) for p in node.pods]))
                    # the floor, measured in the plain rounds only: nothing of tc redirect is on it
                    for path, (src, dst) in ({**paths, "direct": direct} if mode == "plain" else paths).items():
                        for name, measure in (("rr", lambda s, d: rr(s, d, args.seconds)),
                                              ("crr", lambda s, d: crr(s, d, args.seconds, exe)),
                                              ("stream", lambda s, d: stream(s, d, args.seconds))):
                            value = measure(src, dst)
                            results.setdefault((path, name, mode), []).append(value)
                            print(f"run {run + 1} {mode:8} {path:12} {name:6} {value:12.2f} {UNITS[name]}",
                                  file=sys.stderr, flush=True)
                finally:
                    for session in sessions:
                        session.close()
    place = f"all on CPU {args.cpu}" if args.cpu is not None else "placed by the scheduler"
    node = ", ".join([*([f"Calico's rules for {args.calico} pods"] if args.calico else []),
                      *([f"kube-proxy's rules for {args.kube_proxy} services"] if args.kube_proxy else []),
                      *(["connection tracking on"] if args.conntrack else [])]) or "no connection tracking"
    print(f"\ntc redirect vs the node's routing ({os.uname().release}, {node}; {place}; medians of {args.runs} runs of "
          f"{args.seconds:g} s)\n")
    print(f"{'path':12} {'measure':8} {'plain':>12} {'redirect':>12} {'ratio':>7}  target")
    doc = []
    for path in ("pod->pod", "pod->remote", "cross-node"):
        for name in ("rr", "crr", "stream"):
            plain, fast = median(results[(path, name, "plain")]), median(results[(path, name, "redirect")])
            ratio = fast / plain if plain else float("nan")
            verdict = "PASS" if ratio >= TARGETS[name] else "below"
            print(f"{path:12} {name:8} {plain:12.2f} {fast:12.2f} {ratio:6.2f}x  >= {TARGETS[name]}x {verdict}"
                  f"  ({UNITS[name]})")
            doc.append({"path": path, "measure": name, "plain": plain, "redirect": fast, "ratio": ratio,
                        "target": TARGETS[name], "unit": UNITS[name],
                        "runs": {m: results[(path, name, m)] for m in ("plain", "redirect")}})
    floor = {name: median(results[("direct", name, "plain")]) for name in ("rr", "crr", "stream")}
    print("\nno node at all (two namespaces on one veth): " +
          ", ".join(f"{name} {floor[name]:.2f} {UNITS[name]}" for name in floor))
    for path in ("pod->pod", "cross-node"):
        print(f"{path} with tc redirect reaches " + ", ".join(
            f"{name} {median(results[(path, name, 'redirect')]) / floor[name]:.0%}" for name in floor) +
              " of that; the plain path " + ", ".join(
            f"{name} {median(results[(path, name, 'plain')]) / floor[name]:.0%}" for name in floor))
    if args.json:
        direct = {name: results[("direct", name, "plain")] for name in floor}
        Path(args.json).write_text(json.dumps({"kernel": os.uname().release, "conntrack": args.conntrack,
                                               "kube_proxy_services": args.kube_proxy, "calico_pods": args.calico,
                                               "cpu": args.cpu, "rows": doc, "direct": direct}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
