"""The lab node every tc test builds on (ebpfkit.tools.tc.lab), removed after the test with
whatever a failed test left attached in it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ebpfkit.tools.tc.lab import LabNode


@pytest.fixture
def lab():
    with LabNode() as node:
        yield node
        subprocess.run([sys.executable, "-m", "ebpfkit", "tc", "detach", "--netns", node.node.name],
                       capture_output=True, timeout=60)
