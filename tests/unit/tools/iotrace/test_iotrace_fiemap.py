"""The layer mapping table's sources: FIEMAP on a real file, and block devices from sysfs."""

from __future__ import annotations

import errno
import os

import pytest

from ebpfkit.tools.iotrace import devices
from ebpfkit.tools.iotrace.fiemap import EXTENT_LAST, FileTracker, fiemap


@pytest.fixture
def written_file(tmp_path):
    path = tmp_path / "data"
    with open(path, "wb") as f:
        f.write(os.urandom(256 * 1024))
        f.flush()
        os.fsync(f.fileno())  # allocated: real extents, not delalloc
    fd = os.open(path, os.O_RDONLY)
    try:
        fiemap(fd)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL):
            pytest.skip(f"{tmp_path} is on a filesystem without FIEMAP")
        raise
    finally:
        os.close(fd)
    return path


def test_fiemap_covers_the_file(written_file):
    fd = os.open(written_file, os.O_RDONLY)
    try:
        ext = fiemap(fd, batch=1)  # one extent per call: exercises the continuation
    finally:
        os.close(fd)
    assert ext and ext[-1].flags & EXTENT_LAST
    assert sum(e.length for e in ext) >= 256 * 1024
    assert [e.logical for e in ext] == sorted(e.logical for e in ext)


def test_tracker_maps_files_seen_through_proc(written_file):
    st = os.stat(written_file)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    fd = os.open(written_file, os.O_RDONLY)
    tracker = FileTracker()
    try:
        tracker.see(os.getpid(), fd, dev, st.st_ino)
        tracker.see(os.getpid(), fd, dev, st.st_ino)  # once per file
        assert len(tracker) == 1
    finally:
        os.close(fd)
    (m,) = tracker.finish()  # the fd the tracker kept outlives ours
    assert m.path == str(written_file) and m.extents and m.error is None
    assert len(tracker) == 0


def test_tracker_reports_a_file_it_cannot_open():
    tracker = FileTracker()
    tracker.see(2 ** 22 + 12345, 3, "0:0", 1)  # no such process, and no mount to open it by handle
    (m,) = tracker.finish()
    assert not m.extents and "could not open" in m.error


def test_tracker_checks_the_fd_still_names_the_file(written_file, tmp_path):
    other = tmp_path / "other"
    other.write_bytes(b"x")
    st = os.stat(written_file)
    fd = os.open(other, os.O_RDONLY)  # the fd now names another file
    try:
        tracker = FileTracker()
        tracker.see(os.getpid(), fd, f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino + 10**9)
    finally:
        os.close(fd)
    (m,) = tracker.finish()
    assert not m.extents and m.error


def test_describe_a_disk_for_the_record():
    names = sorted(os.listdir("/sys/block"))
    if not names:
        pytest.skip("no block device in sysfs")
    with open(f"/sys/block/{names[0]}/dev") as f:
        dev = f.read().strip()
    info = devices.device_info(dev)
    assert (info.dev, info.name, info.disk, info.start_sector) == (dev, names[0], dev, 0)
    assert devices.device_info("0:9999") is None  # no block device: tmpfs, overlayfs...
    assert devices.device_info("garbage") is None
