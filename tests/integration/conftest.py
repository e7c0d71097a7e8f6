"""Fixtures for integration tests that need a real block device: an ext4 filesystem on a
loop device the test creates (and removes, also when the test fails)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class LoopFS:
    mountpoint: Path
    device: str  # /dev/loopN
    name: str  # loopN, as in /proc/diskstats
    major: int
    minor: int


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def ext4_loop(tmp_path):
    """A 256 MiB ext4 filesystem on a fresh loop device, mounted under tmp_path/mnt."""
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(256 << 20)
    # a VM guest has no udev to load loop on first use of /dev/loop-control
    subprocess.run(["modprobe", "-q", "loop"], check=False)
    device = _run("losetup", "--find", "--show", str(image))
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    mounted = False
    try:
        _run("mkfs.ext4", "-q", "-F", device)
        _run("mount", "-t", "ext4", device, str(mountpoint))
        mounted = True
        st = os.stat(device)
        yield LoopFS(mountpoint, device, os.path.basename(device), os.major(st.st_rdev), os.minor(st.st_rdev))
    finally:
        if mounted:
            subprocess.run(["umount", "-R", str(mountpoint)], check=False)
        subprocess.run(["losetup", "-d", device], check=False)
