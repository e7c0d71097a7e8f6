"""dev_t encodings and --disk resolution (sysinfo.devices), against this machine's own
sysfs and mount table, and a made-up sysfs tree for partitions."""

import os

import pytest

from ebpfkit.sysinfo import devices
from ebpfkit.sysinfo.devices import (Disk, UnknownDiskError, block_device, decode_kernel_dev,
                                     decode_user_dev, dev_str, device_name, encode_kernel_dev,
                                     encode_user_dev, kernel_dev_of_stat, parse_dev, resolve_disk,
                                     whole_disks)
from ebpfkit.sysinfo.mounts import MountTable


@pytest.mark.parametrize("number", [(0, 0), (7, 3), (8, 1), (254, 0), (259, 70000), (4095, (1 << 20) - 1)])
def test_both_encodings_round_trip(number):
    assert decode_kernel_dev(encode_kernel_dev(*number)) == number
    assert decode_user_dev(encode_user_dev(*number)) == number
    assert dev_str(number) == f"{number[0]}:{number[1]}" and parse_dev(dev_str(number) + "\n") == number


def test_the_kernel_encoding_is_mkdev():
    assert encode_kernel_dev(8, 1) == (8 << 20) | 1
    assert encode_kernel_dev(259, 70000) == (259 << 20) | 70000
    # the user-space encoding differs once minor > 255: never compare across them
    assert encode_user_dev(259, 70000) != encode_kernel_dev(259, 70000)
    with pytest.raises(ValueError):
        parse_dev("sda")


def test_a_real_files_dev_t_is_what_mountinfo_says(tmp_path):
    """st_dev of a file decodes to the major:minor the kernel writes in mountinfo for its
    filesystem, and re-encodes to the same kernel dev_t as that mount's."""
    f = tmp_path / "f"
    f.write_text("x")
    st = os.stat(f)
    mount = MountTable().containing(str(f))
    assert mount is not None
    assert decode_user_dev(st.st_dev) == mount.number
    assert kernel_dev_of_stat(st.st_dev) == mount.kernel_dev == encode_kernel_dev(*mount.number)


def _sys_block_dev(name: str) -> tuple[int, int]:
    with open(f"/sys/block/{name}/dev") as f:
        major, minor = f.read().strip().split(":")
    return int(major), int(minor)


def test_every_disk_resolves_as_sys_block_says():
    disks = whole_disks()
    assert disks == set(os.listdir("/sys/block")) and disks
    for name in sorted(disks):
        parts = {_sys_block_dev(f"{name}/{e}") for e in os.listdir(f"/sys/block/{name}")
                 if os.path.exists(f"/sys/block/{name}/{e}/partition")}
        own = _sys_block_dev(name)
        for spelling in (name, f"/dev/{name}", f"/dev/{name}/"):
            found = resolve_disk(spelling)
            assert found == Disk(name, own, (own, *sorted(parts)))
        assert device_name(own) == name
        info = block_device(own)
        assert (info.name, info.disk, info.start) == (name, own, 0)


def test_the_root_filesystems_device_is_named_as_mounted():
    root = MountTable().containing("/")
    number = decode_user_dev(os.stat("/").st_dev)
    if not root.source.startswith("/dev/") or block_device(number) is None:
        pytest.skip(f"/ is on {root.source} ({root.fstype}), no block device")
    assert device_name(number) == os.path.basename(os.path.realpath(root.source))


def test_unknown_disk_is_a_usage_error_naming_it():
    for bad in ("no-such-disk0", "/dev/", "/dev/no-such-disk0", ""):
        with pytest.raises(UnknownDiskError) as info:
            resolve_disk(bad)
        assert f"no block device '{bad}'" in str(info.value) and info.value.exit_code == 2
    assert device_name((0, 9999)) == "0:9999" and block_device((0, 9999)) is None


@pytest.fixture
def fake_sysfs(tmp_path):
    """/sys/devices/.../sda with partitions sda1 (start 2048) and sda2, and its class/block
    and dev/block links, as the kernel lays them out."""
    disk = tmp_path / "devices" / "sda"
    for rel, dev, start in (("", "8:0", None), ("sda1", "8:1", 2048), ("sda2", "8:2", 411648)):
        d = disk / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "dev").write_text(dev + "\n")
        if start is not None:
            (d / "partition").write_text(rel[-1] + "\n")
            (d / "start").write_text(f"{start}\n")
    (disk / "queue").mkdir()
    for sub in ("class_block", "dev_block"):
        (tmp_path / sub).mkdir()
    for name, target, dev in (("sda", disk, "8:0"), ("sda1", disk / "sda1", "8:1"), ("sda2", disk / "sda2", "8:2")):
        os.symlink(target, tmp_path / "class_block" / name)
        os.symlink(target, tmp_path / "dev_block" / dev)
    return tmp_path


def test_a_disk_selects_its_partitions_a_partition_itself(fake_sysfs):
    cls, dev = str(fake_sysfs / "class_block"), str(fake_sysfs / "dev_block")
    assert resolve_disk("sda", cls) == Disk("sda", (8, 0), ((8, 0), (8, 1), (8, 2)))
    part = resolve_disk("/dev/sda1", cls)
    assert part == Disk("sda1", (8, 0), ((8, 1),)) and part.block_devs == {(8, 0), (8, 1)}
    with pytest.raises(UnknownDiskError, match=r"no block device 'sdz' \(there are: sda, sda1, sda2\)"):
        resolve_disk("sdz", cls)
    assert block_device((8, 1), dev) == devices.BlockDevice((8, 1), "sda1", (8, 0), 2048)
    assert block_device((8, 0), dev) == devices.BlockDevice((8, 0), "sda", (8, 0), 0)
    assert device_name((8, 2), dev) == "sda2"
