"""Namespaces ebpfkit makes for itself (the feature probes') are named after their maker,
so one left by a process killed with SIGKILL is found and removed by the next."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pyroute2 import netns as pr_netns

from ebpfkit.net.netns import list_netns, reap_orphans

pytestmark = pytest.mark.integration


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(proc.stdout)  # reaped: gone


def test_the_namespace_of_a_dead_maker_is_reaped_and_a_live_ones_kept():
    dead = f"ebpfkit-pytestreap-{_dead_pid()}-0"
    alive = f"ebpfkit-pytestreap-{os.getpid()}-0"
    other = f"ebpfkit-pytestkeep-{_dead_pid()}-0"  # another purpose: not this call's to reap
    for name in (dead, alive, other):
        pr_netns.create(name)
    try:
        assert reap_orphans("pytestreap") == [dead]
        assert dead not in list_netns() and {alive, other} <= set(list_netns())
    finally:
        for name in (dead, alive, other):
            if name in list_netns():
                pr_netns.remove(name)
    assert not {dead, alive, other} & set(list_netns())
