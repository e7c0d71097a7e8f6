"""XDP benchmarks, side by side in one run (as root):

    python benchmarks/xdp_bench.py [--runs 3] [--skip drop,testrun,maglev] [--json FILE]

1. Drop rate on a veth: the same 60-byte UDP frames, sent from one test namespace across a
   veth into another, dropped by ebpfkit's filter (native XDP), by xdp-filter (Debian's
   xdp-tools, native XDP) or by an nftables rule at the netdev ingress hook of that veth.
   Once with one rule, once with 10k rules (ours: 10k /24 CIDRs; xdp-filter: 10k addresses,
   all it can match; nftables: an interval set of the same 10k /24s). Two generators:
   trafgen (netsniff-ng; AF_PACKET, every frame an skb) and XDP live frames (what
   xdp-trafficgen does: BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES and XDP_TX out of
   the sending veth; xdp-trafficgen 1.3.1 itself does not load on kernels without the
   xdp_redirect_map_err tracepoint). GRO is enabled on the receiving veth so that, for every
   contender, frames arrive through the veth's NAPI poll: the same path. The rate is the
   contender's own drop counter divided by the generator's wall time (both are on the one
   CPU the generator runs on: veth receive work is done in the sender's softirq).
2. ns/packet through BPF_PROG_TEST_RUN (1M repeats) with 10, 10k and 1M rules vs a no-op
   XDP program; a packet that matches a rule (hit) and one that matches none (miss). For
   reference, xdp-filter's program with its 10k addresses on the same frames.
3. Maglev: table build time for 1000 backends, balance, and the share of the table remapped
   when one backend is removed, vs the 1/N ideal.

Everything runs inside namespaces this script creates and removes.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import ipaddress
import json
import os
import random
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ebpfkit  # noqa: E402
from ebpfkit.engine.constants import BPF_F_TEST_XDP_LIVE_FRAMES  # noqa: E402
from ebpfkit.net import NetNS, create_veth, in_netns  # noqa: E402

SRC, DST = "198.18.0.1", "198.19.0.1"   # benchmark address ranges (RFC 2544)
BLOCK = "198.18.0.0/24"
ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:aa")  # never let scapy look MACs up
NOOP_SRC = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
SEC("xdp") int xdp_noop(struct xdp_md *ctx) { return XDP_PASS; }
SEC("xdp") int xdp_gen_tx(struct xdp_md *ctx) { return XDP_TX; }
char LICENSE[] SEC("license") = "GPL";
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(*argv, ns: str | None = None, check=True, **kw) -> subprocess.CompletedProcess:
    """A command in the network namespace ``ns`` only (nsenter --net keeps bpffs and /sys)."""
    if ns:
        argv = ("nsenter", f"--net=/run/netns/{ns}", *argv)
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kw)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} exited {out.returncode}: "
                           f"{(out.stderr or out.stdout).strip()[-500:]}")
    return out


def ten_thousand_nets(n: int = 10000) -> list[ipaddress.IPv4Network]:
    """BLOCK and n-1 other disjoint /24s (never nesting, never covering the traffic)."""
    rng = random.Random(42)
    nets = {ipaddress.ip_network(BLOCK)}
    while len(nets) < n:
        nets.add(ipaddress.ip_network((rng.randrange(0x0B000000, 0x3F000000) & ~0xFF, 24)))
    return sorted(nets)


# --- 1. drop rate -------------------------------------------------------------------------------

def _ethtool_set(ns: str, ifname: str, cmd: int, value: int) -> None:
    """`ethtool -K` through the SIOCETHTOOL ioctl, in the namespace (no ethtool binary needed)."""
    def work():
        buf = ctypes.create_string_buffer(struct.pack("II", cmd, value))
        ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(buf)).ljust(40, b"\0")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), 0x8946, ifreq)

    in_netns(ns, work)


ETHTOOL_SGRO = 0x2C


class Lab:
    """rx (filters attach here) <- veth <- tx (generators)."""

    def __init__(self):
        self.rx, self.tx = NetNS("xdpbench-rx").create(), NetNS("xdpbench-tx").create()
        self.pair = create_veth(self.rx, self.tx, names=("rx0", "tx0"),
                                addresses=("198.19.0.1/24", "198.19.0.2/24"))
        _ethtool_set(self.rx.name, "rx0", ETHTOOL_SGRO, 1)  # NAPI on, also without XDP
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether

        self.frame = bytes(Ether(src=self.pair.b.mac, dst=self.pair.a.mac) / IP(src=SRC, dst=DST)
                           / UDP(sport=1234, dport=5000) / (b"x" * 18))
        self.workdir = Path(tempfile.mkdtemp(prefix="ebpfkit-xdpbench-"))
        cfg = self.workdir / "frame.cfg"
        cfg.write_text("{ " + ", ".join(f"0x{b:02x}" for b in self.frame) + " }\n")
        self.trafgen_cfg = cfg
        self.gen = ebpfkit.compile(text=NOOP_SRC, name="xdpbench.bpf.c").load()

    def close(self):
        self.gen.close()
        self.tx.close()
        self.rx.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # --- generators: (packets sent, seconds) ---

    def trafgen(self, count: int) -> tuple[int, float]:
        t = time.monotonic()
        run("trafgen", "-o", "tx0", "-i", self.trafgen_cfg, "-n", count, "-P", "1", "--no-sock-mem",
            "--notouch-irq", ns=self.tx.name)
        return count, time.monotonic() - t

    def live_frames(self, count: int) -> tuple[int, float]:
        program = self.gen.programs["xdp_gen_tx"]
        frame = self.frame
        # struct xdp_md: data, data_end, data_meta, ingress_ifindex (the frames go out of it), ...
        ctx = struct.pack("IIIIII", 0, len(frame), 0, self.pair.b.ifindex, 0, 0)

        def work():
            os.sched_setaffinity(0, {0})  # this thread only, like trafgen's one process on CPU 0
            t = time.monotonic()
            program.test_run(frame, ctx, repeat=count, flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=256)
            return time.monotonic() - t

        return count, in_netns(self.tx.name, work)


class EbpfkitContender:
    name = "ebpfkit filter"

    def __init__(self, lab, nets):
        from ebpfkit.tools.xdp.filter import FilterConfig, attach
        from ebpfkit.tools.xdp.rules import Rule

        rules = [Rule(src=n) for n in nets]
        self.att = attach("rx0", rules, FilterConfig(mode="native", max_rules=max(len(rules), 16)),
                          netns=lab.rx.name, persistent=False)

    def dropped(self) -> int:
        return self.att.tables.totals()["dropped"][0]

    def close(self):
        self.att.close()


class XdpFilterContender:
    name = "xdp-filter"

    def __init__(self, lab, nets):
        self.ns = lab.rx.name
        self.had_xdp_dir = os.path.exists("/sys/fs/bpf/xdp")
        run("xdp-filter", "load", "rx0", "--mode", "native", "--features", "ipv4", ns=self.ns)
        run("xdp-filter", "ip", SRC, "--mode", "src", ns=self.ns)
        if len(nets) > 1:
            self._bulk_add(len(nets) - 1)

    def _bulk_add(self, n: int) -> None:
        """xdp-filter takes one address per command; write the rest into its pinned map
        with the value bytes it wrote itself for SRC (mode src, counter 0)."""
        from ebpfkit.engine.pinned import FdMap

        with FdMap.open_pinned("/sys/fs/bpf/xdp-filter/filter_ipv4") as m:
            value = m.lookup(socket.inet_aton(SRC))
            rng = random.Random(7)
            keys = set()
            while len(keys) < n:
                keys.add(struct.pack(">I", rng.randrange(0x0B000000, 0x3F000000)))
            m.update_many([(k, value) for k in keys])

    def dropped(self) -> int:
        out = run("xdp-filter", "status", ns=self.ns).stdout
        m = re.search(r"XDP_DROP\s+(\d+) pkts", out)
        return int(m.group(1)) if m else 0

    def close(self):
        run("xdp-filter", "unload", "rx0", ns=self.ns, check=False)
        if not self.had_xdp_dir and os.path.isdir("/sys/fs/bpf/xdp"):
            # libxdp's directory appeared with our load: remove it if unload left it empty
            for root, dirs, files in os.walk("/sys/fs/bpf/xdp", topdown=False):
                if not files and not os.listdir(root):
                    os.rmdir(root)


class NftContender:
    name = "nftables (netdev ingress)"

    def __init__(self, lab, nets):
        self.ns = lab.rx.name
        lines = ["table netdev ekbench {"]
        if len(nets) == 1:
            lines += ['  chain in { type filter hook ingress device "rx0" priority 0;',
                      f"    ip saddr {nets[0]} counter drop", "  }"]
        else:
            lines += ["  set blocked { type ipv4_addr; flags interval; elements = { "
                      + ", ".join(map(str, nets)) + " } }",
                      '  chain in { type filter hook ingress device "rx0" priority 0;',
                      "    ip saddr @blocked counter drop", "  }"]
        lines.append("}")
        path = lab.workdir / "nft.conf"
        path.write_text("\n".join(lines) + "\n")
        run("nft", "-f", path, ns=self.ns)

    def dropped(self) -> int:
        out = run("nft", "list", "table", "netdev", "ekbench", ns=self.ns).stdout
        m = re.search(r"counter packets (\d+)", out)
        return int(m.group(1)) if m else 0

    def close(self):
        run("nft", "delete", "table", "netdev", "ekbench", ns=self.ns, check=False)


CONTENDERS = [EbpfkitContender, XdpFilterContender, NftContender]


def bench_drop(runs: int, counts: dict[str, int], rounds: int = 3) -> list[dict]:
    """Each contender is attached, measured and removed in turn, ``rounds`` times over (the
    order rotated), so that background noise on a shared machine spreads over all of them;
    medians of all runs."""
    lab = Lab()
    rows = []
    # live frames need nothing installed; trafgen (netsniff-ng) may be missing: its rows are left out
    generators = tuple((name, gen) for name, gen in (("trafgen", lab.trafgen), ("live frames", lab.live_frames))
                       if name != "trafgen" or shutil.which("trafgen"))
    rule_sets = (("1 rule", [ipaddress.ip_network(BLOCK)]), ("10k rules", ten_thousand_nets()))
    try:
        for rules_label, nets in rule_sets:
            samples: dict[tuple, list] = {}
            errors: dict[str, str] = {}
            for round_ in range(rounds):
                # rotated: each contender takes each place in the order once every len() rounds
                turn = round_ % len(CONTENDERS)
                for cls in CONTENDERS[turn:] + CONTENDERS[:turn]:
                    if cls.name in errors:
                        continue
                    try:
                        contender = cls(lab, nets)
                    except (RuntimeError, OSError) as exc:  # a tool missing or failing: say which
                        errors[cls.name] = str(exc)[:300]
                        continue
                    try:
                        for gen_name, gen in generators:
                            gen(20000)  # warm up
                            for _ in range(runs):
                                before = contender.dropped()
                                sent, seconds = gen(counts[gen_name])
                                dropped = contender.dropped() - before
                                samples.setdefault((cls.name, gen_name), []).append((dropped / seconds, dropped / sent))
                    finally:
                        contender.close()
            for (name, gen_name), got in samples.items():
                rates = sorted(r for r, _ in got)
                rows.append({"rules": rules_label, "contender": name, "generator": gen_name,
                             "mpps": statistics.median(rates) / 1e6, "min_mpps": rates[0] / 1e6,
                             "max_mpps": rates[-1] / 1e6, "dropped_share": min(s for _, s in got),
                             "samples": len(got)})
                log(f"  {rules_label:9} {name:26} {gen_name:12} {rows[-1]['mpps']:.3f} Mpps "
                    f"({rates[0] / 1e6:.3f}-{rates[-1] / 1e6:.3f}; dropped >= {rows[-1]['dropped_share']:.1%} of sent)")
            rows += [{"rules": rules_label, "contender": n, "error": e} for n, e in errors.items()]
    finally:
        lab.close()
    return rows


# --- 2. ns/packet through BPF_PROG_TEST_RUN ------------------------------------------------------------

def _rule_sets(n: int, shape: str):
    from ebpfkit.tools.xdp.rules import Rule

    rng = random.Random(n)
    if shape == "/24":
        nets = ten_thousand_nets(n) if n <= 10000 else None
        if nets is None:
            starts = set()
            while len(starts) < n - 1:
                starts.add(rng.randrange(0x0B000000, 0x5F000000) & ~0xFF)
            starts.discard(int(ipaddress.ip_address(SRC)) & ~0xFF)
            nets = [ipaddress.ip_network(BLOCK)] + [ipaddress.IPv4Network((s, 24)) for s in starts]
        return [Rule(src=x) for x in nets[:n]]
    addrs = {int(ipaddress.ip_address(SRC))}
    while len(addrs) < n:
        addrs.add(rng.randrange(0x0B000000, 0x5F000000))
    return [Rule(src=ipaddress.IPv4Network((a, 32))) for a in addrs]


def bench_testrun(runs: int, sizes=(10, 10_000, 1_000_000)) -> list[dict]:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from ebpfkit.tools.xdp.filter import FilterConfig, load_filter

    hit = bytes(Ether(**ETH) / IP(src=SRC, dst=DST) / UDP(sport=1234, dport=5000) / (b"x" * 18))
    miss = bytes(Ether(**ETH) / IP(src="192.168.7.7", dst=DST) / UDP(sport=1234, dport=5000) / (b"x" * 18))
    repeat = 1_000_000

    def ns_per_packet(prog, frame):
        return statistics.median(prog.test_run(frame, repeat=repeat).duration_ns for _ in range(runs))

    with ebpfkit.compile(text=NOOP_SRC, name="xdpbench.bpf.c").load() as noop_obj:
        noop = ns_per_packet(noop_obj.programs["xdp_noop"], hit)
    rows = [{"program": "no-op XDP", "rules": 0, "shape": "-", "hit_ns": noop, "miss_ns": noop,
             "load_s": 0.0}]
    log(f"  no-op: {noop:.0f} ns/packet")
    for n in sizes:
        for shape in ("/24", "/32"):
            rules = _rule_sets(n, shape)
            t = time.monotonic()
            obj, tables = load_filter(rules, FilterConfig(max_rules=n))
            load_s = time.monotonic() - t
            try:
                prog = obj.programs["xdp_filter"]
                assert prog.test_run(hit).retval == 1 and prog.test_run(miss).retval == 2
                row = {"program": "ebpfkit filter", "rules": n, "shape": shape, "hit_ns": ns_per_packet(prog, hit),
                       "miss_ns": ns_per_packet(prog, miss), "load_s": load_s}
            finally:
                tables.close()
                obj.close()
            rows.append(row)
            log(f"  {n:>9} {shape} rules: hit {row['hit_ns']:.0f} ns, miss {row['miss_ns']:.0f} ns "
                f"(rules loaded in {load_s:.1f} s)")
    rows.append(_xdp_filter_testrun(hit, miss, ns_per_packet))
    return rows


def _xdp_filter_testrun(hit: bytes, miss: bytes, ns_per_packet) -> dict:
    """xdp-filter's program (libxdp's dispatcher and the filter behind it) with its 10k
    addresses, run on the same frames: what it costs per packet without the receive path."""
    row = {"program": "xdp-filter", "rules": 10_000, "shape": "/32 (hash)", "load_s": 0.0}
    if not shutil.which("xdp-filter"):
        return dict(row, error="xdp-filter not installed (apt-get install xdp-tools)")
    from ebpfkit.engine import inventory
    from ebpfkit.engine.testrun import test_run

    lab = Lab()
    try:
        t = time.monotonic()
        contender = XdpFilterContender(lab, ten_thousand_nets())
        row["load_s"] = time.monotonic() - t
        try:
            link = json.loads(run("ip", "-j", "-d", "link", "show", "rx0", ns=lab.rx.name).stdout)[0]
            prog_id = link["xdp"]["prog"]["id"]
            fd = inventory.open_by_id("prog", prog_id)
            if fd is None:
                raise RuntimeError(f"its program {prog_id} is gone")
            # the shape of an engine Program, for ns_per_packet
            prog = SimpleNamespace(test_run=lambda frame, repeat=1: test_run(fd, "xdp-filter", frame, repeat=repeat))
            try:
                assert prog.test_run(hit).retval == 1 and prog.test_run(miss).retval == 2
                row["hit_ns"], row["miss_ns"] = ns_per_packet(prog, hit), ns_per_packet(prog, miss)
            finally:
                os.close(fd)
        finally:
            contender.close()
    except (RuntimeError, OSError, KeyError, IndexError) as exc:
        row["error"] = f"xdp-filter: {exc}"
    finally:
        lab.close()
    log("  xdp-filter, 10k addresses: "
        + (row.get("error") or f"hit {row['hit_ns']:.0f} ns, miss {row['miss_ns']:.0f} ns"))
    return row


# --- 3. Maglev -----------------------------------------------------------------------------------

def bench_maglev(runs: int) -> list[dict]:
    from ebpfkit.tools.xdp.maglev import build_table, remapped, shares

    rows = []
    for n, size in ((1000, 65537), (1000, 655373), (100, 65537), (10, 65537)):
        names = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(n)]
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            table = build_table(names, size)
            times.append(time.perf_counter() - t)
        owned = shares(table).values()
        removals = [remapped(table, build_table(names[:k] + names[k + 1:], size))
                    for k in random.Random(1).sample(range(n), min(n, 5))]
        rows.append({"backends": n, "table_size": size, "build_s": statistics.median(times),
                     "min_share": min(owned), "max_share": max(owned), "ideal_share": size / n,
                     "remap_mean": statistics.mean(removals), "remap_max": max(removals), "ideal_remap": 1 / n})
        log(f"  N={n} M={size}: build {rows[-1]['build_s'] * 1000:.0f} ms, remap max {max(removals):.5f} "
            f"vs 1/N {1 / n:.5f}")
    return rows


# --- report --------------------------------------------------------------------------------------

def _table(headers, rows) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def report(results: dict) -> str:
    out = []
    drop = results.get("drop")
    if drop:
        out.append("## Drop rate on a veth (Mpps dropped: median (min-max) of all runs; same frames, same path)\n")
        by = {(r["rules"], r["contender"], r.get("generator")): r for r in drop}
        rows = []
        for rules in ("1 rule", "10k rules"):
            for gen in ("trafgen", "live frames"):
                cell = lambda c: by.get((rules, c, gen))  # noqa: E731
                ours, xf, nft = cell("ebpfkit filter"), cell("xdp-filter"), cell("nftables (netdev ingress)")
                fmt = lambda r: f"{r['mpps']:.2f} ({r['min_mpps']:.2f}-{r['max_mpps']:.2f})" if r else "n/a"  # noqa
                ratio = lambda a, b: f"{a['mpps'] / b['mpps']:.2f}x" if a and b and b["mpps"] else "n/a"  # noqa
                rows.append([rules, gen, fmt(ours), fmt(xf), fmt(nft), ratio(ours, nft), ratio(ours, xf)])
        out.append(_table(["rules", "generator", "ebpfkit", "xdp-filter", "nftables", "ebpfkit/nft",
                           "ebpfkit/xdp-filter"], rows))
        errors = [r for r in drop if "error" in r]
        for e in errors:
            out.append(f"\n{e['contender']} ({e['rules']}): {e['error']}")
        out.append("\nTargets: ebpfkit >= 5x nftables; >= 1x xdp-filter with 10k rules.\n")
    tr = results.get("testrun")
    if tr:
        noop = tr[0]["hit_ns"]
        out.append("## ns/packet through BPF_PROG_TEST_RUN (1M repeats, median)\n")
        rows = [[r["program"], r["rules"], r["shape"], f"{r['hit_ns']:.0f}", f"{r['hit_ns'] / noop:.2f}x",
                 f"{r['miss_ns']:.0f}", f"{r['miss_ns'] / noop:.2f}x", f"{r['load_s']:.1f}"]
                for r in tr if "error" not in r]
        out.append(_table(["program", "rules", "CIDRs", "hit ns", "hit/no-op", "miss ns", "miss/no-op",
                           "rules load s"], rows))
        out += [f"\n{r['error']}" for r in tr if "error" in r]
        out.append("\nTarget: <= 4x no-op at 1M rules. (xdp-filter: its own 10k addresses in a hash, "
                   "through libxdp's dispatcher, for reference.)\n")
    mg = results.get("maglev")
    if mg:
        out.append("## Maglev (pure Python)\n")
        rows = [[r["backends"], r["table_size"], f"{r['build_s'] * 1000:.0f}",
                 f"{r['min_share']}-{r['max_share']} (ideal {r['ideal_share']:.1f})",
                 f"{r['remap_mean']:.5f}", f"{r['remap_max']:.5f}", f"{r['ideal_remap']:.5f}",
                 f"{r['remap_max'] / r['ideal_remap']:.2f}x"] for r in mg]
        out.append(_table(["backends N", "table M", "build ms", "slots per backend", "remap mean",
                           "remap max", "1/N", "max/ideal"], rows))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement (drop rate: per round)")
    ap.add_argument("--rounds", type=int, default=3, help="drop rate: times each contender is set up")
    ap.add_argument("--skip", default="", help="comma list of: drop, testrun, maglev")
    ap.add_argument("--trafgen-packets", type=int, default=1_000_000)
    ap.add_argument("--live-packets", type=int, default=5_000_000)
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("run as root: the benchmark loads BPF programs and creates network namespaces", file=sys.stderr)
        return 4
    skip = set(filter(None, args.skip.split(",")))
    results = {}
    if "drop" not in skip:
        missing = [t for t in ("trafgen", "xdp-filter", "nft") if not shutil.which(t)]
        if missing:
            log(f"drop-rate benchmark: missing {', '.join(missing)} (apt-get install netsniff-ng xdp-tools nftables)")
        log("drop rate on a veth ...")
        results["drop"] = bench_drop(args.runs, {"trafgen": args.trafgen_packets, "live frames": args.live_packets},
                                     args.rounds)
    if "testrun" not in skip:
        log("ns/packet through BPF_PROG_TEST_RUN ...")
        results["testrun"] = bench_testrun(args.runs)
    if "maglev" not in skip:
        log("Maglev ...")
        results["maglev"] = bench_maglev(args.runs)
    print(report(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
