#!/usr/bin/env python3
"""The kernel matrix (issue #43): each tool's hook and its integration tests on each kernel.

Runs `ebpfkit doctor --format json` and the host integration tests of every tool
(tests/integration/tools) on this machine and inside VMs booted with other kernels (with
BPF-LSM active, as a guard user would boot them, and a scratch disk as the tests' TMPDIR),
then writes docs/kernel-matrix.md: doctor's hook for each tool, and its tests passed out of
run, per kernel, with each failure named.

    sudo .venv/bin/python scripts/kernel_matrix.py                       # host, 5.10, 6.1, 6.12
    sudo .venv/bin/python scripts/kernel_matrix.py --kernel 5.10 --kernel host
    sudo .venv/bin/python scripts/kernel_matrix.py --report-only         # rewrite the page

Each kernel takes about as long as the host's integration tests under a VM (~30 min under
emulation on 2 cores), so this is a job of its own, not part of the README's test command, and
kernels may be run on different days: a run's raw output stays in --out (doctor.json,
junit.xml, pytest.txt), and its summary, which the page is written from, in
docs/kernel-matrix/<kernel>.json beside the page (committed; a kernel run again replaces it).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = "tests/integration/tools"
KERNELS = ["host", "5.10", "6.1", "6.12"]
PAGE = os.path.join(ROOT, "docs", "kernel-matrix.md")
SUMMARIES = os.path.join(ROOT, "docs", "kernel-matrix")


def run_kernel(kernel: str, out: str, timeout: int) -> int:
    """Doctor and the tests on ``kernel`` ("host": this machine), raw results into out/<kernel>."""
    where = os.path.join(out, kernel)
    os.makedirs(where, exist_ok=True)
    for name in ("doctor.json", "junit.xml", "pytest.txt", "release"):
        if os.path.exists(os.path.join(where, name)):
            os.unlink(os.path.join(where, name))
    py = sys.executable
    q = shlex.quote
    inner = (f"uname -r > {q(where)}/release; "
             f"{q(py)} -m ebpfkit doctor --format json > {q(where)}/doctor.json; "
             f"{q(py)} -m pytest -p no:cacheprovider -q -rfE --tb=short --junitxml={q(where)}/junit.xml {TESTS} "
             f"> {q(where)}/pytest.txt 2>&1")
    if kernel == "host":
        argv = ["sh", "-c", inner]
    else:
        # the tests' temporary files on a disk of their own, as on the host (hardirqs counts its IRQs)
        argv = [py, "-m", "ebpfkit", "vm", "run", "--kernel", kernel, "--lsm", "--rwdir", where, "--scratch", "2G",
                "--timeout", str(timeout), "--", "sh", "-c", inner]
    print(f"kernel {kernel}: {shlex.join(argv[:9])} ...", flush=True)
    rc = subprocess.run(argv, cwd=ROOT).returncode
    print(f"kernel {kernel}: exit {rc}; {tail(os.path.join(where, 'pytest.txt'))}", flush=True)
    return rc


def tail(path: str) -> str:
    try:
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip()]
        return lines[-1] if lines else "(no output)"
    except OSError:
        return "(no pytest output)"


def tool_of(classname: str) -> str:
    """tests.integration.tools.runqlat.test_x.TestY -> runqlat; test_signals -> (all tools)."""
    parts = classname.split(".")
    rest = parts[parts.index("tools") + 1:] if "tools" in parts else parts
    return rest[0] if rest and not rest[0].startswith("test_") else "(all tools)"


def _read(path: str, parse):
    try:
        with open(path) as f:
            return parse(f)
    except (OSError, ValueError, ET.ParseError):
        return None


def summarize(where: str, kernel: str, commit: str, day: str) -> dict:
    """One run's raw output (doctor.json, junit.xml, release) as the summary the page is written from."""
    doctor = _read(os.path.join(where, "doctor.json"), json.load) or {}
    release = (_read(os.path.join(where, "release"), lambda f: f.read().strip()) or "?")
    tree = _read(os.path.join(where, "junit.xml"), ET.parse)
    tests: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures = []
    for case in tree.iter("testcase") if tree is not None else ():
        tool = tool_of(case.get("classname", ""))
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            tests[tool]["failed"] += 1
            message = (bad.get("message") or "").strip().splitlines()
            failures.append({"tool": tool, "test": f"{case.get('classname')}::{case.get('name')}",
                             "message": message[0][:200] if message else ""})
        elif case.find("skipped") is not None:
            tests[tool]["skipped"] += 1
        else:
            tests[tool]["passed"] += 1
    return {"kernel": kernel, "release": release, "date": day, "commit": commit,
            "hooks": doctor.get("tools", {}), "tests": {t: dict(c) for t, c in sorted(tests.items())},
            "failures": failures}


def cell(hooks: dict, counts: dict | None, tool: str) -> str:
    entry = hooks.get(tool)
    hook = (entry["hook"] if entry["runs"] else f"**no**: {entry['hook']}") if entry else "-"
    if not counts:
        return hook
    run = sum(counts.values())
    tests = f"{counts.get('passed', 0)}/{run} passed"
    if counts.get("failed"):
        tests += f", **{counts['failed']} failed**"
    if counts.get("skipped"):
        tests += f", {counts['skipped']} skipped"
    return f"{hook} ({tests})"


def report(runs: list[dict]) -> str:
    """The page, from the summaries of the kernels run (in the order given)."""
    tools = sorted({t for run in runs for t in list(run["hooks"]) + list(run["tests"])})
    lines = ["# Kernel matrix", "",
             "Generated by `scripts/kernel_matrix.py` (do not edit by hand) from the summaries in "
             "`docs/kernel-matrix/`: for each tool, the hook `ebpfkit doctor` chose on each kernel, and its "
             "integration tests (tests/integration/tools) run there, passed out of run. VM kernels were booted "
             "with BPF-LSM active (`ebpfkit vm run --lsm`), under software emulation (TCG) here, so a test "
             "bound by time runs about ten times slower than on hardware.", ""]
    lines.append("| tool | " + " | ".join(f"{r['kernel']} ({r['release']})" for r in runs) + " |")
    lines.append("|---|" + "---|" * len(runs))
    for tool in tools:
        lines.append(f"| {tool} | " + " | ".join(cell(r["hooks"], r["tests"].get(tool), tool) for r in runs) + " |")
    lines += ["", "## Runs", ""]
    for r in runs:
        total = sum(sum(c.values()) for c in r["tests"].values())
        bad = sum(c.get("failed", 0) for c in r["tests"].values())
        lines.append(f"- {r['kernel']}: {total - bad} of {total} tests passed" + (f", {bad} failed" if bad else "")
                     + f" (run {r['date']}, commit {r['commit']})")
    failures = [(r["kernel"], f) for r in runs for f in r["failures"]]
    if failures:
        lines += ["", "## Failures", ""]
        lines += [f"- {kernel}, {f['test']}: {f['message'] or '(no message)'}" for kernel, f in failures]
    return "\n".join(lines) + "\n"


def load_summaries(where: str) -> list[dict]:
    """Every kernel's summary in ``where``, the usual kernels first."""
    names = sorted(n[:-5] for n in os.listdir(where) if n.endswith(".json")) if os.path.isdir(where) else []
    order = [k for k in KERNELS if k in names] + [k for k in names if k not in KERNELS]
    return [_read(os.path.join(where, f"{k}.json"), json.load) for k in order]


def head_commit() -> str:
    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip() or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", action="append", help="host, or a version `ebpfkit vm kernels` lists (repeat; "
                    f"default: {' '.join(KERNELS)})")
    ap.add_argument("--out", default="/var/lib/ebpfkit/kernel-matrix", help="where each kernel's raw output goes")
    ap.add_argument("--summaries", default=SUMMARIES, help="where each kernel's summary goes")
    ap.add_argument("--write", default=PAGE, help="the page to write")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds a VM may run")
    ap.add_argument("--report-only", action="store_true", help="write the page from the summaries already there")
    args = ap.parse_args()
    if os.geteuid() != 0 and not args.report_only:
        print("kernel_matrix: run as root (the tools load BPF programs)", file=sys.stderr)
        return 4
    rc = 0
    if not args.report_only:
        os.makedirs(args.summaries, exist_ok=True)
        commit, day = head_commit(), datetime.date.today().isoformat()
        for k in args.kernel or KERNELS:
            rc |= run_kernel(k, args.out, args.timeout) != 0
            summary = summarize(os.path.join(args.out, k), k, commit, day)
            with open(os.path.join(args.summaries, f"{k}.json"), "w") as f:
                json.dump(summary, f, indent=1, sort_keys=True)
                f.write("\n")
    with open(args.write, "w") as f:
        f.write(report(load_summaries(args.summaries)))
    print(f"wrote {args.write}")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
