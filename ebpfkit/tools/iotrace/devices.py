"""The block devices of a recording, as its file format writes them (the sysfs facts come
from ``ebpfkit.sysinfo.devices``)."""

from __future__ import annotations

from ...sysinfo.devices import block_device, dev_str, parse_dev
from .fileformat import Device


def device_info(dev: str) -> Device | None:
    """The name, disk and partition start of "major:minor"; None when it is no block device
    (tmpfs, overlayfs, btrfs's anonymous devices: their files can't be mapped to sectors)."""
    try:
        found = block_device(parse_dev(dev))
    except ValueError:
        return None
    if found is None:
        return None
    return Device(dev, found.name, dev_str(found.disk), found.start)
