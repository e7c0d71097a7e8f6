"""The one mount table (sysinfo.mounts): parsing mountinfo by the rules of proc(5), and
what it says about this machine checked against stat() and a mount the test makes."""

import os
import subprocess

import pytest

from ebpfkit.engine import features, mounts
from ebpfkit.sysinfo.devices import decode_user_dev
from ebpfkit.sysinfo.mounts import Mount, MountTable, parse_mountinfo, unescape

MOUNTINFO = (
    "22 1 0:21 / / ro,relatime - 9p /dev/root ro\n"
    "36 22 0:32 / /sys/fs/bpf rw,nosuid shared:9 master:2 - bpf bpf rw,mode=700\n"
    "78 54 0:63 / /tmp/my\\040dir rw,relatime shared:1 - overlay ov "
    "rw,lowerdir=/l1:/l\\:2,upperdir=/u/u,workdir=/u/w\n"
    "90 22 8:1 /sub /mnt rw - ext4 /dev/sda1 rw\n"
    "91 22 8:1 / /data rw - ext4 /dev/sda1 rw\n"
    "92 90 0:70 / /mnt rw - tmpfs none rw\n"
    "not a mountinfo line\n"
    "93 22 x:1 / /bad rw - ext4 /dev/x rw\n")


def test_parse_fields_escapes_and_optional_fields():
    table = MountTable(MOUNTINFO)
    assert [m.mount_id for m in table.mounts] == [22, 36, 78, 90, 91, 92]  # bad lines skipped
    bpf = table.by_id(36)
    assert bpf == Mount(36, 22, (0, 32), "/", "/sys/fs/bpf", "rw,nosuid", "bpf", "bpf", "rw,mode=700")
    assert table.by_id(78).point == "/tmp/my dir" and table.by_id(78).kernel_dev == 63
    assert table.by_id(90).kernel_dev == (8 << 20) | 1 and table.by_id(90).root == "/sub"
    assert table.by_id(5) is None  # a table parsed from text never reads /proc
    assert unescape("a\\011b\\134c\\012") == "a\tb\\c\n"


def test_questions_the_callers_ask():
    table = MountTable(MOUNTINFO)
    assert table.points("ext4") == ["/mnt", "/data"] and table.has("/sys/fs/bpf", "bpf")
    assert not table.has("/sys/fs/bpf", "tracefs")
    assert table.containing("/sys/fs/bpf/ebpfkit/x").mount_id == 36
    assert table.containing("/sys/fs/bpfx").mount_id == 22  # a prefix of a name is no parent
    assert table.containing("/mnt/a").fstype == "tmpfs"  # mounted over /mnt later: it wins
    assert table.containing("/tmp/my dir/f").fstype == "overlay"
    assert table.of_device((8, 1)).point == "/data"  # the whole filesystem beats a bind mount
    assert table.of_device((9, 9)) is None


def test_this_machines_table_against_stat():
    table = MountTable()
    assert table.has("/proc", "proc") and table.has("/sys", "sysfs")
    proc = table.containing("/proc/self/status")
    assert proc.point == "/proc" and proc.fstype == "proc"
    for path in ("/", "/proc", "/sys"):
        assert table.containing(path).number == decode_user_dev(os.stat(path).st_dev), path
    # the mount id the kernel gives an open file is a line of the table
    fd = os.open("/proc", os.O_PATH)
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            mnt_id = int(next(line for line in f if line.startswith("mnt_id:")).split()[1])
    finally:
        os.close(fd)
    assert table.by_id(mnt_id) == proc
    assert mounts.mounted("/proc", "proc") and not mounts.mounted("/proc", "ext4")
    assert features.mounted_bpffs() in (None, *table.points("bpf"))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_new_mount_is_seen_with_its_name_unescaped(tmp_path):
    point = tmp_path / "a dir\twith\\escapes"
    point.mkdir()
    table = MountTable()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0711", "ebpfkit-test", str(point)], check=True)
    try:
        fd = os.open(point, os.O_PATH)
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                mnt_id = int(next(line for line in f if line.startswith("mnt_id:")).split()[1])
        finally:
            os.close(fd)
        mount = table.by_id(mnt_id)  # not in the table yet: read again
        assert mount is not None and mount.point == str(point)
        assert (mount.fstype, mount.source) == ("tmpfs", "ebpfkit-test")
        assert "size=1024k" in mount.super_options and "mode=711" in mount.super_options
        assert mount.number == decode_user_dev(os.stat(point).st_dev)
        assert MountTable().containing(str(point / "file")) == mount
    finally:
        subprocess.run(["umount", str(point)], check=True)
    assert MountTable().containing(str(point)).point != str(point)


def test_parse_mountinfo_is_the_tables_parser():
    assert parse_mountinfo(MOUNTINFO) == MountTable(MOUNTINFO).mounts
