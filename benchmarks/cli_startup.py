"""Command start-up, this tree against another revision: did a refactor cost the user time?

For each command, the wall time from spawning `python -m ebpfkit ...` to its exit, in this
checkout and in REV (checked out into a temporary worktree), with the same interpreter, the
same dependencies and each tree's own warm object cache (an untimed first run fills it).
Runs alternate between the trees; medians and the ratio this/REV are printed side by side.

    python benchmarks/cli_startup.py --against 99ca50b [--runs 9]

The commands: `--help` (the CLI and its registry), `runqlat --help` (a tool's command
module), `runqlat 0.05 1` (compile from the cache, load, attach, one 50 ms interval, print,
detach) and `xdp --help` (the largest command group).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "--help": ["--help"],
    "runqlat --help": ["runqlat", "--help"],
    "runqlat 0.05 1": ["--format", "json", "runqlat", "0.05", "1"],
    "xdp --help": ["xdp", "--help"],
}


def checkout(rev: str, into: Path) -> Path:
    tree = into / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
    # the optional C walk is built at install time, not committed: give REV the same one
    for built in (REPO / "ebpfkit" / "engine").glob("_btfnames*.so"):
        shutil.copy2(built, tree / "ebpfkit" / "engine" / built.name)
    return tree


def timed(tree: Path, argv: list[str], cache: Path) -> float:
    env = dict(os.environ, EBPFKIT_CACHE_DIR=str(cache), NO_COLOR="1",
               PYTHONPYCACHEPREFIX=str(cache / "pycache"))  # bytecode cached, as installed
    started = time.perf_counter()
    # cwd=tree: `-m ebpfkit` imports that tree's package ahead of the installed one
    done = subprocess.run([sys.executable, "-m", "ebpfkit", *argv], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"`ebpfkit {' '.join(argv)}` failed in {tree} ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", required=True, metavar="REV", help="the revision to compare with")
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root: runqlat loads a BPF program", file=sys.stderr)
        return 4
    work = Path(tempfile.mkdtemp(prefix="ebpfkit-cli-startup-"))
    trees = {"this": REPO, args.against: None}
    try:
        trees[args.against] = checkout(args.against, work)
        caches = {name: work / f"cache-{i}" for i, name in enumerate(trees)}
        times: dict = {(name, cmd): [] for name in trees for cmd in COMMANDS}
        for name, tree in trees.items():  # untimed: fills the object and bytecode caches
            for argv in COMMANDS.values():
                timed(tree, argv, caches[name])
        for _ in range(args.runs):
            for cmd, argv in COMMANDS.items():
                for name, tree in trees.items():
                    times[(name, cmd)].append(timed(tree, argv, caches[name]))
    finally:
        if trees[args.against] is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(trees[args.against])],
                           check=False)
        shutil.rmtree(work, ignore_errors=True)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    print(f"`python -m ebpfkit ...` spawn to exit, medians of {args.runs} runs ({sys.executable})")
    print(f"| command | this ({head}) | {args.against} | this / {args.against} |")
    print("| --- | --- | --- | --- |")
    for cmd in COMMANDS:
        new, old = (statistics.median(times[(name, cmd)]) for name in trees)
        print(f"| `{cmd}` | {new * 1000:.0f} ms | {old * 1000:.0f} ms | **{new / old:.2f}×** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
