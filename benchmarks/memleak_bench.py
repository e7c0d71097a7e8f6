"""`ebpfkit memleak` next to BCC's memleak: what each adds to a malloc+free of the process it
traces, how much memory it takes and how long it takes to start.

    sudo .venv/bin/python benchmarks/memleak_bench.py [--runs 5] [--iterations 100000]
    sudo .venv/bin/python benchmarks/memleak_bench.py --vm [KERNEL] [--runs 3]

The ways, each started as a user would, on the workload's PID, with a 3600 s interval (neither
prints during a round): `ebpfkit memleak -p PID 3600` (full) and with `--combined-only`, and
BCC's `memleak-bpfcc -p PID 3600` (Debian's bpfcc-tools, /usr/bin/python3 -u, the headers of
bcc_headers.py) and with `--combined-only`. BCC's program reads only pt_regs (uapi), so it
runs on the host with another kernel's headers. BCC 0.26 keeps both the per-address and the
per-stack tables in its BPF programs in either mode (--combined-only only changes what it
prints); ebpfkit's --combined-only adds atomic per-stack totals to its per-address table.
A fifth way, "floor", attaches programs that do nothing to every place ebpfkit's memleak
probes (its own plan, from ebpfkit.tools.memleak.libraries): what the uprobes cost by
themselves, the least any memleak on those places could add.

The workload is one process, `memleak_loop` (memleak_loop.c, built here with gcc -fno-builtin,
linked dynamically: every malloc and free goes through the PLT into libc, where the uprobes
are), pinned to one CPU, running timed batches when told on its stdin (the tools' uprobes are
for one PID, so the process must outlive each tool):

- malloc64: malloc(64), write a byte, free;
- mixed: sizes from a fixed-seed table (60% 16..256 B, 30% ..4 KiB, 10% ..64 KiB), 80% malloc,
  10% calloc, 10% malloc grown by realloc; the last 256 blocks outstanding, freed oldest first.

One iteration is one block's life (allocated, maybe grown, freed): "ns per malloc+free", the
fastest of 20 batches (40 in a VM). Each round, for each way (the order rotates):

1. the workloads bare;
2. the tool is started: "start" is the time from spawning it to attached. ebpfkit's memleak
   (and the floor) print a "Tracing ..." line once every uprobe is attached. BCC's prints
   "Attaching to pid ..." before attaching, then attaches munmap's uprobe last: it is attached
   once `bpftool perf show` (a few ms) lists an entry uprobe at libc's munmap offset held by
   the tool's process, polled every 10 ms after that line;
3. the workloads traced: "+ns" is the median over rounds of the paired (traced - bare)
   differences, everything a call pays (the uprobe and uretprobe traps and the programs);
   "RSS" is the tool's peak resident memory (VmHWM) at the end of these batches (with a 3600 s
   interval neither has read its maps yet: it is the loaded-and-attached footprint);
4. one more batch of each with the kernel's run-time statistics on (BPF_ENABLE_STATS): "BPF
   ns" is the tool's programs' own run time per iteration (with the two clock reads the
   statistics add to each run), and "runs" how many program runs an iteration caused. The
   rest of +ns is the hooks' dispatch: the trap of each uprobe (and, where the kernel cannot
   emulate the probed instruction, the single-step of it out of line) and the return
   trampoline of each uretprobe.

Every way traced, or it is an error, not a fast row: its programs must have run at least once
per probed call (two per allocating call, entry and return, and one per free), and ebpfkit's
own counters (its `counters` map, read from the running tool) must have recorded every
allocation and free of the traced batches. Every way was started once, untimed, before the
rounds (ebpfkit's object cache warm, as after a user's first run); "ebpfkit cold" starts it
again each round with an empty EBPFKIT_CACHE_DIR (the clang compile included).

BCC 0.26's Python calls libbcc's bpf_attach_uprobe without its last argument, ref_ctr_offset
(bcc#5236): the kernel gets whatever the register holds and refuses a uprobe whose
ref_ctr_offset differs from one another process already has at the same place. So BCC's
memleak fails to attach while anything else (ebpfkit's memleak, a test) probes libc's
allocator; the benchmark warns when other processes hold uprobes on the workload's libc.

Targets (issue 20): added ns per malloc+free <= 1.0x BCC's in full mode and <= 0.5x BCC's with
--combined-only; RSS <= 0.3x BCC's; start-up <= 0.2x BCC's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]
from _common import (BCC_PYTHON, add_vm_arguments, bcc_tool_path, build_c, in_vm, median,  # noqa: E402
                     consecutive_spread, merged_env, ratio_note, run_in_vm, stop_tool, vm_hwm)

from ebpfkit.engine import inventory, run_time_stats  # noqa: E402
from ebpfkit.engine.maps import KernelMap  # noqa: E402
from ebpfkit.engine.symbols import elf_symbol_offset  # noqa: E402
from ebpfkit.tools.memleak.session import COUNTERS  # noqa: E402

WORKLOADS = ("malloc64", "mixed")
MODES = ("full", "combined-only")
ADDED_TARGETS = {"full": 1.0, "combined-only": 0.5}
RSS_TARGET, START_TARGET = 0.3, 0.2
INTERVAL = "3600"  # s: no periodic printing during a round
CPU = max(os.sched_getaffinity(0))  # the workload runs here
BATCHES = 40 if in_vm() else 20  # emulated vCPUs are preempted often: more batches there
START_TIMEOUT = 300.0  # BCC's clang compile, slow under emulation and on a busy machine
STOP_TIMEOUT = 60.0
BATCH_TIMEOUT = 1800.0  # one workload command, traced by the slowest way (in a VM)
PROBE_POLL = 0.01  # s between two looks for BCC's last uprobe
FLOOR = "floor"

FLOOR_PROGRAM = """\
/* memleak_bench's floor: what the uprobes alone cost, with programs that do nothing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("uprobe")
int floor_enter(void *ctx) { return 0; }

SEC("uretprobe")
int floor_return(void *ctx) { return 0; }

char LICENSE[] SEC("license") = "GPL";
"""

# python -c FLOOR_LAUNCHER PROGRAM -p PID INTERVAL: the floor's programs on every place ebpfkit's
# memleak probes in process PID (its own plan), then "Tracing", then attached until SIGINT
FLOOR_LAUNCHER = """\
import signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
from ebpfkit.engine import compile
from ebpfkit.tools.memleak import libraries
pid = int(sys.argv[3])
obj = compile(sys.argv[1]).load()
for p in libraries.plan(libraries.mapped_libraries(pid), None, None).probes:
    obj.programs["floor_return" if p.retprobe else "floor_enter"].attach_uprobe(
        p.path, offset=p.offset, pid=pid, retprobe=p.retprobe)
print("Tracing: empty programs on the places ebpfkit memleak probes", flush=True)
signal.sigwait({signal.SIGINT, signal.SIGTERM})
obj.close()
"""


@dataclass
class Way:
    impl: str  # "ebpfkit", "BCC"
    mode: str  # "full", "combined-only"
    argv: list
    env: dict = field(default_factory=dict)
    ready: bytes = b"Tracing"  # ebpfkit: its banner, printed once attached
    attaches_last: str | None = None  # BCC: the libc function whose uprobe it attaches last

    @property
    def name(self) -> str:
        return FLOOR if self.impl == FLOOR else f"{self.impl} {self.mode}"

    def command(self, pid: int) -> list:
        return [*self.argv, "-p", str(pid), *(["--combined-only"] if self.mode == "combined-only" else []), INTERVAL]


@dataclass
class Figures:
    start_s: list = field(default_factory=list)
    cold_s: list = field(default_factory=list)
    rss_kib: list = field(default_factory=list)
    bare_ns: dict = field(default_factory=lambda: {w: [] for w in WORKLOADS})
    traced_ns: dict = field(default_factory=lambda: {w: [] for w in WORKLOADS})
    bpf_ns: dict = field(default_factory=lambda: {w: [] for w in WORKLOADS})
    runs: dict = field(default_factory=lambda: {w: [] for w in WORKLOADS})
    probes: int = 0
    programs: int = 0
    errors: list = field(default_factory=list)

    def added(self, workload: str) -> list:
        return [t - b for b, t in zip(self.bare_ns[workload], self.traced_ns[workload])]


# --- the workload ---------------------------------------------------------------------------------

@dataclass
class Batch:
    ns: float        # per iteration (one block allocated and freed), fastest batch
    allocs: int      # malloc/calloc/realloc calls of the command (warm-up batch included)
    frees: int       # free calls of the command
    iterations: int  # of the command (warm-up batch included)


class Workload:
    """memleak_loop: one long-lived process, pinned to CPU, running batches on command."""

    def __init__(self, workdir: Path, iterations: int):
        exe = build_c(HERE / "memleak_loop.c", workdir / "memleak_loop",
                      flags=("-fno-builtin", "-fno-omit-frame-pointer", "-g"))
        self.per_batch = max(iterations // BATCHES, 1)
        self.proc = subprocess.Popen([str(exe), str(CPU)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.pid = self.proc.pid
        for workload in WORKLOADS:  # untraced: stdio's buffers, the allocator's arenas, the page cache
            self.run(workload, self.per_batch, 1)
        self.libc = next((m for m in _mapped_files(self.pid) if os.path.basename(m).startswith("libc.so")), None)

    def run(self, workload: str, per_batch: int | None = None, batches: int = BATCHES) -> Batch:
        per_batch = per_batch or self.per_batch
        self.proc.stdin.write(f"{workload} {per_batch} {batches}\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], BATCH_TIMEOUT)[0]:
            raise RuntimeError(f"memleak_loop: no answer to '{workload}' within {BATCH_TIMEOUT:.0f} s")
        line = self.proc.stdout.readline()
        try:
            ns, allocs, frees = line.split()
            return Batch(float(ns), int(allocs), int(frees), per_batch * (batches + 1))
        except ValueError:
            raise RuntimeError(f"memleak_loop: {line.strip() or 'exited'}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def _mapped_files(pid: int) -> list[str]:
    paths = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and parts[5] not in paths:
            paths.append(parts[5])
    return paths


# --- a tool running on the workload -----------------------------------------------------------

def uprobes_of(pid: int | None) -> list[dict]:
    """The uprobes and uretprobes with a BPF program that process ``pid`` holds (every process's
    with None), from bpftool perf show."""
    out = subprocess.run(["bpftool", "-j", "perf", "show"], capture_output=True, text=True)
    try:
        entries = json.loads(out.stdout or "[]")
    except ValueError:
        return []
    return [e for e in entries if (pid is None or e.get("pid") == pid) and e.get("fd_type") in ("uprobe", "uretprobe")]


def foreign_uprobes(path: str | None, ours: int | None = None) -> dict[int, int]:
    """{pid: uprobes} that other processes than ``ours`` hold on the file ``path`` (libc). A
    system-wide one traps in the workload too; any one makes BCC's attach there fail (bcc#5236)."""
    try:
        target = os.stat(path) if path else None
    except OSError:
        target = None
    if target is None:
        return {}
    found: dict[int, int] = {}
    for e in uprobes_of(None):
        try:
            st = os.stat(e.get("filename", ""))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino) and e["pid"] != ours:
            found[e["pid"]] = found.get(e["pid"], 0) + 1
    return found


def describe(holders: dict[int, int]) -> str:
    return ", ".join(f"{n} by pid {pid} ({_comm(pid)})" for pid, n in sorted(holders.items()))


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "gone"


class Started:
    """A tool running on the workload, from its spawn until attached, then until stopped."""

    def __init__(self, way: Way, workload: Workload, extra_env: dict | None = None):
        self.way = way
        self.libc = workload.libc
        last = None
        if way.attaches_last:
            if workload.libc is None:
                raise RuntimeError("the workload maps no libc.so: cannot tell when BCC has attached")
            last = elf_symbol_offset(workload.libc, way.attaches_last)
        began = time.perf_counter()
        self.proc = subprocess.Popen(way.command(workload.pid), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=merged_env({**way.env, **(extra_env or {})}),
                                     cwd=REPO, start_new_session=True)
        self.output = b""
        self.programs: set = set()
        try:
            self._wait_line(began)
            if last is not None:
                self._wait_uprobe(began, last)
        except BaseException:
            self.stop()
            raise
        self.seconds = time.perf_counter() - began
        held = inventory.held_by(self.proc.pid)
        links = [inventory.link(i) for i in held["link"]]
        self.programs = set(held["prog"]) | {info.prog_id for info in links if info}
        self.probes = len(uprobes_of(self.proc.pid)) + sum(info.places or 0 for info in links if info)

    def _left(self, began: float) -> float:
        left = START_TIMEOUT - (time.perf_counter() - began)
        if left <= 0:
            raise RuntimeError(f"not attached within {START_TIMEOUT:.0f} s: {self._tail()}")
        return left

    def _read(self, timeout: float) -> None:
        fd = self.proc.stdout.fileno()
        if select.select([fd], [], [], timeout)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait()
                raise RuntimeError(f"exited with {self.proc.returncode} before attaching: {self._tail()}")
            self.output += chunk

    def _wait_line(self, began: float) -> None:
        while self.way.ready not in self.output:
            self._read(self._left(began))

    def _wait_uprobe(self, began: float, offset: int) -> None:
        """Until the tool's process holds an entry uprobe at ``offset`` (of libc)."""
        while not any(e["fd_type"] == "uprobe" and e.get("offset") == offset for e in uprobes_of(self.proc.pid)):
            self._left(began)
            if self.proc.poll() is not None:
                self._read(0)
                raise RuntimeError(f"exited with {self.proc.returncode} while attaching: {self._tail()}")
            self._read(PROBE_POLL)  # keeps its pipe drained too

    def _tail(self) -> str:
        lines = [ln for ln in self.output.decode(errors="replace").strip().splitlines() if ln.strip()]
        tail = " | ".join(lines[-3:]) or "no output"
        if "Failed to attach BPF to uprobe" in tail and self.libc:
            # libbcc's bpf_attach_uprobe takes a ref_ctr_offset that BCC's Python does not pass:
            # the kernel gets whatever is in the register, and refuses a uprobe whose
            # ref_ctr_offset differs from one already at that place (dmesg: ref_ctr_offset mismatch)
            holders = foreign_uprobes(self.libc, self.proc.pid)
            tail += (" (BCC's Python passes no ref_ctr_offset, bcc#5236: its attach fails where another "
                     f"process holds a uprobe on the same function; on libc now: {describe(holders) or 'none'})")
        return tail

    def counters(self) -> dict | None:
        """ebpfkit memleak's own counters (its `counters` map, by COUNTERS name); None for BCC's."""
        for map_id in inventory.held_by(self.proc.pid)["map"]:
            info = inventory.map(map_id)
            if info is not None and info.name == "counters":
                with KernelMap.by_id(map_id) as counters:
                    values = dict(counters.items())
                return {name: int(values.get(i, 0)) for i, name in enumerate(COUNTERS)}
        return None

    def stop(self) -> None:
        """SIGINT (each tool detaches and exits), SIGKILL if it hangs; then its programs must be gone."""
        stop_tool(self.proc, self.programs, self.way.name, STOP_TIMEOUT)


def bpf_per_iteration(programs, workload: Workload, name: str) -> tuple[float, float, float]:
    """(ns the ``programs`` ran, their runs, the probed calls) per iteration of one short batch
    of ``name``, with the run-time statistics on just for it."""
    with run_time_stats():
        before = [inventory.program(p) for p in programs]
        batch = workload.run(name, workload.per_batch, 1)
        after = [inventory.program(p) for p in programs]
    ns = sum(a.run_time_ns - b.run_time_ns for a, b in zip(after, before) if a and b)
    runs = sum(a.run_cnt - b.run_cnt for a, b in zip(after, before) if a and b)
    calls = 2 * batch.allocs + batch.frees  # entry and return of each allocating call, entry of a free
    return ns / batch.iterations, runs / batch.iterations, calls / batch.iterations


# --- the ways -------------------------------------------------------------------------------------

def ways(workdir: Path) -> tuple[list[Way], dict[str, str]]:
    """The four ways and the floor, the ones that can run here, and why the others cannot."""
    python = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() \
        else sys.executable
    found = [Way("ebpfkit", mode, [python, "-m", "ebpfkit", "memleak"]) for mode in MODES]
    floor = workdir / "memleak_floor.bpf.c"
    floor.write_text(FLOOR_PROGRAM)
    found.append(Way(FLOOR, "full", [python, "-c", FLOOR_LAUNCHER, str(floor)]))
    missing = {}
    from bcc_headers import bcc_kernel_env

    env, headers = bcc_kernel_env()
    path = bcc_tool_path("memleak")
    for mode in MODES:
        name = f"BCC {mode}"
        if not os.path.exists(BCC_PYTHON) or path is None:
            missing[name] = "not installed: apt-get install bpfcc-tools (scripts/setup.sh --bench)"
        elif env is None:
            missing[name] = headers
        else:  # -u: its "Attaching" line not held in a buffer
            found.append(Way("BCC", mode, [BCC_PYTHON, "-u", path], env, b"Attaching to pid", "munmap"))
    return found, missing


def measure_round(way: Way, workload: Workload, shown: list, figures: Figures) -> None:
    bare = {w: workload.run(w) for w in shown}
    tool = Started(way, workload)
    try:
        before = tool.counters()
        traced = {w: workload.run(w) for w in shown}
        after = tool.counters()
        rss = vm_hwm(tool.proc.pid)
        stats = {w: bpf_per_iteration(tool.programs, workload, w) for w in shown}
    finally:
        tool.stop()
    errors = []
    for w, (_, runs, calls) in stats.items():
        if runs < calls:
            errors.append(f"{w}: its programs ran {runs:.2f} times per iteration, for {calls:.2f} probed calls")
    if way.impl == "ebpfkit":
        if before is None or after is None:
            errors.append("no `counters` map found in the running tool")
        else:
            allocs, frees = sum(b.allocs for b in traced.values()), sum(b.frees for b in traced.values())
            seen = {k: after[k] - before[k] for k in COUNTERS}
            if seen["allocs"] < allocs or seen["frees"] < frees:
                errors.append(f"recorded {seen['allocs']} allocations and {seen['frees']} frees of "
                              f"{allocs} and {frees}")
            errors += [f"{k}={seen[k]}" for k in ("stack_missed", "allocs_full", "threads_full") if seen[k]]
    figures.errors += [e for e in errors if e not in figures.errors]
    for w in shown:
        figures.bare_ns[w].append(bare[w].ns)
        figures.traced_ns[w].append(traced[w].ns)
        figures.bpf_ns[w].append(stats[w][0])
        figures.runs[w].append(stats[w][1])
    figures.start_s.append(tool.seconds)
    figures.rss_kib.append(rss)
    figures.programs, figures.probes = len(tool.programs), tool.probes


def cold_start(way: Way, workload: Workload, figures: Figures) -> None:
    with tempfile.TemporaryDirectory(prefix="ebpfkit-memleak-bench-cache-") as cache:
        tool = Started(way, workload, {"EBPFKIT_CACHE_DIR": cache})
        tool.stop()
    figures.cold_s.append(tool.seconds)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--iterations", type=int, default=None,
                    help=f"malloc+free per measurement, split in {BATCHES} batches (default 100000; 20000 in a VM)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"which of {','.join(WORKLOADS)} to measure (default: both)")
    add_vm_arguments(ap)
    args = ap.parse_args(argv)
    shown = [w for w in WORKLOADS if w in args.workloads.split(",")]
    if not shown or set(args.workloads.split(",")) - set(WORKLOADS):
        ap.error(f"--workloads: a comma-separated list of {', '.join(WORKLOADS)}")
    if os.geteuid() != 0:
        print("the tools load BPF programs: run as root", file=sys.stderr)
        return 4
    if not shutil.which("bpftool"):
        print("bpftool is needed (which uprobes a tool holds): apt-get install bpftool", file=sys.stderr)
        return 4
    if args.vm is not None and not in_vm():
        inner = ["--runs", str(args.runs), "--workloads", args.workloads] \
            + (["--iterations", str(args.iterations)] if args.iterations else [])
        return run_in_vm(Path(__file__).resolve(), inner, args.vm or None, args.vm_timeout)
    iterations = args.iterations or (20_000 if in_vm() else 100_000)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ebpfkit-memleak-bench-") as tmp:
        found, missing = ways(Path(tmp))
        figures = {w.name: Figures() for w in found}
        workload = Workload(Path(tmp), iterations)
        others = foreign_uprobes(workload.libc)
        if others:
            print(f"warning: other processes hold uprobes on {workload.libc}: {describe(others)}; a system-wide "
                  "one traps in the workload too (the bare figures include it), and BCC's attach fails "
                  "where one is on a function it probes (bcc#5236)", file=sys.stderr)
        try:
            for way in list(found):  # one untimed start each: warm caches, and find those that fail
                try:
                    Started(way, workload).stop()
                except RuntimeError as exc:
                    missing[way.name] = f"failed: {exc}"
                    found.remove(way)
            for run in range(args.runs):
                order = found[run % len(found):] + found[:run % len(found)] if found else []  # no way always first
                for way in order:
                    try:
                        measure_round(way, workload, shown, figures[way.name])
                        if way.impl == "ebpfkit":
                            cold_start(way, workload, figures[way.name])
                    except RuntimeError as exc:  # e.g. BCC's attach refused (bcc#5236): the others go on
                        figures[way.name].errors.append(f"round {run + 1}: {exc}")
                        print(f"{way.name}: round {run + 1} failed: {exc}", file=sys.stderr)
                # each round's figures as they come: a run cut short still says what it saw
                print(f"round {run + 1}/{args.runs} done ({time.monotonic() - started:.0f} s): " + "; ".join(
                    f"{w.name} " + " ".join(f"{x} {f.added(x)[-1]:+.0f} ns" for x in shown)
                    + f", start {f.start_s[-1]:.2f} s, RSS {f.rss_kib[-1] / 1024:.0f} MiB"
                    for w in found if (f := figures[w.name]).start_s), file=sys.stderr)
            others.update(foreign_uprobes(workload.libc))
        finally:
            workload.close()
    report(args.runs, workload, shown, missing, figures, others)
    print(f"(benchmark took {time.monotonic() - started:.0f} s)")
    return 1 if any(f.errors for f in figures.values()) else 0


# --- the report ------------------------------------------------------------------------------------

def report(runs, workload, shown, missing, figures, others) -> None:
    where = ("inside a VM (`ebpfkit vm run`; emulated: absolute times are the emulator's, ratios compare)"
             if in_vm() else "host")
    print(f"memleak vs BCC's, {runs} rounds; kernel {os.uname().release}, {where}")
    print(f"memleak_loop on CPU {CPU}: fastest of {BATCHES} batches of {workload.per_batch} iterations; "
          "an iteration is one block allocated and freed (ns per malloc+free)")
    every = {w: [x for f in figures.values() for x in f.bare_ns[w]] for w in shown}
    if others:
        print(f"other processes held uprobes on {workload.libc} during the run: {describe(others)}")
    print("bare: " + ", ".join(f"{w} {median(every[w]):.1f} ns" for w in shown))
    spread = {w: consecutive_spread(f.bare_ns[w] for f in figures.values()) for w in shown}
    head = "".join(f" | {w + ' +ns':>13} {'BPF ns':>7} {'runs':>5}" for w in shown)
    print(f"{'way':<22} {'probes':>6} {'progs':>5} {'start s':>7} {'cold s':>6} {'RSS MiB':>7}{head}")
    rows = [(mode, impl, f"{impl} {mode}") for mode in MODES for impl in ("ebpfkit", "BCC")] + [("", FLOOR, FLOOR)]
    for mode, impl, name in rows:
        if name in missing:
            print(f"{name:<22} {missing[name]}")
            continue
        f = figures.get(name)
        if f is None or not f.start_s:
            print(f"{name:<22} no figures (no round ran)")
            continue
        cold = f"{median(f.cold_s):6.2f}" if f.cold_s else f"{'-':>6}"
        cells = "".join(f" | {median(f.added(w)):+13.0f} {median(f.bpf_ns[w]):7.0f} {median(f.runs[w]):5.2f}"
                        for w in shown)
        print(f"{name:<22} {f.probes:>6} {f.programs:>5} {median(f.start_s):7.2f} {cold} "
              f"{median(f.rss_kib) / 1024:7.1f}{cells}")
        if f.errors:
            print(f"  ERROR, {name} (no ratio from its figures): {'; '.join(f.errors)}")
    for mode in MODES:
        ours, theirs = figures.get(f"ebpfkit {mode}"), figures.get(f"BCC {mode}")
        if not (ours and theirs and ours.start_s and theirs.start_s):
            continue
        if ours.errors or theirs.errors:
            print(f"  {mode}, ebpfkit / BCC: no ratios (a way has errors, above)")
            continue
        added = "; ".join(f"+ns {w} " + ratio_note(median(ours.added(w)), median(theirs.added(w)),
                                                   ADDED_TARGETS[mode], spread[w]) for w in shown)
        print(f"  {mode}, ebpfkit / BCC: {added}; "
              f"start {ratio_note(median(ours.start_s), median(theirs.start_s), START_TARGET)}; "
              f"RSS {ratio_note(median(ours.rss_kib), median(theirs.rss_kib), RSS_TARGET)}")
    floor = figures.get(FLOOR)
    for mode in MODES:
        theirs = figures.get(f"BCC {mode}")
        if floor and floor.start_s and not floor.errors and theirs and theirs.start_s and not theirs.errors:
            print(f"  floor / BCC {mode}: " + "; ".join(
                f"+ns {w} {median(floor.added(w)) / median(theirs.added(w)):.2f}x" for w in shown)
                + f" (the least any programs on ebpfkit's uprobes could add; target {ADDED_TARGETS[mode]}x)")
    print("noise (bare-to-bare spread): " + ", ".join(
        f"{w} {spread[w]:.1f} ns" if not math.isnan(spread[w]) else f"{w} n/a (one round)" for w in shown))
    print("+ns: median of paired (traced - bare) ns per malloc+free, all costs included; BPF ns: the programs' "
          "own run time per malloc+free (BPF_ENABLE_STATS), the rest of +ns is the uprobe/uretprobe dispatch; "
          "runs: program runs per malloc+free; probes: uprobes and uretprobes attached; floor: empty programs "
          "on the places ebpfkit's memleak probes (the uprobes' own cost)")


if __name__ == "__main__":
    sys.exit(main())
