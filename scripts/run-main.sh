#!/usr/bin/env bash
# The README's first command: install, show what this kernel allows, then a short real
# sample of a diagnostics tool (run-queue latency, 3 one-second intervals).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ebpfkit doctor
.venv/bin/ebpfkit runqlat 1 3
