"""Per-event overhead: what an attached counter adds to the syscalls it traces, and to the
ones it does not.

A small C loop (built here with gcc) times open("/dev/null")+close() -- openat is the call
every counter traces -- and getuid(), which none of them traces. It runs bare, then with
each tool's openat counter attached (started by its launcher, measured after ATTACHED):
ebpfkit on tp/syscalls/sys_enter_openat, ebpfkit on raw_tp/sys_enter with an in-kernel
syscall-id filter, ebpfkit on fentry of the openat syscall's kernel function (where the
features probe says fentry works), BCC (TRACEPOINT_PROBE) and bpftrace. Every attached
measurement is paired with a bare one taken just before it, and overheads (in % and in ns
added per call) are medians over --runs rounds of those paired figures, so slow drifts of a
shared machine cancel out.

    python benchmarks/overhead.py [--runs 5] [--seconds 0.4]
    python benchmarks/overhead.py --vm [KERNEL]   # the same inside a VM kernel (fentry works there)

With --vm the whole benchmark runs in one VM boot (`ebpfkit vm run`, software emulation here:
absolute times are the emulator's, the paired ratios are what compare).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (BCC_SOURCES, BPFTRACE_SOURCES, EBPFKIT_SOURCES, HERE, Launched, StartError,  # noqa: E402
                     bcc_tool, bpftrace_tool, build_c, ebpfkit_feature, ebpfkit_tool, foreign_syscall_hooks, in_vm,
                     median, preflight, run_in_vm)

WAYS = ("bare", "ebpfkit tp", "ebpfkit raw_tp", "ebpfkit fentry", "BCC", "bpftrace")
EBPFKIT_WAYS = {"ebpfkit tp": "opencount", "ebpfkit raw_tp": "opencount-rawtp", "ebpfkit fentry": "opencount-fentry"}
LABELS = {"bare": "bare (nothing attached)",
          "ebpfkit tp": "ebpfkit tp/syscalls/sys_enter_openat",
          "ebpfkit raw_tp": "ebpfkit raw_tp/sys_enter + id filter",
          "ebpfkit fentry": "ebpfkit fentry on the openat syscall function",
          "BCC": "BCC TRACEPOINT_PROBE(syscalls, sys_enter_openat)",
          "bpftrace": "bpftrace tracepoint:syscalls:sys_enter_openat"}
ISSUE = ("issue measured: BCC +17%, bpftrace +24% on the traced call; raw_tp/tp_btf sys_enter with a filter "
         "+12% there but +37% on every other syscall")
FENTRY_TARGET = 0.5  # issue 3: where fentry exists, pick it and beat BCC's tracepoint cost by 2x
TOOLS = WAYS[1:]
# Batches per loop (the fastest counts): in a VM under emulation, vCPU threads are preempted
# often, so many short batches give the estimate a better chance of a clean one.
BATCHES = 200 if in_vm() else 20
QUIET_WAIT = 30.0  # seconds to wait for other people's syscall hooks to go away
RETRIES = 3  # times a disturbed pair is taken again


class Sample(NamedTuple):
    open_ns: float
    getuid_ns: float
    bare_open_ns: float  # the bare loops measured just before this tool was attached
    bare_getuid_ns: float
    disturbed: bool  # someone else had syscall hooks attached around it
    attached: int


class Overhead:
    def __init__(self, runs: int, seconds: float):
        self.runs, self.seconds = runs, seconds
        self.work = Path(tempfile.mkdtemp(prefix="ebpfkit-overhead-"))
        self.ebpfkit = ebpfkit_tool(self.work)
        self.bcc = bcc_tool()
        self.bpftrace = bpftrace_tool()
        # ebpfkit's pick for a syscall counter: fentry where the features probe says it works
        self.fentry_ok, self.fentry_reason = ebpfkit_feature(self.ebpfkit, "fentry")
        self.samples: dict[str, list[Sample]] = {w: [] for w in WAYS}
        self.missing: dict[str, str] = {}
        self.foreign_seen: set[str] = set()
        self.leaks: list[str] = []
        self.retried = 0
        self.wait_budget = 180.0  # seconds, over the whole benchmark

    def command(self, way: str):
        if way.startswith("ebpfkit"):
            if not self.ebpfkit.available:
                return None, None, self.ebpfkit.note
            if way == "ebpfkit fentry" and not self.fentry_ok:
                return None, None, f"fentry not usable here ({self.fentry_reason}); try --vm"
            source = EBPFKIT_SOURCES[EBPFKIT_WAYS[way]]
            env = dict(self.ebpfkit.env)
            if not in_vm():  # in a VM, keep the host's compile cache it shares: clang is slow there
                env["EBPFKIT_CACHE_DIR"] = str(self.work / "cache")
            return self.ebpfkit.argv + [source], env, None
        tool = self.bcc if way == "BCC" else self.bpftrace
        if not tool.available:
            return None, None, tool.note
        source = (BCC_SOURCES if way == "BCC" else BPFTRACE_SOURCES)["opencount"]
        return tool.argv + [str(source)], tool.env, None

    def build_loop(self) -> str | None:
        binary = build_c(HERE / "loop.c", self.work / "loop", required=False)
        return str(binary) if binary else None

    def loop(self, mode: str, n: int) -> float:
        out = subprocess.run([self.binary, mode, str(n), str(BATCHES)], capture_output=True, text=True, check=True)
        return float(out.stdout)

    def wait_quiet(self) -> list[str]:
        """Wait (within an overall budget) until nobody else has syscall hooks; what is left."""
        deadline = time.monotonic() + min(QUIET_WAIT, self.wait_budget)
        started = time.monotonic()
        while (hooks := foreign_syscall_hooks()) and time.monotonic() < deadline:
            time.sleep(0.5)
        self.wait_budget -= time.monotonic() - started
        return hooks

    def measure(self, way: str) -> None:
        """One paired sample: the loops bare, then with ``way``'s counter attached, back to back,
        so a drift of the machine cancels out of the ratio. Other processes' syscall hooks are
        looked for before, between and after; a pair they may have disturbed is taken again."""
        if way in self.missing:
            return
        argv, env, missing = self.command(way)
        if argv is None:
            self.missing[way] = missing
            return
        for attempt in range(RETRIES + 1):
            seen = foreign_syscall_hooks()
            bare = (self.loop("open", self.n_open), self.loop("getuid", self.n_getuid))
            seen += foreign_syscall_hooks()
            try:
                launched = Launched(argv, env, cwd=str(self.work))
            except StartError as exc:
                self.missing[way] = f"failed: {exc}"
                return
            try:
                traced = (self.loop("open", self.n_open), self.loop("getuid", self.n_getuid))
                seen += foreign_syscall_hooks(ours=launched)
            finally:
                try:
                    launched.stop()
                except StartError as exc:
                    self.leaks.append(f"{way}: {exc}")
            seen += foreign_syscall_hooks()
            self.foreign_seen.update(seen)
            if not seen:
                break
            if attempt == RETRIES or self.wait_quiet():
                break  # still hooked after waiting: keep it, marked as disturbed
            self.retried += 1
        self.samples["bare"].append(Sample(*bare, *bare, bool(seen), 0))
        self.samples[way].append(Sample(*traced, *bare, bool(seen), launched.attached))

    def run(self) -> None:
        try:
            self.binary = self.build_loop()
            if not self.binary:
                return
            # iterations for ~--seconds per measurement, from a short bare calibration
            self.n_open = max(10000, int(self.seconds * 1e9 / self.loop("open", 20000)))
            self.n_getuid = max(100000, int(self.seconds * 1e9 / self.loop("getuid", 200000)))
            # one untimed start of each tool: fills ebpfkit's cache, pages binaries in
            for way in TOOLS:
                argv, env, missing = self.command(way)
                if argv is None:
                    self.missing[way] = missing
                    continue
                try:
                    Launched(argv, env, cwd=str(self.work), check_attached=False).stop()
                except StartError as exc:
                    self.missing[way] = f"failed: {exc}"
            for r in range(self.runs):
                self.wait_quiet()
                order = TOOLS[r % len(TOOLS):] + TOOLS[:r % len(TOOLS)]
                for way in order:
                    self.measure(way)
                done = [w for w in TOOLS if self.samples[w]]
                print(f"run {r + 1}/{self.runs}: " + ", ".join(
                    f"{w} {self.samples[w][-1].open_ns:.0f}/{self.samples[w][-1].bare_open_ns:.0f} ns" for w in done),
                    file=sys.stderr, flush=True)  # progress: a VM run takes many minutes
        finally:
            shutil.rmtree(self.work, ignore_errors=True)

    # --- reporting ---

    def _used(self, way: str) -> list:
        """The samples a figure is taken from: rounds nobody else disturbed, if there are 3."""
        rows = self.samples[way]
        quiet = [s for s in rows if not s.disturbed]
        return quiet if len(quiet) >= 3 else rows

    def stats(self, way: str):
        """(median open ns, median getuid ns, median open overhead, median getuid overhead, disturbed runs).
        Overheads are medians of the paired ratios; rounds nobody else disturbed are preferred."""
        rows, use = self.samples[way], self._used(way)
        if not use:
            return None
        return (median([s.open_ns for s in use]), median([s.getuid_ns for s in use]),
                median([s.open_ns / s.bare_open_ns - 1 for s in use]) * 100,
                median([s.getuid_ns / s.bare_getuid_ns - 1 for s in use]) * 100,
                sum(s.disturbed for s in rows))

    def added_ns(self, way: str) -> tuple[float, float] | None:
        """(open, getuid): median over runs of the ns one call gains over its paired bare loop."""
        use = self._used(way)
        if not use:
            return None
        return (median([s.open_ns - s.bare_open_ns for s in use]),
                median([s.getuid_ns - s.bare_getuid_ns for s in use]))

    def run_range(self, way: str, field: str) -> tuple[float, float]:
        """(min, max) over runs of the paired overhead in %, for "open" or "getuid"."""
        ratios = [(getattr(s, f"{field}_ns") / getattr(s, f"bare_{field}_ns") - 1) * 100 for s in self.samples[way]]
        return min(ratios), max(ratios)

    def noise(self) -> tuple[float, float]:
        """Median |difference| in % between consecutive bare loops (open+close, getuid)."""
        bare = self.samples["bare"]
        if len(bare) < 2:
            return 0.0, 0.0
        return tuple(median([abs(getattr(a, f) / getattr(b, f) - 1) * 100 for a, b in zip(bare, bare[1:])])
                     for f in ("open_ns", "getuid_ns"))

    def report_fentry(self, w) -> None:
        """Issue 3: where fentry exists, ebpfkit picks it, and its added cost on the traced call
        must be at most half of BCC's tracepoint counter's (ns added per call, paired medians)."""
        if not self.fentry_ok:
            w(f"  ebpfkit's pick here: tp/syscalls (the features probe says fentry does not work: "
              f"{self.fentry_reason}); the fentry target (<= {FENTRY_TARGET:g}x BCC's added cost) is checked "
              f"with --vm")
            return
        w(f"  ebpfkit's pick here: fentry (the features probe says: {self.fentry_reason})")
        ek, bcc = self.added_ns("ebpfkit fentry"), self.added_ns("BCC")
        if not (ek and bcc):
            w("  ebpfkit fentry vs BCC: n/a (a way did not run)")
            return
        for label, i in (("traced call (open+close)", 0), ("untraced syscall (getuid)", 1)):
            a, b = ek[i], bcc[i]
            ratio = f"{a / b:.2f}x BCC's added cost" if b > 0 else "BCC adds nothing measurable"
            if i == 0:
                verdict = ("PASS" if b > 0 and a <= FENTRY_TARGET * b else "FAIL") + f" (target <= {FENTRY_TARGET:g}x)"
            else:
                worse = a > max(b, 0) + self._noise_ns(1)  # beyond the bare-to-bare spread
                verdict = "FAIL (worse than BCC)" if worse else "PASS (never worse than BCC)"
            w(f"  ebpfkit fentry {label:<27} {a:+6.0f} ns vs BCC {b:+6.0f} ns: {ratio}  {verdict}")

    def _noise_ns(self, i: int) -> float:
        """Median |difference| in ns between consecutive bare loops (0: open+close, 1: getuid)."""
        bare = self.samples["bare"]
        f = ("open_ns", "getuid_ns")[i]
        return median([abs(getattr(a, f) - getattr(b, f)) for a, b in zip(bare, bare[1:])]) if len(bare) > 1 else 0.0

    def report(self) -> str:
        lines = []
        w = lines.append
        if not getattr(self, "binary", None):
            return "Per-event overhead: not run -- no C compiler: apt-get install gcc"
        w(f"Per-event overhead: ns per iteration of open(\"/dev/null\")+close() (openat is traced) and of "
          f"getuid() (traced by no one); median of {self.runs} runs")
        where = "inside a VM (`ebpfkit vm run`; under emulation only the paired ratios compare)" if in_vm() else "host"
        w(f"  kernel {os.uname().release}, {where}")
        w(f"  {self.n_open} open+close / {self.n_getuid} getuid iterations per loop (~{self.seconds:g} s), in {BATCHES} "
          f"batches, fastest batch kept; each tool attached via its launcher and measured after ATTACHED, paired "
          f"with a bare loop run just before it; overhead = median of the paired ratios")
        w("")
        header = (f"{'way':<50} {'open+close':>12} {'overhead':>9} {'+ns':>7} {'getuid':>10} {'overhead':>9} "
                  f"{'+ns':>7} {'progs':>5}  notes")
        w(header)
        w("-" * len(header))
        for way in WAYS:
            if way in self.missing:
                w(f"{LABELS[way]:<50} {'-':>12} {'':>9} {'':>7} {'-':>10} {'':>9} {'':>7} {'':>5}  "
                  f"{self.missing[way]}")
                continue
            st = self.stats(way)
            if st is None:
                w(f"{LABELS[way]:<50} {'-':>12}  no samples")
                continue
            o, g, ov_o, ov_g, disturbed = st
            rows = self.samples[way]
            bare = way == "bare"
            if bare:
                notes = [f"open {min(s.open_ns for s in rows):.0f}-{max(s.open_ns for s in rows):.0f} ns"]
            else:
                (olo, ohi), (glo, ghi) = self.run_range(way, "open"), self.run_range(way, "getuid")
                notes = [f"per run {olo:+.1f}..{ohi:+.1f}% / {glo:+.1f}..{ghi:+.1f}%"]
            if disturbed:
                notes.append(f"{disturbed} run(s) with foreign syscall hooks")
            attached = "" if bare else "/".join(str(a) for a in sorted({s.attached for s in rows}))
            add_o, add_g = ("-", "-") if bare else (f"{a:+.0f}" for a in self.added_ns(way))
            w(f"{LABELS[way]:<50} {o:>9.1f} ns {'-' if bare else f'{ov_o:+.1f}%':>9} {add_o:>7} {g:>7.1f} ns "
              f"{'-' if bare else f'{ov_g:+.1f}%':>9} {add_g:>7} {attached:>5}  {'; '.join(notes)}")
        w(f"  ({ISSUE})")
        w("")
        w("Targets (ebpfkit's counter never worse than BCC on the same kernel)")
        bcc, ek, raw = self.stats("BCC"), self.stats("ebpfkit tp"), self.stats("ebpfkit raw_tp")
        for label, idx, field in (("traced call (open+close)", 2, "open"), ("untraced syscall (getuid)", 3, "getuid")):
            if not (bcc and ek):
                w(f"  ebpfkit tp     {label:<27} n/a (a way did not run)")
                continue
            a, b = ek[idx], bcc[idx]
            (alo, ahi), (blo, bhi) = self.run_range("ebpfkit tp", field), self.run_range("BCC", field)
            if a <= b:
                verdict = "PASS"
            elif alo <= bhi:  # the per-run figures overlap: not a measurable difference
                verdict = (f"PASS (tie: {a - b:.1f} points, per-run ranges overlap: ebpfkit {alo:+.1f}..{ahi:+.1f}%, "
                           f"BCC {blo:+.1f}..{bhi:+.1f}%)")
            else:
                verdict = "FAIL (every ebpfkit run above every BCC run)"
            w(f"  ebpfkit tp     {label:<27} {a:+6.1f}% vs BCC {b:+6.1f}%  {verdict}")
        for label, idx in (("traced call (open+close)", 2), ("untraced syscall (getuid)", 3)):
            if bcc and raw:
                a, b = raw[idx], bcc[idx]
                w(f"  ebpfkit raw_tp {label:<27} {a:+6.1f}% vs BCC {b:+6.1f}%  "
                  f"(info: the trade-off of one hook for every syscall, not a target)")
        self.report_fentry(w)
        noise = self.noise()
        w(f"  noise: consecutive bare loops differ by a median {noise[0]:.1f}% (open+close), {noise[1]:.1f}% "
          f"(getuid)")
        if self.foreign_seen:
            disturbed = sum(s.disturbed for way in TOOLS for s in self.samples[way])
            w(f"  other processes attached syscall hooks during the benchmark ({_summarise(self.foreign_seen)}): "
              f"{self.retried} disturbed pair(s) taken again, {disturbed} kept as disturbed. Any syscall tracepoint "
              f"puts every task on the slow syscall path, which would shift both the bare and the traced loop.")
        w(f"Cleanup: every program id a launcher held was checked gone after its stop: "
          f"{'all gone' if not self.leaks else 'LEAKS: ' + '; '.join(self.leaks)}")
        return "\n".join(lines)


def _summarise(hooks: set) -> str:
    names = sorted({h.split(" (")[0] for h in hooks})
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measured rounds (default 5)")
    ap.add_argument("--seconds", type=float, default=0.4, help="length of one loop measurement (default 0.4)")
    ap.add_argument("--vm", nargs="?", const="", default=None, metavar="KERNEL",
                    help="run the whole benchmark inside a VM kernel (default: the newest installed)")
    ap.add_argument("--vm-timeout", type=float, default=3600, metavar="S", help="kill the VM after S seconds")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0:
        ap.error("--runs must be >= 1 and --seconds > 0")
    if args.vm is not None and not in_vm():
        return run_in_vm(Path(__file__).resolve(), ["--runs", str(args.runs), "--seconds", str(args.seconds)],
                         args.vm or None, args.vm_timeout)
    problem = preflight()
    if problem:
        print(problem, file=sys.stderr)
        return 4
    started = time.monotonic()
    bench = Overhead(args.runs, args.seconds)
    bench.run()
    print(bench.report())
    print(f"(benchmark took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
