"""`ebpfkit detect run` (the built-in rules; and with three bait files) against nothing, on six loops:

    sudo .venv/bin/python benchmarks/detect_bench.py [--runs 5]

Each round runs the loops of detect_loop.c bare and with `detect run` attached, in alternating
order: fork+exec of /bin/true (each an event); a refused TCP connect() on loopback, which the
kernel drops unbuilt (no built-in rule wants a connect on fd 3 by a non-shell); the same with
the socket on fd 0 (each an event, throttled beyond 2000 a second, and a reverse-shell alert,
rate-limited); open+close of a file for reading (no event: what the syscall tracepoints' slow
path costs every syscall); and open+close of a file for writing, which the bait programs follow
from the open's entry to its exit, where the file is looked up among the baits (no event: it
is not one); and 64-byte pwrite()s to a file opened once, each looked up among the baits by
its fd's file. With baits declared (the second configuration) the exits of open, openat,
openat2 and creat and the truncate, ftruncate, rename, unlink and write (pwrite64, writev, ...)
tracepoints are attached; without, they are not.
A floor beside them: one empty program on a syscall tracepoint none of the loops calls
(quotactl). Once any syscall tracepoint has a program, every syscall of every process takes the
kernel's slow path (its entry and exit through the tracing hooks): what any detector built on
syscall tracepoints costs each syscall on a kernel without kprobes, fentry or BPF-LSM, as this
host is. The built-in rules' ratio on the loops without events is compared with it.
Targets (issue 22): each loop <= 1.10x bare; no event lost at the fastest exec and connect
rates this machine reaches (the loops run flat out); start-up (spawn to the banner) <= 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import REPO, build_c, median  # noqa: E402

LOOPS = {"exec": 2000, "connect": 50000, "open": 200000, "openw": 200000, "write": 400000,
         "connect0": 50000}  # the flood last
RATIO_TARGET, START_TARGET = 1.10, 0.5
CONFIGS = ("built-in rules", "and 3 baits", "floor")
FLOOR_PROGRAM = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("tp/syscalls/sys_enter_quotactl") /* never called by the loops */
int floor_syscall_tracepoint(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
"""


def run_loop(exe: Path, kind: str, n: int, target: Path) -> tuple[float, int]:
    """(ns per operation, the loop's pid)."""
    proc = subprocess.Popen([str(exe), kind, str(n), str(target)], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"detect_loop {kind} failed ({proc.returncode})")
    return float(out), proc.pid


def bait_rules(tmp: Path) -> Path:
    """Three baits in a directory of their own (planted by detect)."""
    share = tmp / "share"
    share.mkdir()
    rules = tmp / "baits.yaml"
    rules.write_text("- bait: bench\n  paths: [" + ", ".join(f'"{share}/!000{i}-bait.docx"' for i in range(3)) + "]\n")
    return rules


class Floor:
    """FLOOR_PROGRAM attached in this process, from its load to its link's close."""

    def __init__(self, tmp: Path):
        from ebpfkit.engine import compile as compile_bpf

        source = tmp / "floor.bpf.c"
        source.write_text(FLOOR_PROGRAM)
        started = time.monotonic()
        self.obj = compile_bpf(str(source)).load()
        self.obj.attach()
        self.start_s = time.monotonic() - started

    def stop(self) -> tuple[list[dict], str]:
        self.obj.close()
        return [], ""


class Detect:
    """`ebpfkit --format json detect run`, from spawn to its banner (the start-up time)."""

    def __init__(self, rules: Path | None):
        python = REPO / ".venv" / "bin" / "python"
        started = time.monotonic()
        extra = ["--no-alert-log", *(["--rules", str(rules)] if rules else [])]
        self.proc = subprocess.Popen([str(python if python.exists() else sys.executable), "-m", "ebpfkit",
                                      "--format", "json", "detect", "run", *extra], cwd=REPO, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, NO_COLOR="1"))
        for line in self.proc.stderr:
            if "Hit Ctrl-C" in line:
                break
        else:
            raise SystemExit(f"detect did not start: {self.proc.stderr.read()}")
        self.start_s = time.monotonic() - started

    def stop(self) -> tuple[list[dict], str]:
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        return [json.loads(line) for line in out.splitlines() if line.strip()], err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (default 5)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("detect loads BPF programs: run as root", file=sys.stderr)
        return 4
    started = time.monotonic()
    bare = {k: [] for k in LOOPS}
    traced = {c: {k: [] for k in LOOPS} for c in CONFIGS}
    starts = {c: [] for c in CONFIGS}
    lost_by_loop = {k: 0 for k in LOOPS}  # "Events lost" alerts raised while each loop ran
    held_by_loop = {k: 0 for k in LOOPS}  # events "Events throttled" alerts say were held back
    with tempfile.TemporaryDirectory(prefix="ebpfkit-detect-bench-") as tmp:
        exe = build_c(HERE / "detect_loop.c", Path(tmp) / "detect_loop")
        rules, target = bait_rules(Path(tmp)), Path(tmp) / "written"
        target.write_bytes(b"")
        for kind, n in LOOPS.items():
            run_loop(exe, kind, n // 10, target)  # warm
        for run in range(args.runs):
            order = [None, *CONFIGS] if run % 2 == 0 else [*CONFIGS, None]  # None: bare
            for config in order:
                tool = None
                if config == "floor":
                    tool = Floor(Path(tmp))
                elif config is not None:
                    tool = Detect(rules if config == "and 3 baits" else None)
                    starts[config].append(tool.start_s)
                spans, pids = {}, {}
                for kind, n in LOOPS.items():
                    begun = time.time()
                    ns, pids[kind] = run_loop(exe, kind, n, target)
                    (bare if config is None else traced[config])[kind].append(ns)
                    spans[kind] = (begun, time.time() + 0.2)  # a loss is raised at the next poll
                if tool is not None:
                    alerts, _ = tool.stop()
                    for alert in alerts:
                        if alert["rule"] == "Events lost":
                            for kind, (begun, ended) in spans.items():
                                lost_by_loop[kind] += begun <= alert["time"] <= ended
                        if alert["rule"] == "Events throttled":  # it names the process
                            for kind, pid in pids.items():
                                held_by_loop[kind] += alert["event"]["held"] * (alert["pid"] == pid)
            print(f"round {run + 1}/{args.runs} ({time.monotonic() - started:.0f} s): " + ", ".join(
                f"{k} {bare[k][-1]:.0f}/" + "/".join(f"{traced[c][k][-1]:.0f}" for c in CONFIGS) + " ns"
                for k in LOOPS), flush=True)
    print(f"\ndetect run vs bare, {args.runs} rounds; kernel {os.uname().release}; medians of rounds, ns per "
          f"operation; the target is the built-in rules' (baits add the open/rename/unlink/write... tracepoints)")
    print(f"  {'':8s} {'bare':>9s}  " + "  ".join(f"{c:>24s}" for c in CONFIGS))
    for kind in LOOPS:
        cells = []
        for config in CONFIGS:
            ratio = median(traced[config][kind]) / median(bare[kind])
            verdict = ("PASS" if ratio <= RATIO_TARGET else "FAIL") if config == "built-in rules" else "    "
            cells.append(f"{median(traced[config][kind]):9.0f} {ratio:.3f}x {verdict}")
        print(f"  {kind:8s} {median(bare[kind]):9.0f}  " + "  ".join(f"{c:>24s}" for c in cells))
    print(f"  (target <= {RATIO_TARGET}x with the built-in rules)")
    for kind in LOOPS:
        rate = 1e9 / median(traced["built-in rules"][kind])
        verdict = f"({'PASS' if not lost_by_loop[kind] else 'FAIL'})"
        print(f"lost events, {kind} loop at {rate:,.0f}/s flat out: {lost_by_loop[kind]} 'Events lost' alerts "
              f"{verdict}; {held_by_loop[kind]:,} held back by the per-process throttle")
    print("  (connect0 is every connect an event, a reverse-shell flood from one process: beyond 2000 events a "
          "second the kernel counts them instead of sending them)")
    for kind in ("open", "openw", "write"):
        floor = median(traced["floor"][kind]) / median(bare[kind])
        print(f"  {kind}: built-in rules {median(traced['built-in rules'][kind]) / median(bare[kind]):.3f}x, the floor "
              f"(one syscall tracepoint alone) {floor:.3f}x (no event on this loop)")
    for config in CONFIGS[:2]:
        start = median(starts[config])
        print(f"start-up (spawn to banner), {config}: {start:.2f} s (target <= {START_TARGET} s: "
              f"{'PASS' if start <= START_TARGET else 'FAIL'})")
    print(f"(benchmark took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
