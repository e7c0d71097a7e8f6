#!/usr/bin/env bash
# The README's second command: install everything the tests need and run the whole suite
# (unit tests, then integration tests that load real programs into this kernel).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
exec .venv/bin/python -m pytest -p no:cacheprovider -ra "$@" tests
