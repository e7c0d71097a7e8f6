"""Device numbers and block devices, from sysfs.

A dev_t has two encodings, and BPF programs and user space see different ones:

    the kernel's   (MKDEV)   major << 20 | minor      inode->i_sb->s_dev, bio devices, mountinfo ids
    user space's   (glibc)   os.makedev(major, minor)  os.stat().st_dev

so a number is never compared across them: decode to (major, minor) first.

``resolve_disk`` is what ``--disk NAME`` means in every tool: a disk selects itself and its
partitions, a partition only itself (its block events are reported on its whole disk).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import EbpfkitError

SYS_BLOCK = "/sys/block"              # whole disks only
SYS_CLASS_BLOCK = "/sys/class/block"  # disks and partitions
SYS_DEV_BLOCK = "/sys/dev/block"      # "major:minor" -> the device
KERNEL_MINORBITS = 20
KERNEL_MINORMASK = (1 << KERNEL_MINORBITS) - 1

DevNumber = tuple[int, int]  # (major, minor)


# --- dev_t encodings -------------------------------------------------------------------

def encode_kernel_dev(major: int, minor: int) -> int:
    """The kernel's internal dev_t (MKDEV), as BPF programs read it."""
    return (major << KERNEL_MINORBITS) | minor


def decode_kernel_dev(dev: int) -> DevNumber:
    """(major, minor) of a kernel-internal dev_t (MAJOR(), MINOR())."""
    return dev >> KERNEL_MINORBITS, dev & KERNEL_MINORMASK


def encode_user_dev(major: int, minor: int) -> int:
    """The user-space dev_t, as ``os.stat().st_dev`` gives it."""
    return os.makedev(major, minor)


def decode_user_dev(st_dev: int) -> DevNumber:
    """(major, minor) of a user-space dev_t (``st_dev``)."""
    return os.major(st_dev), os.minor(st_dev)


def kernel_dev_of_stat(st_dev: int) -> int:
    """``os.stat().st_dev`` re-encoded as the kernel's s_dev, the number BPF programs see."""
    return encode_kernel_dev(*decode_user_dev(st_dev))


def dev_str(number: DevNumber) -> str:
    """(8, 1) -> "8:1", as sysfs and mountinfo write it."""
    return f"{number[0]}:{number[1]}"


def parse_dev(text: str) -> DevNumber:
    """"8:1" -> (8, 1); ValueError for anything else."""
    major, minor = text.strip().split(":")
    return int(major), int(minor)


# --- block devices ---------------------------------------------------------------------

class UnknownDiskError(EbpfkitError, LookupError):
    """``--disk`` names no block device: a usage error."""

    exit_code = 2


@dataclass(frozen=True)
class Disk:
    """What ``--disk NAME`` selects: files on ``file_devs``, block IO on ``disk``."""

    name: str                          # "sda", "vda1": the sysfs (and /proc/diskstats) name
    disk: DevNumber                    # the whole disk: the block layer reports IO on it
    file_devs: tuple[DevNumber, ...]   # the disk and its partitions, or just the partition

    @property
    def block_devs(self) -> set[DevNumber]:
        """Devices block IO of this selection may be reported on."""
        return {self.disk, *self.file_devs}


def resolve_disk(name: str, sys_class_block: str = SYS_CLASS_BLOCK) -> Disk:
    """A disk ("sda", "/dev/vda") or partition ("vda1") by name; UnknownDiskError if there
    is no such block device."""
    base = os.path.basename(name.rstrip("/"))
    path = os.path.join(sys_class_block, base)
    own = _read_dev(os.path.join(path, "dev")) if base else None
    if own is None:
        known = sorted(os.listdir(sys_class_block)) if os.path.isdir(sys_class_block) else []
        raise UnknownDiskError(f"no block device '{name}'"
                               + (f" (there are: {', '.join(known)})" if known else ""))
    real = os.path.realpath(path)
    if _is_partition(real):
        return Disk(base, _read_dev(os.path.join(os.path.dirname(real), "dev")) or own, (own,))
    parts = [number for d in _partition_dirs(real) if (number := _read_dev(os.path.join(d, "dev")))]
    return Disk(base, own, (own, *sorted(parts)))


def whole_disks(sys_block: str = SYS_BLOCK) -> set[str]:
    """Names of whole disks (no partitions), as /sys/block lists them."""
    try:
        return set(os.listdir(sys_block))
    except OSError:
        return set()


def device_name(number: DevNumber, sys_dev_block: str = SYS_DEV_BLOCK) -> str:
    """``sda1`` for (8, 1); "major:minor" for devices that are no block device (tmpfs, proc)."""
    try:
        return os.path.basename(os.readlink(os.path.join(sys_dev_block, dev_str(number))))
    except OSError:
        return dev_str(number)


@dataclass(frozen=True)
class BlockDevice:
    """A block device as sysfs describes it; ``start`` is its first sector on ``disk``."""

    number: DevNumber
    name: str
    disk: DevNumber
    start: int


def block_device(number: DevNumber, sys_dev_block: str = SYS_DEV_BLOCK) -> BlockDevice | None:
    """The name, disk and partition start of a device; None when it is no block device
    (tmpfs, overlayfs, btrfs's anonymous devices)."""
    real = os.path.realpath(os.path.join(sys_dev_block, dev_str(number)))
    if _read_dev(os.path.join(real, "dev")) is None:
        return None
    name = os.path.basename(real)
    if not _is_partition(real):
        return BlockDevice(number, name, number, 0)
    disk = _read_dev(os.path.join(os.path.dirname(real), "dev"))
    start = _read_int(os.path.join(real, "start"))
    if disk is None or start is None:
        return None
    return BlockDevice(number, name, disk, start)


def _is_partition(sys_dir: str) -> bool:
    return os.path.exists(os.path.join(sys_dir, "partition"))


def _partition_dirs(disk_dir: str) -> list[str]:
    try:
        entries = os.listdir(disk_dir)
    except OSError:
        return []
    return [os.path.join(disk_dir, e) for e in entries if _is_partition(os.path.join(disk_dir, e))]


def _read_dev(path: str) -> DevNumber | None:
    try:
        with open(path) as f:
            return parse_dev(f.read())
    except (OSError, ValueError):
        return None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
