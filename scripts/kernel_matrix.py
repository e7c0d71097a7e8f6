#!/usr/bin/env python3
"""The kernel matrix (issue #43): each tool's hook and its integration tests on each kernel.

Runs `ebpfkit doctor --format json` and the host integration tests of every tool
(tests/integration/tools) on this machine and inside VMs booted with other kernels (with
BPF-LSM active, as a guard user would boot them), then writes docs/kernel-matrix.md from what
the runs left: doctor's hook for each tool, and its tests passed out of run, per kernel.

    sudo .venv/bin/python scripts/kernel_matrix.py                       # host, 5.10, 6.1, 6.12
    sudo .venv/bin/python scripts/kernel_matrix.py --kernel 5.10 --kernel host
    sudo .venv/bin/python scripts/kernel_matrix.py --report-only         # rewrite the page

Each kernel takes about as long as the host's integration tests under a VM (~30 min with KVM
on 2 cores), so this is a job of its own, not part of the README's test command. Results stay
in --out (one directory per kernel: doctor.json, junit.xml, pytest.txt) and a kernel run
again replaces its own.
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


def run_kernel(kernel: str, out: str, timeout: int) -> int:
    """Doctor and the tests on ``kernel`` ("host": this machine), results into out/<kernel>."""
    where = os.path.join(out, kernel)
    os.makedirs(where, exist_ok=True)
    for name in ("doctor.json", "junit.xml", "pytest.txt"):
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
        argv = [py, "-m", "ebpfkit", "vm", "run", "--kernel", kernel, "--lsm", "--rwdir", where,
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


def read_results(where: str) -> tuple[dict, dict, str]:
    """(doctor's tools, {tool: Counter(passed/failed/skipped)}, kernel release) of one run."""
    doctor, counts, release = {}, collections.defaultdict(collections.Counter), "?"
    try:
        with open(os.path.join(where, "doctor.json")) as f:
            doctor = json.load(f).get("tools", {})
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(where, "release")) as f:
            release = f.read().strip() or "?"
    except OSError:
        pass
    try:
        tree = ET.parse(os.path.join(where, "junit.xml"))
    except (OSError, ET.ParseError):
        return doctor, counts, release
    for case in tree.iter("testcase"):
        tool = tool_of(case.get("classname", ""))
        if case.find("failure") is not None or case.find("error") is not None:
            counts[tool]["failed"] += 1
        elif case.find("skipped") is not None:
            counts[tool]["skipped"] += 1
        else:
            counts[tool]["passed"] += 1
    return doctor, counts, release


def cell(doctor: dict, counts: collections.Counter | None, tool: str) -> str:
    entry = doctor.get(tool)
    hook = (entry["hook"] if entry["runs"] else f"**no**: {entry['hook']}") if entry else "-"
    if not counts:
        return hook
    run = sum(counts.values())
    tests = f"{counts['passed']}/{run} passed"
    if counts["failed"]:
        tests += f", **{counts['failed']} failed**"
    if counts["skipped"]:
        tests += f", {counts['skipped']} skipped"
    return f"{hook} ({tests})"


def report(out: str, kernels: list[str]) -> str:
    runs = {k: read_results(os.path.join(out, k)) for k in kernels if os.path.isdir(os.path.join(out, k))}
    tools = sorted({t for d, c, _ in runs.values() for t in list(d) + list(c)})
    lines = ["# Kernel matrix", "",
             "Generated by `scripts/kernel_matrix.py` (do not edit by hand) on "
             f"{datetime.date.today().isoformat()}: for each tool, the hook `ebpfkit doctor` chose on each "
             "kernel, and its integration tests (tests/integration/tools) run there, passed out of run. "
             "VM kernels were booted with BPF-LSM active (`ebpfkit vm run --lsm`).", ""]
    heads = [f"{k} ({runs[k][2]})" for k in runs]
    lines.append("| tool | " + " | ".join(heads) + " |")
    lines.append("|---|" + "---|" * len(runs))
    for tool in tools:
        lines.append(f"| {tool} | " + " | ".join(cell(d, c.get(tool), tool) for d, c, _ in runs.values()) + " |")
    failed = []
    for k, (d, c, _) in runs.items():
        total = sum(sum(x.values()) for x in c.values())
        bad = sum(x["failed"] for x in c.values())
        failed.append(f"- {k}: {total - bad} of {total} tests passed" + (f", {bad} failed" if bad else ""))
    lines += ["", "## Totals", ""] + failed + [""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", action="append", help="host, or a version `ebpfkit vm kernels` lists (repeat; "
                    f"default: {' '.join(KERNELS)})")
    ap.add_argument("--out", default="/var/lib/ebpfkit/kernel-matrix", help="where each kernel's results go")
    ap.add_argument("--write", default=os.path.join(ROOT, "docs", "kernel-matrix.md"), help="the page to write")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds a VM may run")
    ap.add_argument("--report-only", action="store_true", help="write the page from the results already in --out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("kernel_matrix: run as root (the tools load BPF programs)", file=sys.stderr)
        return 4
    kernels = args.kernel or KERNELS
    rc = 0
    if not args.report_only:
        for k in kernels:
            rc |= run_kernel(k, args.out, args.timeout) != 0
    # the page covers every kernel with results, not only those run now
    present = [k for k in KERNELS + sorted(set(os.listdir(args.out)) - set(KERNELS))
               if os.path.isdir(os.path.join(args.out, k))] if os.path.isdir(args.out) else []
    page = report(args.out, present)
    with open(args.write, "w") as f:
        f.write(page)
    print(f"wrote {args.write}")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
