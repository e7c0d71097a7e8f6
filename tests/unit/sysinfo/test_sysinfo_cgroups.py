"""cgroup v2 facts (sysinfo.cgroups) against the kernel's own answers: a cgroup's id as the
kernel hands it out (its file handle on cgroupfs), and /proc/<pid>/cgroup."""

import ctypes
import os
import struct

import pytest

from ebpfkit.net import ChildCgroup
from ebpfkit.sysinfo.cgroups import cgroup2_mount, cgroup_id, cgroup_path, process_cgroup
from ebpfkit.sysinfo.containers import CgroupPaths
from ebpfkit.sysinfo.mounts import MountTable
from helpers import wait_for

AT_FDCWD = -100


def _kernel_cgroup_id(path: str) -> tuple[int, int]:
    """(cgroup id, mount id) from name_to_handle_at(2): cgroupfs (kernfs) hands out the
    64-bit cgroup id as the file handle, the number bpf_get_current_cgroup_id() returns."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(struct.pack("=Ii", 128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, path.encode(), buf, ctypes.byref(mount_id), 0) != 0:
        raise OSError(ctypes.get_errno(), f"name_to_handle_at({path})")
    size, _ = struct.unpack_from("=Ii", buf.raw)
    assert size == 8, f"a kernfs handle is 8 bytes, got {size}"
    return struct.unpack_from("=Q", buf.raw, 8)[0], mount_id.value


@pytest.fixture
def child():
    if cgroup2_mount() is None:
        pytest.skip("no cgroup v2 hierarchy mounted")
    with ChildCgroup("sysinfo-test") as cg:
        yield cg


def test_cgroup2_mount_is_the_tables():
    table = MountTable()
    point = cgroup2_mount()
    assert point == (table.points("cgroup2") or [None])[0]
    if point:
        assert table.containing(point).fstype == "cgroup2"


def test_a_child_cgroups_id_is_the_kernels(child):
    kernel_id, mount_id = _kernel_cgroup_id(child.path)
    assert cgroup_id(child.path) == kernel_id == os.stat(child.path).st_ino
    assert MountTable().by_id(mount_id).point == cgroup2_mount()
    assert cgroup_path(kernel_id) == child.path
    rel = "/" + os.path.relpath(child.path, cgroup2_mount())
    assert CgroupPaths().path(kernel_id) == rel


def test_a_process_is_found_in_the_cgroup_it_was_put_in(child):
    proc = child.popen(["sleep", "30"])
    try:
        assert wait_for(lambda: proc.pid in child.procs()), "the child never joined its cgroup"
        assert process_cgroup(proc.pid) == child.path
        with open(f"/proc/{proc.pid}/cgroup") as f:
            line = next(line for line in f if line.startswith("0::"))
        assert os.path.join(cgroup2_mount(), line[3:].strip().lstrip("/")) == child.path
    finally:
        proc.kill()
        proc.wait()
    assert process_cgroup() != child.path  # this process stayed where it was


def test_an_unknown_id_has_no_path(child):
    assert cgroup_path(cgroup_id(child.path) + 10**12) is None
