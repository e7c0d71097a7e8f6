"""Files of processes, found from user space: the fallback when a BPF program could not
resolve a file's path."""

from __future__ import annotations

import os

from .devices import decode_user_dev


def fd_paths(pid: int) -> dict[tuple[int, int, int], str]:
    """(major, minor, inode) -> path of every file process ``pid`` has open (empty if the
    process is gone or not ours to look at)."""
    fd_dir = f"/proc/{pid}/fd"
    found = {}
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return found
    for fd in fds:
        link = os.path.join(fd_dir, fd)
        try:
            st = os.stat(link)  # follows the link to the open file itself
            target = os.readlink(link)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("/"):  # not "pipe:[..]", "socket:[..]", "anon_inode:..."
            found[(*decode_user_dev(st.st_dev), st.st_ino)] = target
    return found
