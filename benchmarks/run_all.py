"""Run both benchmarks, start-up then per-event overhead, and print their tables.

    python benchmarks/run_all.py [--runs 5]      (as root)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402
import startup  # noqa: E402
from _common import preflight  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement (default 5)")
    args = ap.parse_args(argv)
    problem = preflight()
    if problem:
        print(problem, file=sys.stderr)
        return 4
    startup.main(["--runs", str(args.runs)])
    print()
    overhead.main(["--runs", str(args.runs)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
