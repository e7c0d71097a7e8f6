"""Files as the kernel names them, found from user space: the (device, inode) a BPF program
sees behind a path, and the paths of a process's open files (the fallback when a BPF program
could not resolve one)."""

from __future__ import annotations

import ctypes
import os
import re

from .devices import decode_user_dev, kernel_dev_of_stat
from .mounts import Mount, MountTable


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


_INOTIFY_WATCH = re.compile(r"^inotify wd:\S+ ino:([0-9a-f]+) sdev:([0-9a-f]+)", re.M)
IN_DELETE_SELF = 0x400  # any mask will do: the watch lives only long enough to read fdinfo


def _inode_by_inotify(path: str) -> tuple[int, int] | None:
    """(s_dev, i_ino) of the inode behind ``path`` from an inotify watch's fdinfo, which has
    printed the watched inode's as the kernel holds them since 3.8 (fdinfo of an ordinary fd
    has `ino` only since 5.14). None if inotify is not available here."""
    libc = ctypes.CDLL(None, use_errno=True)
    ifd = libc.inotify_init1(os.O_CLOEXEC)
    if ifd < 0:
        return None
    try:
        if libc.inotify_add_watch(ifd, os.fsencode(path), IN_DELETE_SELF) < 0:
            return None
        with open(f"/proc/self/fdinfo/{ifd}") as f:
            found = _INOTIFY_WATCH.search(f.read())
        return (int(found.group(2), 16), int(found.group(1), 16)) if found else None
    except OSError:
        return None
    finally:
        os.close(ifd)


def _fdinfo(fd: int) -> dict:
    with open(f"/proc/self/fdinfo/{fd}") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


def inode_of(path: str, table: MountTable | None = None) -> tuple[tuple[int, int], Mount | None]:
    """((s_dev, i_ino) of the inode the kernel reaches through ``path``, its mount).

    What a BPF program reads from an inode (``i_sb->s_dev``, ``i_ino``), which stat() does not
    always report (overlayfs gives a layer's or a pseudo device, btrfs a per-subvolume one):
    the path is opened O_PATH and the kernel's view read back, the inode number from
    /proc/self/fdinfo and the superblock's device from the mount's line in mountinfo."""
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)  # no file_open hook, no read permission
    try:
        try:
            info = _fdinfo(fd)
            ino, mnt_id = int(info["ino"]), int(info["mnt_id"])
        except (OSError, KeyError, ValueError):  # no /proc, or a kernel before 5.14
            watched = _inode_by_inotify(path)
            if watched:
                return watched, None
            st = os.fstat(fd)
            return (kernel_dev_of_stat(st.st_dev), st.st_ino), None
        mount = (table or MountTable()).by_id(mnt_id)
        if mount is None:
            st = os.fstat(fd)
            return (kernel_dev_of_stat(st.st_dev), ino), None
        return (mount.kernel_dev, ino), mount
    finally:
        os.close(fd)
