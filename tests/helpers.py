"""Helpers every test directory shares (tests/conftest.py puts tests/ on sys.path, so
``from helpers import wait_for`` works from tests/unit, tests/integration and tests/vm, in
the VM guest too)."""

from __future__ import annotations

import json
import time


def wait_for(predicate, timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds passed (False): for
    what the kernel does a little after the call that causes it (freeing, socket accounting)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def ek(capsys, *args) -> tuple[int, str, str]:
    """Run the ebpfkit CLI in-process, as `ebpfkit ARGS...`: (exit code, stdout, stderr)."""
    from ebpfkit.cli import cli
    from ebpfkit.output import invoke_cli

    capsys.readouterr()
    rc = invoke_cli(cli, [str(a) for a in args], prog_name="ebpfkit")
    out, err = capsys.readouterr()
    return rc, out, err


def ek_json(capsys, *args):
    """`ebpfkit --format json ARGS...`, which must succeed: its last JSON line, parsed."""
    rc, out, err = ek(capsys, "--format", "json", *args)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])
