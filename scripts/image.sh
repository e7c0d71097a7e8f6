#!/usr/bin/env bash
# The container image's steps after the README's install (deploy/Containerfile runs them; so
# does tests/integration/deploy, outside a container):
#   scripts/image.sh wheels OUT          after scripts/setup.sh (clang, kernel BTF, the .venv):
#                                        ebpfkit's wheel, carrying a prebuilt CO-RE object for
#                                        every program, and its dependencies' wheels, into OUT
#   scripts/image.sh install WHEELS VENV the runtime packages (no clang) and a venv at VENV
#                                        holding ebpfkit from WHEELS, with no index
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/packages.sh

usage() { echo "usage: $0 wheels OUT | install WHEELS VENV" >&2; exit 2; }

case "${1:-}" in
  wheels)
    [ $# -eq 2 ] || usage
    out=$2 python=${PYTHON:-.venv/bin/python}
    # built in setup.sh's venv (no build isolation: its setuptools, and wheel, which is the
    # other build requirement), so its build step finds the ebpfkit it compiles the objects with
    "$python" -m pip install -q --disable-pip-version-check wheel
    "$python" -m pip wheel -q --disable-pip-version-check --no-build-isolation -w "$out" .
    # without clang or kernel BTF the build skips the objects with a warning; an image without
    # them would need clang on every node, so that is an error here
    "$python" - "$out" <<'PY'
import sys, zipfile
from pathlib import Path
from ebpfkit.engine.prebuilt import program_sources
wheel = next(Path(sys.argv[1]).glob("ebpfkit-*.whl"))
names = set(zipfile.ZipFile(wheel).namelist())
missing = [s.name for s in program_sources() if f"ebpfkit/programs/prebuilt/{s.name[:-2]}.o" not in names]
if missing:
    sys.exit(f"{wheel.name} has no prebuilt CO-RE object for: {' '.join(missing)} (ebpfkit build says why)")
print(f"== {wheel.name}: a prebuilt CO-RE object for each of {len(program_sources())} programs")
PY
    ;;
  install)
    [ $# -eq 3 ] || usage
    wheels=$2 venv=$3
    install_packages "${runtime_packages[@]}"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$wheels" ebpfkit
    echo "== ready: $("$venv/bin/ebpfkit" --version)"
    ;;
  *) usage ;;
esac
