"""ebpfkit.bcc against BCC itself, on the same BCC-dialect programs (issue #23), side by side:

- start-up: spawn -> every probe attached (benchmarks/programs/launch_bcc.py under BCC's Python,
  and the same launcher with BCC_ENGINE=ebpfkit under ebpfkit's), and the process's peak RSS;
  ebpfkit warm (translation and object cached) and cold (an empty cache: libclang translates,
  clang compiles);
- per-event cost: the kernel's run-time statistics of the started process's programs over a
  workload that fires them: an openat loop (opencount: a hash update; opensnoop: an event per
  open through a perf buffer the launcher reads), a pipe ping-pong between two processes
  (runqlat: each round trip two wakeups and their switches), synchronous O_DIRECT writes to a
  file of the bench's own (biolatency: each a request issued and completed).

Programs: opencount (opensnoop's probe, counting), opensnoop (events), runqlat (sched
tracepoints, a histogram), biolatency (block tracepoints, a per-disk histogram). BCC needs
kernel headers: bcc_headers.py points it at the distribution's (tracepoint programs only).

    python benchmarks/bcc_bench.py [--runs 5] [--programs opencount,opensnoop] [--opens 20000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PROGRAMS as PROGRAM_DIR, Launched, StartError, bcc_tool, ebpfkit_tool, median  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ebpfkit.engine import inventory, run_time_stats  # noqa: E402

PROGRAMS = {"opencount": "opencount_bcc.c", "opensnoop": "opensnoop_bcc.c", "runqlat": "runqlat_bcc.c",
            "biolatency": "biolatency_bcc.c"}
PER_EVENT = {"opencount": "opens", "opensnoop": "opens", "runqlat": "ping_pong", "biolatency": "direct_writes"}
WAYS = ("ebpfkit.bcc warm", "ebpfkit.bcc cold", "BCC")
LAUNCHER = PROGRAM_DIR / "launch_bcc.py"
TARGETS = (("start", "ebpfkit.bcc warm", 0.3), ("rss", "ebpfkit.bcc warm", 0.3), ("ns/event", "ebpfkit.bcc warm", 1.0))


class Bench:
    def __init__(self, runs: int, programs: list[str], opens: int):
        self.runs, self.programs, self.opens_count = runs, programs, opens
        self.work = Path(tempfile.mkdtemp(prefix="ebpfkit-bcc-bench-"))
        self.ebpfkit, self.bcc = ebpfkit_tool(self.work), bcc_tool()
        self.warm = self.work / "warm-cache"
        self.results: dict = {}  # (program, way) -> list of rows, or why it did not run

    def command(self, program: str, way: str):
        source = str(PROGRAM_DIR / PROGRAMS[program])
        tool = self.bcc if way == "BCC" else self.ebpfkit
        if not tool.available:
            return None, None, tool.note
        if way == "BCC":
            return [tool.argv[0], str(LAUNCHER), source], tool.env, None
        cache = self.warm if way.endswith("warm") else Path(tempfile.mkdtemp(prefix="cold-", dir=self.work))
        return [tool.argv[0], str(LAUNCHER), source], dict(tool.env, BCC_ENGINE="ebpfkit",
                                                           EBPFKIT_CACHE_DIR=str(cache)), None

    def start_once(self, program: str, way: str, record: bool) -> None:
        key = (program, way)
        if isinstance(self.results.get(key), str):
            return
        argv, env, missing = self.command(program, way)
        if argv is None:
            self.results[key] = missing
            return
        try:
            launched = Launched(argv, env, cwd=str(self.work))
        except StartError as exc:
            self.results[key] = f"failed: {exc}"
            return
        row = {"seconds": launched.seconds, "rss_kib": launched.peak_rss_kib}
        try:
            if record and program in PER_EVENT:
                row["ns_per_event"] = self.per_event(program, launched.prog_ids)
        finally:
            launched.stop()
        if way.endswith("cold"):
            shutil.rmtree(env["EBPFKIT_CACHE_DIR"], ignore_errors=True)
        if record:
            self.results.setdefault(key, []).append(row)

    def per_event(self, program: str, prog_ids) -> float:
        """ns the programs ran per run, over ``program``'s workload."""
        with run_time_stats():
            before = [inventory.program(p) for p in prog_ids]
            getattr(self, PER_EVENT[program])()
            after = [inventory.program(p) for p in prog_ids]
        ns = sum(a.run_time_ns - b.run_time_ns for a, b in zip(after, before) if a and b)
        runs = sum(a.run_cnt - b.run_cnt for a, b in zip(after, before) if a and b)
        return ns / runs if runs else float("nan")

    def opens(self) -> None:
        path = str(self.work / "opened")
        for _ in range(self.opens_count):
            os.close(os.open(path, os.O_CREAT | os.O_RDONLY))

    def ping_pong(self) -> None:
        """A byte back and forth through two pipes: each leg a wakeup and a switch."""
        there, back = os.pipe(), os.pipe()
        child = os.fork()
        if child == 0:
            try:
                while os.read(there[0], 1) == b"x":
                    os.write(back[1], b"x")
            finally:
                os._exit(0)
        for _ in range(self.opens_count // 4):
            os.write(there[1], b"x")
            os.read(back[0], 1)
        os.write(there[1], b"q")
        os.waitpid(child, 0)
        for fd in there + back:
            os.close(fd)

    def direct_writes(self) -> None:
        """4 KiB synchronous writes that bypass the page cache: each a block request."""
        import mmap

        block = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
        block.write(b"x" * 4096)
        fd = os.open(str(self.work / "direct"), os.O_CREAT | os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
        try:
            for i in range(self.opens_count // 20):
                os.pwritev(fd, [block], (i % 256) * 4096)
        finally:
            os.close(fd)
            block.close()

    def run(self) -> None:
        try:
            for program in self.programs:  # untimed: fills the warm cache, pages binaries in
                for way in WAYS:
                    self.start_once(program, way, record=False)
            for _ in range(self.runs):  # round-robin: drifts of the machine spread over every way
                for program in self.programs:
                    for way in WAYS:
                        self.start_once(program, way, record=True)
        finally:
            shutil.rmtree(self.work, ignore_errors=True)

    def med(self, program: str, way: str, field: str):
        rows = self.results.get((program, way))
        return median([r[field] for r in rows if field in r]) if isinstance(rows, list) else None

    def report(self) -> str:
        lines = [f"ebpfkit.bcc vs BCC: medians of {self.runs} runs",
                 f"  ebpfkit: {self.ebpfkit.note}", f"  BCC    : {self.bcc.note}", ""]
        header = f"{'program':<11} {'way':<17} {'start':>8} {'peak RSS':>10} {'ns/event':>9} " \
                 f"{'start/BCC':>10} {'RSS/BCC':>8} {'event/BCC':>10}"
        lines += [header, "-" * len(header)]
        for program in self.programs:
            base = {f: self.med(program, "BCC", f) for f in ("seconds", "rss_kib", "ns_per_event")}
            for way in WAYS:
                rows = self.results.get((program, way))
                if not isinstance(rows, list):
                    lines.append(f"{program:<11} {way:<17} {rows}")
                    continue
                t, r, e = (self.med(program, way, f) for f in ("seconds", "rss_kib", "ns_per_event"))
                lines.append(f"{program:<11} {way:<17} {t:>6.3f} s {r / 1024:>6.1f} MiB {_num(e):>9} "
                             f"{_ratio(t, base['seconds']):>10} {_ratio(r, base['rss_kib']):>8} "
                             f"{_ratio(e, base['ns_per_event']):>10}")
        lines += ["", "Targets (ebpfkit.bcc warm against BCC): start <= 0.3x, RSS <= 0.3x, per event <= 1.0x"]
        for program in self.programs:
            for what, field, limit in (("start", "seconds", 0.3), ("RSS", "rss_kib", 0.3),
                                       ("per event", "ns_per_event", 1.0)):
                ours, base = self.med(program, "ebpfkit.bcc warm", field), self.med(program, "BCC", field)
                if ours is None or base is None or base != base:
                    continue
                verdict = "met" if ours <= limit * base else "NOT met"
                lines.append(f"  {program:<11} {what:<10} {ours / base:.2f}x (<= {limit}x): {verdict}")
        return "\n".join(lines)


def _num(v) -> str:
    return "-" if v is None or v != v else f"{v:.0f}"


def _ratio(a, b) -> str:
    return "-" if a is None or b is None or a != a or b != b or not b else f"{a / b:.2f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--opens", type=int, default=20000,
                        help="opens per run; a quarter as many round trips, a twentieth as many writes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root: it loads BPF programs", file=sys.stderr)
        return 4
    bench = Bench(args.runs, [p for p in args.programs.split(",") if p], args.opens)
    bench.run()
    print(bench.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
