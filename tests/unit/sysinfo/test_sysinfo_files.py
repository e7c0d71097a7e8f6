"""Open files of a process from /proc/PID/fd (iofsstat's fallback for paths)."""

import os
import socket

from ebpfkit.sysinfo.files import fd_paths


def test_open_files_of_this_process(tmp_path):
    target = tmp_path / "deep" / "dir" / "open.txt"
    target.parent.mkdir(parents=True)
    target.write_text("x")
    st = os.stat(target)
    with open(target), socket.socket():
        found = fd_paths(os.getpid())
    assert found[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] == str(target)
    assert not any(p.startswith("socket:") for p in found.values())


def test_gone_process_has_no_files():
    assert fd_paths(2 ** 22 + 1) == {}  # above pid_max's ceiling


def test_the_inotify_fallback_names_the_inode_as_fdinfo_does(tmp_path):
    """Before 5.14 an fd's fdinfo has no `ino`: inode_of() then reads the kernel's (s_dev,
    i_ino) from an inotify watch. Where both exist they must agree (file, directory, symlink
    followed); a missing path gives None."""
    from ebpfkit.sysinfo.files import _inode_by_inotify, inode_of

    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for path in (tmp_path / "file", tmp_path, tmp_path / "link", "/usr/bin/env"):
        assert _inode_by_inotify(str(path)) == inode_of(str(path))[0], path
    assert _inode_by_inotify(str(tmp_path / "link")) == inode_of(str(tmp_path / "file"))[0]
    assert _inode_by_inotify(str(tmp_path / "missing")) is None
