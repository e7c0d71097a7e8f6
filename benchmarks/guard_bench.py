"""What `ebpfkit guard` costs: an open/write/close loop and a fork+exec loop, with the guard
off, in audit mode and in enforce mode, with 10 and with 1000 protected paths; and the read
paths (open/read/close, mmap/munmap) with and without read rules on the filesystem.

    sudo .venv/bin/python benchmarks/guard_bench.py            # boots the VM (BPF-LSM) itself
    ebpfkit vm run --lsm -- .venv/bin/python benchmarks/guard_bench.py   # the same, by hand

BPF-LSM is needed, so on a host that refuses LSM programs this re-runs itself in the VM
(`ebpfkit vm run --lsm`). Under software emulation absolute times mean little: read the
ratios to "off". Targets: open/write/close <= 1.03x off (issue #8); exec is reported; the
read loops on files no read rule covers <= the floor's ratio + 0.02, and an mmap of a
read-protected file's neighbour <= 1.05x off (issue #42). `--loops reads` runs only the
read loops (floor, enforce without and with read rules).

The open/write/close loop runs on a file that is NOT protected, five directories deep, on
the tmpfs that holds the protected files ("same fs": the hooks must look the file up in the
guard's verdict cache, or walk its ancestors) and on another tmpfs ("other fs": the guard
sees at once that nothing there is protected). The read loops (open O_RDONLY/read/close;
mmap PROT_READ/munmap of an open fd) run on the same two files; in the "+read" modes one
protected file in ten is read-protected, so the same-fs file is a read-protected file's
neighbour. The exec loop forks and execs a copy of /bin/true on the protected tmpfs. A
"floor" row measures empty BPF-LSM programs on the same hooks (file_open, file_permission,
mmap_file): what BPF-LSM itself costs on this kernel, whatever the programs do.

Measurements are paired, because a shared machine under emulation drifts by tens of percent
over minutes: the guard's object (guard.bpf.c, filled by the guard's own resolve/apply) is
loaded once per mode and its hooks (20 on a kernel) are attached and detached between measurements,
off and on alternating (off-on, on-off, ...). Each mode's ratio is the median over rounds
of on/off of one pair; the spread of those ratios is printed as the noise. A measurement is
the fastest of several batches, as in loop.c: interference can only add time. (The agent and
the pins are left out: they add no work to these loops, which trigger no violation.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))
from _common import build_c, in_vm  # noqa: E402

TARGET = 1.03
READ_MARGIN = 0.02       # read loops on files no read rule covers: <= the floor's ratio + this
NEIGHBOUR_MMAP = 1.05    # mmap of a read-protected file's neighbour
# (mode, protected paths, one in ten read-protected)
MODES = [("audit", 10, False), ("enforce", 10, False), ("audit", 1000, False), ("enforce", 1000, False),
         ("enforce", 10, True)]
WRITE_KINDS = ("same", "other", "exec")
READ_KINDS = ("read-same", "read-other", "mmap-same", "mmap-other")

LOOP_C = r"""
/* guardloop openwrite|openread|mmap|exec PATH N BATCHES: ns per op of each batch */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int openwrite(const char *path)
{
	static const char data[64] = "guard benchmark";
	int fd = open(path, O_WRONLY | O_CREAT, 0644);

	if (fd < 0 || write(fd, data, sizeof(data)) != sizeof(data))
		return -1;
	return close(fd);
}

static int openread(const char *path)
{
	char buf[64];
	int fd = open(path, O_RDONLY);

	if (fd < 0 || read(fd, buf, sizeof(buf)) < 0)
		return -1;
	return close(fd);
}

static int mapped_fd = -1;

static int map(const char *path)
{
	void *p;

	if (mapped_fd < 0 && (mapped_fd = open(path, O_RDONLY)) < 0)
		return -1;
	p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, mapped_fd, 0);
	if (p == MAP_FAILED)
		return -1;
	return munmap(p, 4096);
}

static int run(const char *path)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		execl(path, path, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	int (*op)(const char *);
	long n, batches, i, b;

	if (argc != 5) {
		fprintf(stderr, "usage: %s openwrite|openread|mmap|exec PATH N BATCHES\n", argv[0]);
		return 2;
	}
	op = !strcmp(argv[1], "exec") ? run : !strcmp(argv[1], "openread") ? openread :
	     !strcmp(argv[1], "mmap") ? map : openwrite;
	n = atol(argv[3]);
	batches = atol(argv[4]);
	for (i = 0; i < n / 10 + 1; i++) /* warm up, untimed */
		if (op(argv[2])) {
			perror(argv[1]);
			return 1;
		}
	for (b = 0; b < batches; b++) {
		double t0 = now();

		for (i = 0; i < n; i++)
			op(argv[2]);
		printf("%.1f\n", (now() - t0) / n);
	}
	return 0;
}
"""


def build_loop(workdir: Path) -> Path:
    return build_c(LOOP_C, workdir / "guardloop")


FLOOR_C = """
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("lsm/file_open")
int BPF_PROG(floor_file_open, struct file *file, int ret) { return ret; }

SEC("lsm/file_permission")
int BPF_PROG(floor_file_permission, struct file *file, int mask, int ret) { return ret; }

SEC("lsm/mmap_file")
int BPF_PROG(floor_mmap_file, struct file *file, unsigned long reqprot, unsigned long prot,
	     unsigned long flags, int ret) { return ret; }

char LICENSE[] SEC("license") = "GPL";
"""


class Bench:
    def __init__(self, root: Path, args):
        self.root, self.args = root, args
        # the loops' files, five directories deep: on the protected tmpfs, and on another one
        other = root / "other"
        other.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "guardbench-other", str(other)], check=True)
        self.targets = {}
        for where, base in (("same", root), ("other", other)):
            d = base / "work" / "a" / "b" / "c" / "d"
            d.mkdir(parents=True)
            self.targets[where] = d / "file"
            self.targets[where].write_bytes(b"r" * 4096)  # (the read loops read it; openwrite rewrites it)
        self.true = root / "work" / "true"
        shutil.copy("/bin/true", self.true)
        self.protected = []
        for i in range(max(n for _, n, _ in MODES)):
            d = root / "protected" / f"d{i // 100:02d}"
            d.mkdir(parents=True, exist_ok=True)
            p = d / f"p{i:04d}"
            p.write_text("x")
            self.protected.append(p)
        self.loop = build_loop(root)

    def measure(self, kind: str) -> float:
        if kind == "exec":
            argv = [str(self.loop), "exec", str(self.true), str(self.args.execs), str(self.args.exec_batches)]
        else:  # "same" / "other": open/write/close of a file on that fs; "read-"/"mmap-": the read loops
            op, _, where = kind.rpartition("-")
            argv = [str(self.loop), {"read": "openread", "mmap": "mmap"}.get(op, "openwrite"),
                    str(self.targets[where]), str(self.args.ops), str(self.args.batches)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        # the fastest batch: other work on a shared machine can only add time (as loop.c)
        return min(float(x) for x in out.split())

    def policy(self, count: int, reads: bool):
        """``count`` protected files; with ``reads``, one in ten also read-protected."""
        from ebpfkit.policy import parse_guard_policy

        return parse_guard_policy("protect:\n" + "".join(
            f"  - path: {p}\n    deny: [read]\n" if reads and i % 10 == 0 else f"  - {p}\n"
            for i, p in enumerate(self.protected[:count])))

    def close(self):
        subprocess.run(["umount", "-l", str(self.root / "other")], check=False)


class Hooks:
    """A loaded object whose programs on() attaches and off() detaches."""

    def __init__(self, obj):
        self.obj, self.links = obj, []

    def on(self):
        if not self.links:
            self.links = [p.attach() for p in self.obj.programs.values() if p.autoload]  # loaded ones

    def off(self):
        for link in self.links:
            link.close()
        self.links = []

    def close(self):
        self.off()
        self.obj.close()


class Guard(Hooks):
    """guard.bpf.c loaded in this process, maps filled as `guard start` fills them, every
    hook attached by on(). This process is the "agent" (trusted); the loops run in child
    processes, untrusted like any other."""

    def __init__(self, mode: str):
        from ebpfkit.tools.guard import agent, core

        super().__init__(agent.load(mode))
        self.mode = mode
        self.maps = {n: self.obj.maps[n] for n in core.MAP_NAMES}

    def fill(self, policy) -> int:
        from ebpfkit.tools.guard import core

        res = core.resolve(policy)
        core.apply(res, self.maps)
        return len(res.protected)


def paired(bench: Bench, hooks: Hooks, kind: str, rounds: int) -> dict:
    ons, offs, ratios = [], [], []
    for r in range(rounds):
        pair = {}
        for guarded in ((False, True) if r % 2 == 0 else (True, False)):
            hooks.on() if guarded else hooks.off()
            pair[guarded] = bench.measure(kind)
        hooks.off()
        offs.append(pair[False])
        ons.append(pair[True])
        ratios.append(pair[True] / pair[False])
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"on": statistics.median(ons), "off": statistics.median(offs),
            "ratio": statistics.median(ratios), "q1": q[0], "q3": q[2]}


def program_time(bench: Bench, hooks: Hooks, kind: str, repeat: int = 3) -> float:
    """ns of BPF program run time per operation (the kernel's run-time statistics, enabled
    just for this), the least of ``repeat`` runs. It includes the statistics' own cost (two
    clock reads per run), which the floor's empty programs measure: guard minus floor is
    the guard's own work, without BPF-LSM's fixed cost."""
    from ebpfkit.engine import run_time

    if kind == "exec":
        ops = bench.args.execs * bench.args.exec_batches + bench.args.execs // 10 + 1
    else:
        ops = bench.args.ops * bench.args.batches + bench.args.ops // 10 + 1
    best = float("inf")
    for _ in range(repeat):
        hooks.on()
        try:
            ns, _ = run_time(hooks.obj.programs.values(), lambda: bench.measure(kind))
        finally:
            hooks.off()
        best = min(best, ns / ops)
    return best


def _cell(m: dict | None) -> str:
    if m is None:
        return f"{'-':>22}"
    return f"{m['ratio']:>6.3f}x ({m['q1']:.2f}-{m['q3']:.2f})"


KIND_TITLES = {"same": "open/write: same fs", "other": "other fs", "exec": "fork+exec",
               "read-same": "open/read: same fs", "read-other": "other fs",
               "mmap-same": "mmap: same fs", "mmap-other": "other fs"}


def verdicts(row: dict, floor: dict) -> list[str]:
    """PASS/FAIL of each target that applies to the row: open/write <= 1.03x (issue #8); the
    read loops on files no read rule covers <= the floor + 0.02, and the mmap of a read-protected
    file's neighbour <= 1.05x (issue #42). A read target is judged twice: on the paired ratio,
    and on the floor's ratio plus the guard programs' own share of the operation (kernel run-time
    statistics), which resolves a 0.02 margin that emulation's noise (IQRs of +-0.1) cannot."""
    out = []
    if "same" in row:
        worst = max(row["same"]["ratio"], row["other"]["ratio"])
        out.append(f"open/write {'PASS' if worst <= TARGET else 'FAIL'}")
    for kind in READ_KINDS:
        if kind not in row:
            continue
        if row["reads"] and kind == "mmap-same":
            name, limit = "neighbour mmap", NEIGHBOUR_MMAP
        elif not row["reads"] or kind.endswith("-other"):  # no read rule covers the file
            name, limit = kind, floor[kind]["ratio"] + READ_MARGIN
        else:
            continue
        by_ratio = "PASS" if row[kind]["ratio"] <= limit else "FAIL"
        by_programs = "PASS" if floor[kind]["ratio"] + row[kind]["prog"] <= limit else "FAIL"
        out.append(f"{name} {by_ratio}/{by_programs}")
    return out


def run(args) -> int:
    if os.geteuid() != 0:
        print("run as root: the guard loads BPF-LSM programs", file=sys.stderr)
        return 1
    import ebpfkit
    from ebpfkit.tools.guard import core

    reason = core.refuse_reason()
    if reason:
        print(f"cannot run here: {reason}", file=sys.stderr)
        return 3
    kinds = {"all": WRITE_KINDS + READ_KINDS, "writes": WRITE_KINDS, "reads": READ_KINDS}[args.loops]
    modes = [m for m in MODES if args.loops != "reads" or (m[0] == "enforce" and m[1] == 10)]
    floor_kinds = [k for k in kinds if k != "exec"]
    root = Path(tempfile.mkdtemp(prefix="guard-bench-"))
    subprocess.run(["mount", "-t", "tmpfs", "guardbench", str(root)], check=True)
    hooks = bench = None
    try:
        bench = Bench(root, args)
        print(f"# kernel {os.uname().release}, {'VM (emulated: compare ratios only)' if in_vm() else 'host'}; "
              f"{args.rounds} off/on pairs per cell; a measurement: the fastest of {args.batches} batches "
              f"x {args.ops} ops, of {args.exec_batches} batches x {args.execs} fork+exec", flush=True)
        rows = []
        hooks = Hooks(ebpfkit.compile(text=FLOOR_C, name="guard_floor.bpf.c").load())
        floor = {"mode": "floor*", "count": None, "keys": 0, "reads": False}
        for kind in floor_kinds:
            floor[kind] = paired(bench, hooks, kind, args.rounds)
        floor_ns = {kind: program_time(bench, hooks, kind) for kind in kinds}
        rows.append(floor)
        print("floor: " + " ".join(f"{k} {_cell(floor[k])}" for k in floor_kinds)
              + "; statistics' own cost per op: " + ", ".join(f"{k} {v:.0f} ns" for k, v in floor_ns.items()),
              flush=True)
        hooks.close()
        hooks = None
        for mode, count, reads in modes:
            if hooks is None or hooks.mode != mode:
                if hooks is not None:
                    hooks.close()
                hooks = Guard(mode)
            row = {"mode": mode + ("+read" if reads else ""), "count": count, "reads": reads,
                   "keys": hooks.fill(bench.policy(count, reads))}
            for kind in kinds:
                row[kind] = paired(bench, hooks, kind, args.rounds)
                row[kind]["prog"] = (program_time(bench, hooks, kind) - floor_ns[kind]) / row[kind]["off"]
            rows.append(row)
            print(f"{row['mode']} {count}: " + " ".join(f"{k} {_cell(row[k])}" for k in kinds)
                  + "; programs " + " ".join(f"{row[k]['prog']:.1%}" for k in kinds), flush=True)
        off = rows[1]
        print()
        print("off (medians): " + ", ".join(
            f"{k} {off[k]['off'] / 1e3:.0f} us" if k == "exec" else f"{k} {off[k]['off']:.0f} ns" for k in kinds))
        print(f"{'guard':<13}{'paths':>6}{'keys':>6}  " + " ".join(f"{KIND_TITLES[k]:>22}" for k in kinds)
              + "  programs: " + " ".join(f"{k:>10}" for k in kinds))
        failed = 0
        for row in rows:
            progs, result = "", []
            if row["count"] is not None:
                result = verdicts(row, floor)
                failed += sum(v.endswith("FAIL") for v in result)  # a read target: by its programs' share
                progs = " ".join(f"{row[k]['prog']:>10.1%}" for k in kinds)
            print(f"{row['mode']:<13}{row['count'] or '-':>6}{row['keys']:>6}  "
                  + " ".join(f"{_cell(row.get(k)):>22}" for k in kinds) + f"  {progs:>10}  {', '.join(result)}")
        print(f"\ntargets: open/write <= {TARGET}x; read loops on files no read rule covers <= the floor's "
              f"ratio + {READ_MARGIN}; mmap of a read-protected file's neighbour (+read, same fs) <= {NEIGHBOUR_MMAP}x"
              "\n  read targets: PASS/FAIL by the paired ratio / by the floor's ratio + the programs' share"
              "\nratios: medians of per-pair on/off, (IQR) their spread over the pairs"
              "\n* floor: empty BPF-LSM programs on the same hooks (file_open, file_permission, mmap_file):"
              "\n  the cost of BPF-LSM itself on this kernel, whatever the programs do"
              "\n+read: one protected file in ten is also read-protected (same fs as the loops' file)"
              "\nprograms: the guard programs' run time (kernel BPF statistics) per operation minus the"
              "\n  floor's empty programs' (that is, the guard's own work beyond BPF-LSM's fixed cost), as"
              "\n  a share of the operation's time with the guard off; less noisy than the ratios")
        return 1 if failed else 0
    finally:
        if hooks is not None:
            hooks.close()
        if bench is not None:
            bench.close()
        subprocess.run(["umount", "-l", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None, help="off/on pairs per mode and loop")
    parser.add_argument("--ops", type=int, default=None, help="open/write/close per batch")
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--execs", type=int, default=None, help="fork+exec per batch")
    parser.add_argument("--exec-batches", type=int, default=5)
    parser.add_argument("--loops", choices=("all", "writes", "reads"), default="all",
                        help="which loops: all, the write and exec loops (issue #8), or the read loops (#42)")
    parser.add_argument("--kernel", help="VM kernel (default: the newest installed)")
    parser.add_argument("--vm-timeout", type=float, default=3600)
    parser.add_argument("--no-vm", action="store_true", help="run here even outside a VM")
    args = parser.parse_args(argv)
    if not in_vm() and not args.no_vm:
        from ebpfkit.tools.guard import core

        if core.refuse_reason():  # this kernel cannot run the guard: the VM can
            python = str(REPO / ".venv" / "bin" / "python")
            python = python if os.path.exists(python) else sys.executable
            cmd = [python, "-m", "ebpfkit", "vm", "run", "--lsm", "--timeout", str(int(args.vm_timeout))]
            if args.kernel:
                cmd += ["--kernel", args.kernel]
            cmd += ["--", python, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:])]
            print(f"BPF-LSM is not usable here: booting a VM: {' '.join(cmd)}", file=sys.stderr, flush=True)
            return subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL).returncode
    emulated = in_vm()
    args.rounds = args.rounds or (16 if emulated else 20)
    args.ops = args.ops or (300 if emulated else 5000)
    args.execs = args.execs or (4 if emulated else 50)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
