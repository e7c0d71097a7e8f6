"""sockmap acceleration, side by side: plain TCP, the source documents' minimal
sockops+sk_msg sample, and `ebpfkit sockmap`, each in a fresh child cgroup, over loopback.

    sudo python benchmarks/sockmap_bench.py [--duration 3] [--rounds 3] [--only sockperf] [--json]

Workloads: sockperf TCP ping-pong 64 B (p50/p99), iperf3 against its default server (on
"::") with and without TCP_NODELAY, nginx load balancer + two nginx backends driven by wrk.
The sample runs a second time in a cgroup of its own (A/A), which measures the noise; the
sk_msg row is each program's cost per message (kernel run-time statistics).
The measurement is ebpfkit.tools.sockmap.bench, the same one `ebpfkit sockmap bench` prints.
Targets (issue 6): p50 <= 0.8x plain and not above the minimal sample by more than the A/A
noise of the same run; iperf3 >= 1.8x; nginx req/s >= 1.1x with zero errors. Exit status 0
when every target is met, 1 otherwise. sockperf adds ~2 s to every run it makes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ebpfkit.tools.sockmap.bench import run_bench  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per measurement (default 3)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per workload, medians reported (default 3)")
    ap.add_argument("--only", action="append", choices=["sockperf", "iperf3", "nginx"],
                    help="run only this workload (repeatable)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("sockmap_bench needs root (it attaches sockops/sk_msg to a child cgroup)", file=sys.stderr)
        return 4

    def progress(fmt, *a):
        print(fmt % a, file=sys.stderr, flush=True)

    result = run_bench(duration=args.duration, rounds=args.rounds, only=args.only, progress=progress)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(result.table())
    verdicts = [m.ok() for m in result.metrics if m.ok() is not None]
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
