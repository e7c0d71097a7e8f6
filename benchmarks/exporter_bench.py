"""`ebpfkit exporter` next to node_exporter, in one run (as root):

    python benchmarks/exporter_bench.py [--scrapes 60] [--idle 20] [--series 10000] [--json FILE]

Three exporters on loopback, one after the other: Debian's node_exporter with its defaults (the
reference of a well-behaved exporter on this machine), `ebpfkit exporter` with the shipped
example config (runqlat + iofsstat), and `ebpfkit exporter` serving about --series series: an
xdp filter attached with --series/2 rules on a veth in a namespace this script creates, whose
per-rule packets and bytes counters the xdp_filter source exports (series_limit raised to fit).

For each: --scrapes sequential GETs of /metrics (latency p50/p99, series per scrape), then
--idle seconds without a scrape (CPU of the exporter process, % of one core), and its RSS
after the scrapes (VmRSS). Targets (issue 18): the 10k-series scrape p99 <= 100 ms; idle CPU
<= 1% of a core; RSS <= 2x node_exporter's. Exit status 0 when every target is met.
Everything it creates (the namespace, the pinned filter, the processes) is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ebpfkit.net import NetNS, create_veth  # noqa: E402

NODE_EXPORTER = "prometheus-node-exporter"  # Debian's name for node_exporter
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> tuple[float, int]:
    """(seconds, series) of one GET of /metrics."""
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = resp.read()
    seconds = time.perf_counter() - t
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return seconds, series


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            scrape(url)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s")


def measure(name: str, argv: list[str], port: int, scrapes: int, idle: float) -> dict:
    url = f"http://127.0.0.1:{port}/metrics"
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(url, proc)
        scrape(url)  # a first scrape sets things up (sources start, maps opened): not timed
        results = [scrape(url) for _ in range(scrapes)]
        rss = rss_mib(proc.pid)
        before = cpu_seconds(proc.pid)
        time.sleep(idle)
        idle_cpu = (cpu_seconds(proc.pid) - before) / idle * 100
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    times = sorted(s for s, _ in results)
    row = {"exporter": name, "series": statistics.median(n for _, n in results),
           "p50_ms": statistics.median(times) * 1000,
           "p99_ms": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))] * 1000,
           "rss_mib": rss, "idle_cpu_pct": idle_cpu}
    log(f"  {name}: {row['series']:.0f} series, p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, "
        f"RSS {rss:.1f} MiB, idle CPU {idle_cpu:.2f}%")
    return row


def ebpfkit_argv(config: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "ebpfkit", "exporter", "--config", str(config), "--listen", f"127.0.0.1:{port}"]


class XdpRules:
    """A pinned xdp filter with ``n`` /32 rules on a veth in a namespace of our own."""

    def __init__(self, n: int, tmp: Path):
        self.ns = NetNS("exporterbench").create()
        create_veth(self.ns, names=("xb0", "xb1"))
        rules = tmp / "rules.yaml"
        rules.write_text("rules:\n" + "".join(f"  - src: 10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}\n"
                                              for i in range(n)))
        self.cli(["attach", "--iface", "xb0", "--netns", self.ns.name, "--rules-file", str(rules)])

    def cli(self, args: list[str]) -> None:
        out = subprocess.run([sys.executable, "-m", "ebpfkit", "xdp", "filter", *args],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"xdp filter {args[0]}: {out.stderr.strip()}")

    def close(self) -> None:
        try:
            self.cli(["detach", "--iface", "xb0", "--netns", self.ns.name])
        finally:
            self.ns.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scrapes", type=int, default=60)
    ap.add_argument("--idle", type=float, default=20.0, help="seconds without scrapes for the CPU figure")
    ap.add_argument("--series", type=int, default=10_000)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        log("run as root: the exporter loads BPF programs")
        return 4
    rows = []
    with tempfile.TemporaryDirectory(prefix="ebpfkit-exporter-bench-") as tmp:
        tmp = Path(tmp)
        node = shutil.which(NODE_EXPORTER) or shutil.which("node_exporter")
        if node is None:
            log(f"{NODE_EXPORTER} not installed (apt-get install prometheus-node-exporter): no reference row")
        else:
            port = free_port()
            rows.append(measure("node_exporter (defaults)", [node, f"--web.listen-address=127.0.0.1:{port}"],
                                port, args.scrapes, args.idle))
        port = free_port()
        rows.append(measure("ebpfkit (example config)",
                            ebpfkit_argv(REPO / "ebpfkit" / "exporter" / "example.yaml", port),
                            port, args.scrapes, args.idle))
        rules = XdpRules(args.series // 2, tmp)
        try:
            config = tmp / "10k.yaml"
            config.write_text(f"series_limit: {args.series}\nsources:\n"
                              f"  - source: xdp_filter\n    iface: xb0\n    netns: {rules.ns.name}\n")
            port = free_port()
            rows.append(measure(f"ebpfkit ({args.series // 1000}k series: xdp_filter)", ebpfkit_argv(config, port),
                                port, args.scrapes, args.idle))
        finally:
            rules.close()
    print_table(rows)
    ok = check_targets(rows, args.series)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0 if ok else 1


def print_table(rows: list[dict]) -> None:
    print("| exporter | series | scrape p50 | scrape p99 | RSS | idle CPU |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['exporter']} | {r['series']:.0f} | {r['p50_ms']:.1f} ms | {r['p99_ms']:.1f} ms | "
              f"{r['rss_mib']:.1f} MiB | {r['idle_cpu_pct']:.2f}% |")


def check_targets(rows: list[dict], series: int) -> bool:
    node = next((r for r in rows if r["exporter"].startswith("node_exporter")), None)
    ours = [r for r in rows if r["exporter"].startswith("ebpfkit")]
    big = ours[-1]
    checks = [(f"{series // 1000}k-series scrape p99 <= 100 ms", big["p99_ms"] <= 100, f"{big['p99_ms']:.1f} ms")]
    checks += [(f"idle CPU <= 1% ({r['exporter']})", r["idle_cpu_pct"] <= 1, f"{r['idle_cpu_pct']:.2f}%")
               for r in ours]
    if node is not None:
        checks += [(f"RSS <= 2x node_exporter ({r['exporter']})", r["rss_mib"] <= 2 * node["rss_mib"],
                    f"{r['rss_mib'] / node['rss_mib']:.2f}x") for r in ours]
    print("\nTargets")
    for what, passed, figure in checks:
        print(f"  {what:<55} {figure:>10}  {'met' if passed else 'MISSED'}")
    return all(passed for _, passed, _ in checks)


if __name__ == "__main__":
    sys.exit(main())
