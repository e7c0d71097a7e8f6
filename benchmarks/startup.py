"""Start-up benchmark: spawn -> everything attached, and the started process's peak RSS.

Two programs (an openat counter, a runqlat-style scheduler histogram), each started four
ways: ebpfkit warm (object cache hit), ebpfkit cold (empty cache: the kernel type index, a slim
vmlinux.h and the clang compile all happen), BCC (BPF(text=...)) and bpftrace. Medians of --runs
runs, as ratios against BCC and bpftrace, with the project's targets.

    python benchmarks/startup.py [--runs 5] [--programs opencount,runqlat]
    python benchmarks/startup.py --vm 5.10 --runs 5 --programs runqlat   # all ways in one 5.10 boot

With --vm the whole benchmark runs in one VM boot (`ebpfkit vm run`; software emulation here:
absolute times are the emulator's, only ratios within the run compare). BCC there compiles
against the guest kernel's own headers where `scripts/debian-kernel.sh --headers` unpacked them
beside it (benchmarks/bcc_headers.py; their merged tree is prepared on the host before the boot).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (BCC_SOURCES, BPFTRACE_SOURCES, EBPFKIT_SOURCES, EBPFKIT_TYPED_OR_RAW, Launched,  # noqa: E402
                     StartError, add_vm_arguments, bcc_tool, bpftrace_tool, ebpfkit_tool, in_vm, loaded_prog_ids,
                     median, preflight, run_in_vm)
from bcc_headers import bcc_kernel_env, headers_match  # noqa: E402

WAYS = ("ebpfkit warm", "ebpfkit cold", "BCC", "bpftrace")
# runqlat_bcc.c includes <linux/sched.h> as BCC tools do (that is the BCC row, the baseline);
# this extra row is the same program with no kernel header included, for reference
BCC_BARE = "BCC no-incl."
PROGRAMS = ("opencount", "runqlat")
# what the issue measured on its machine, for orientation only
ISSUE_REFERENCE = {("opencount", "BCC"): "0.31 s / 130 MiB", ("runqlat", "BCC"): "1.8 s / 216 MiB",
                   ("opencount", "bpftrace"): "0.05 s / 89 MiB", ("runqlat", "bpftrace"): "0.29 s / 107 MiB"}
PHASES = ("import", "engine_import", "compile", "load", "attach")
# issue #43: runqlat's start-up on Debian 11's 5.10 against BCC in the same guest, BCC with 5.10's headers
OLD_KERNEL, OLD_KERNEL_LIMIT = "5.10", 0.3


def _kernel_series(release: str) -> str:
    return ".".join(release.split(".")[:2])


class Bench:
    def __init__(self, runs: int, programs: list[str]):
        self.runs, self.programs = runs, programs
        self.work = Path(tempfile.mkdtemp(prefix="ebpfkit-bench-"))
        self.ebpfkit = ebpfkit_tool(self.work)
        self.bcc = bcc_tool()
        self.bpftrace = bpftrace_tool()
        self.warm_cache = self.work / "warm-cache"
        self.results: dict = {}  # (program, way) -> list of per-run dicts, or why it did not run
        self.leaks: list[str] = []
        self.starts = 0

    def command(self, program: str, way: str):
        """(argv, env, why-not) to start ``program`` the ``way`` way."""
        if way.startswith("ebpfkit"):
            tool = self.ebpfkit
            if not tool.available:
                return None, None, tool.note
            if way == "ebpfkit warm":
                cache = self.warm_cache
            else:  # a fresh, empty cache for every cold run
                cache = Path(tempfile.mkdtemp(prefix="cold-cache-", dir=self.work))
            env = dict(tool.env, EBPFKIT_CACHE_DIR=str(cache))
            hooks = ["--typed-or-raw", EBPFKIT_TYPED_OR_RAW[program]] if program in EBPFKIT_TYPED_OR_RAW else []
            return tool.argv + [EBPFKIT_SOURCES[program], "--timings", "--children", *hooks], env, None
        tool = self.bpftrace if way == "bpftrace" else self.bcc
        if not tool.available:
            return None, None, tool.note
        if way == "bpftrace":
            return tool.argv + [str(BPFTRACE_SOURCES[program])], tool.env, None
        cflags = ["-DBENCH_NO_KERNEL_HEADERS"] if way == BCC_BARE else []
        return tool.argv + [str(BCC_SOURCES[program])] + cflags, tool.env, None

    def start_once(self, program: str, way: str, record: bool) -> None:
        key = (program, way)
        if isinstance(self.results.get(key), str):
            return  # already failed or not installed
        argv, env, missing = self.command(program, way)
        if argv is None:
            self.results[key] = missing
            return
        try:
            self.starts += 1
            launched = Launched(argv, env, cwd=str(self.work))
        except StartError as exc:
            self.results[key] = f"failed: {exc}"
            self._progress(f"{program} {way}: failed: {exc}")
            return
        self._progress(f"{program} {way}: {launched.seconds:.2f} s{'' if record else ' (untimed)'}")
        row = {"seconds": launched.seconds, "rss_kib": launched.peak_rss_kib,
               "attached": launched.attached, **launched.info}
        try:
            launched.stop()
        except StartError as exc:
            self.leaks.append(f"{program} {way}: {exc}")
        if way == "ebpfkit cold":
            shutil.rmtree(env["EBPFKIT_CACHE_DIR"], ignore_errors=True)
        if record:
            self.results.setdefault(key, []).append(row)

    @staticmethod
    def _progress(text: str) -> None:
        if in_vm():  # a run there takes long: say where it is (stderr, apart from the report)
            print(f"  .. {text}", file=sys.stderr, flush=True)

    def python_floor(self) -> tuple[float, float]:
        """Median spawn -> first line of the ebpfkit launcher's Python doing nothing, with and without site."""
        if not self.ebpfkit.available:
            return float("nan"), float("nan")
        py = self.ebpfkit.argv[0]
        code = "import os; os.write(1, b'ATTACHED\\n'); import signal; signal.pause()"
        out = []
        for flags in ([], ["-S"]):
            times = []
            for _ in range(self.runs):
                launched = Launched([py, *flags, "-c", code], self.ebpfkit.env, cwd=str(self.work),
                                    check_attached=False)
                times.append(launched.seconds)
                launched.proc.terminate()
                launched.proc.communicate()
            out.append(median(times))
        return out[0], out[1]

    def run(self) -> None:
        self.before = len(loaded_prog_ids())
        try:
            # one untimed start of each: fills the warm cache and .pyc files, and pages in
            # every tool's binaries and libraries, so no way pays for a cold page cache
            for program in self.programs:
                for way in _ways(program):
                    self.start_once(program, way, record=False)
            # round-robin, so slow drifts of the machine spread over all ways alike
            for _ in range(self.runs):
                for program in self.programs:
                    for way in _ways(program):
                        self.start_once(program, way, record=True)
            self.floor = self.python_floor()
        finally:
            shutil.rmtree(self.work, ignore_errors=True)
        self.after = len(loaded_prog_ids())

    # --- reporting ---

    def med(self, program, way, field):
        rows = self.results.get((program, way))
        if not isinstance(rows, list):
            return None
        return median([float(r[field]) for r in rows if field in r])

    def report(self) -> str:
        lines = []
        w = lines.append
        w(f"Start-up: spawn -> ATTACHED (every program attached), and the started process's peak RSS "
          f"(VmHWM) at that moment; median of {self.runs} runs")
        w(f"  ebpfkit : {self.ebpfkit.note}")
        w(f"  BCC     : {self.bcc.note}")
        w(f"  bpftrace: {self.bpftrace.note}")
        release = os.uname().release
        w(f"  kernel  : {release}" + (" (inside a VM: `ebpfkit vm run`, emulated; only ratios compare)"
                                      if in_vm() else ""))
        if self.ebpfkit.available:
            w(f"  Python floor (same interpreter, spawn -> first line): {self.floor[0] * 1000:.0f} ms; "
              f"with -S (no site/.pth files): {self.floor[1] * 1000:.0f} ms")
        w("")
        header = (f"{'program':<10} {'way':<13} {'start':>8} {'peak RSS':>10} {'time/BCC':>9} {'RSS/BCC':>8} "
                  f"{'time/bpftrace':>14} {'progs':>5}  notes")
        w(header)
        w("-" * len(header))
        for program in self.programs:
            bcc_t, bcc_r = self.med(program, "BCC", "seconds"), self.med(program, "BCC", "rss_kib")
            bt_t = self.med(program, "bpftrace", "seconds")
            for way in _ways(program):
                rows = self.results.get((program, way))
                if not isinstance(rows, list):
                    w(f"{program:<10} {way:<13} {'-':>8} {'-':>10} {'':>9} {'':>8} {'':>14} {'':>5}  {rows}")
                    continue
                t, r = self.med(program, way, "seconds"), self.med(program, way, "rss_kib")
                attached = sorted({row["attached"] for row in rows})
                notes = [f"{min(x['seconds'] for x in rows):.3f}-{max(x['seconds'] for x in rows):.3f} s"]
                if way == "ebpfkit cold":
                    clang = self.med(program, way, "children_maxrss_kib")
                    notes.append(f"clang child's own peak {clang / 1024:.0f} MiB (not in RSS)")
                if way == BCC_BARE:
                    notes.append("(info) without #include <linux/sched.h>")
                if (program, way) in ISSUE_REFERENCE:
                    notes.append(f"issue measured {ISSUE_REFERENCE[(program, way)]}")
                w(f"{program:<10} {way:<13} {t:>6.3f} s {r / 1024:>6.1f} MiB {_ratio(t, bcc_t):>9} "
                  f"{_ratio(r, bcc_r):>8} {_ratio(t, bt_t):>14} {'/'.join(map(str, attached)):>5}  "
                  f"{'; '.join(notes)}")
            rows = self.results.get((program, "ebpfkit warm"))
            if isinstance(rows, list) and all(p in r for r in rows for p in PHASES):
                phase = {p: median([float(r[p]) * 1000 for r in rows]) for p in PHASES}
                # what the launcher did not time itself: exec, interpreter start-up, site, pipe
                outside = median([(r["seconds"] - sum(float(r[p]) for p in PHASES)) * 1000 for r in rows])
                w(f"{'':<10} warm breakdown (medians, ms): interpreter start+site+exec {outside:.0f}, "
                  f"import ebpfkit {phase['import']:.1f}, engine imports {phase['engine_import']:.1f}, "
                  f"compile() cache lookup {phase['compile']:.1f}, load {phase['load']:.1f}, "
                  f"attach {phase['attach']:.1f}")
        w("")
        w("Targets")
        for program in self.programs:
            bcc_t, bcc_r = self.med(program, "BCC", "seconds"), self.med(program, "BCC", "rss_kib")
            checks = [
                ("ebpfkit warm start <= 0.2x BCC", self.med(program, "ebpfkit warm", "seconds"), bcc_t, 0.2),
                ("ebpfkit cold start <= 0.5x BCC", self.med(program, "ebpfkit cold", "seconds"), bcc_t, 0.5),
                ("ebpfkit warm RSS <= 0.3x BCC", self.med(program, "ebpfkit warm", "rss_kib"), bcc_r, 0.3),
                ("ebpfkit cold RSS <= 0.3x BCC (the process)", self.med(program, "ebpfkit cold", "rss_kib"),
                 bcc_r, 0.3),
            ]
            if program == "runqlat":
                checks.append(("ebpfkit warm start <= 1.0x bpftrace", self.med(program, "ebpfkit warm", "seconds"),
                               self.med(program, "bpftrace", "seconds"), 1.0))
            for text, value, base, limit in checks:
                w(f"  {program:<10} {text:<44} {_verdict(value, base, limit)}")
            if program == "runqlat":
                for way in ("ebpfkit warm", "ebpfkit cold"):
                    text = f"on {OLD_KERNEL}: {way} start <= {OLD_KERNEL_LIMIT}x BCC"
                    if _kernel_series(os.uname().release) != OLD_KERNEL:
                        verdict = f"n/a (this kernel is {os.uname().release}: --vm {OLD_KERNEL})"
                    else:
                        verdict = _verdict(self.med(program, way, "seconds"), bcc_t, OLD_KERNEL_LIMIT)
                        if self.bcc.available and not headers_match(self.bcc.env):
                            verdict += f" (but BCC's headers are not {os.uname().release}'s)"
                    w(f"  {program:<10} {text:<44} {verdict}")
            clang, bcc_r = self.med(program, "ebpfkit cold", "children_maxrss_kib"), bcc_r
            if clang is not None and bcc_r:
                w(f"  {program:<10} {'(info) clang child peak vs BCC RSS':<44} {_ratio(clang, bcc_r)}")
        w("")
        w(f"Cleanup: {self.starts} starts; after each stop every program id the launcher held was checked "
          f"gone: {'all gone' if not self.leaks else 'LEAKS: ' + '; '.join(self.leaks)}. "
          f"bpftool prog show: {self.before} programs before, {self.after} after (all processes).")
        return "\n".join(lines)


def _ways(program: str) -> tuple:
    return WAYS + (BCC_BARE,) if program == "runqlat" else WAYS


def _ratio(value, base) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def _verdict(value, base, limit) -> str:
    if value is None or not base:
        return "n/a (a way did not run)"
    ratio = value / base
    return f"{ratio:.2f}x  {'PASS' if ratio <= limit else 'FAIL'}"


def _prepare_guest_headers(spec: str | None) -> None:
    """Build the guest kernel's merged header tree for BCC here, where it takes a second (the
    guest sees the host's files, and would make it over 9p under emulation); only a note if not."""
    try:
        from ebpfkit.vm import resolve_kernel

        release = resolve_kernel(spec).release
    except Exception as exc:  # ebpfkit vm run says it again, with its hint
        print(f"(no VM kernel for {spec!r}: {exc})", file=sys.stderr)
        return
    _, text = bcc_kernel_env(release)
    print(f"BCC headers for the guest's {release}: {text}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="measured starts per way (default 5)")
    ap.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated: opencount,runqlat")
    add_vm_arguments(ap)
    args = ap.parse_args(argv)
    programs = [p for p in args.programs.split(",") if p]
    unknown = set(programs) - set(PROGRAMS)
    if unknown or args.runs < 1:
        ap.error(f"unknown programs {sorted(unknown)}" if unknown else "--runs must be >= 1")
    problem = preflight()
    if problem:
        print(problem, file=sys.stderr)
        return 4
    if args.vm is not None and not in_vm():
        _prepare_guest_headers(args.vm or None)
        return run_in_vm(Path(__file__).resolve(), ["--runs", str(args.runs), "--programs", ",".join(programs)],
                         args.vm or None, args.vm_timeout)
    started = time.monotonic()
    bench = Bench(args.runs, programs)
    bench.run()
    print(bench.report())
    print(f"(benchmark took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
