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
