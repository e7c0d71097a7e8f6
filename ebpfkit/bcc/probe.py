"""Is BCC's Python module importable here, and can it compile? The engine does not use BCC,
so this probe is not the engine's: importing this module registers it with the engine's
probe registry (after type_walk, where doctor lists it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from ..engine import features
from ..engine.features import SUPPORTED, UNSUPPORTED, Probe

HINT = "apt-get install python3-bpfcc (for /usr/bin/python3) and matching kernel headers"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3-bpfcc installs BCC for it only


def bcc_available() -> Probe:
    return features.probe("bcc")


def bcc_version(python: str) -> str | None:
    """bcc's version when ``python`` can import it (checked in a child process), else None."""
    code = "import bcc; print(getattr(bcc, '__version__', '?'))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or "?" if out.returncode == 0 else None


@features.register("bcc", "BCC (python bcc module)", HINT, after="type_walk")
def _probe_bcc(name, lbl):
    pythons = [sys.executable]
    if os.path.realpath(SYSTEM_PYTHON) != os.path.realpath(sys.executable):
        pythons.append(SYSTEM_PYTHON)
    for python in pythons:
        # our own interpreter: a cheap find_spec first, so a missing bcc costs no child process
        if python == sys.executable and importlib.util.find_spec("bcc") is None:
            continue
        if os.path.exists(python) and (version := bcc_version(python)) is not None:
            where = "this python" if python == sys.executable else python
            reason = f"bcc {version} importable with {where}"
            headers = f"/lib/modules/{features.kernel_release()}/build"
            if not os.path.exists(headers):
                reason += f" (no kernel headers at {headers}: BCC cannot compile)"
            return Probe(name, lbl, SUPPORTED, reason, value=python)
    return Probe(name, lbl, UNSUPPORTED, f"no bcc module for {' or '.join(pythons)}")
