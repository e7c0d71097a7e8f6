"""Block devices by name and number, from sysfs: what --disk means, and which disk and
partition offset a filesystem's sectors land on (block tracepoints report the whole disk
and absolute sectors; a file's extents are relative to its partition)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .fileformat import Device

SYSFS_BLOCK = "/sys/class/block"
SYSFS_DEV = "/sys/dev/block"
MINORBITS = 20  # the kernel's dev_t: major << 20 | minor (not the user-space encoding)


def kdev(major: int, minor: int) -> int:
    return (major << MINORBITS) | minor


def kdev_str(dev: int) -> str:
    """A kernel dev_t as "major:minor"."""
    return f"{dev >> MINORBITS}:{dev & ((1 << MINORBITS) - 1)}"


def parse_dev(text: str) -> tuple[int, int]:
    major, minor = text.strip().split(":")
    return int(major), int(minor)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


@dataclass(frozen=True)
class DiskFilter:
    """--disk NAME: block events of ``disk`` (kernel dev_t), syscalls on files of ``fs_devs``."""

    name: str
    disk: int
    fs_devs: tuple[int, ...]


def resolve_disk(name: str, limit: int = 16) -> DiskFilter:
    """A disk ("loop0", "/dev/vda") or partition ("vda1") by name; LookupError if unknown.

    A disk selects the files on it and on its partitions; a partition only its own files,
    but the block events of its whole disk (the block layer reports disks)."""
    base = os.path.basename(name.rstrip("/"))
    path = os.path.join(SYSFS_BLOCK, base)
    if not base or not os.path.exists(os.path.join(path, "dev")):
        known = sorted(os.listdir(SYSFS_BLOCK)) if os.path.isdir(SYSFS_BLOCK) else []
        raise LookupError(f"no block device '{name}'" + (f" (there are: {', '.join(known)})" if known else ""))
    dev = kdev(*parse_dev(_read(os.path.join(path, "dev"))))
    if os.path.exists(os.path.join(path, "partition")):
        parent = os.path.dirname(os.path.realpath(path))
        disk = kdev(*parse_dev(_read(os.path.join(parent, "dev"))))
        return DiskFilter(base, disk, (dev,))
    parts = [dev]
    real = os.path.realpath(path)
    for entry in sorted(os.listdir(real)):
        sub = os.path.join(real, entry)
        if os.path.exists(os.path.join(sub, "partition")):
            parts.append(kdev(*parse_dev(_read(os.path.join(sub, "dev")))))
    return DiskFilter(base, dev, tuple(parts[:limit]))


def device_info(dev: str) -> Device | None:
    """The name, disk and partition start of "major:minor"; None when it is no block device
    (tmpfs, overlayfs, btrfs's anonymous devices: their files can't be mapped to sectors)."""
    path = os.path.join(SYSFS_DEV, dev)
    try:
        real = os.path.realpath(path)
        if not os.path.exists(os.path.join(real, "dev")):
            return None
        name = os.path.basename(real)
        if os.path.exists(os.path.join(real, "partition")):
            start = int(_read(os.path.join(real, "start")))
            disk = _read(os.path.join(os.path.dirname(real), "dev"))
            return Device(dev, name, disk, start)
        return Device(dev, name, dev, 0)
    except (OSError, ValueError):
        return None
