"""Extent maps (FS_IOC_FIEMAP): where a file's bytes are on its device. This is the
"layer mapping table" that takes a syscall's (inode, offset, length) to disk sectors.

``FileTracker`` holds the files the traced processes touched: it opens each one through
/proc/PID/fd/N when first seen (the process may close or delete it before the recording
ends) and maps them all at the end, once their blocks are allocated."""

from __future__ import annotations

import fcntl
import os
import struct

from ...sysinfo.devices import decode_user_dev, dev_str, parse_dev
from ...sysinfo.mounts import MountTable
from .fileformat import Extent, FileMap

FS_IOC_FIEMAP = 0xC020660B  # _IOWR('f', 11, struct fiemap)
_HEADER = struct.Struct("=QQIIII")  # fm_start, fm_length, fm_flags, fm_mapped_extents, fm_extent_count, reserved
_EXTENT = struct.Struct("=QQQQQIIII")  # fe_logical, fe_physical, fe_length, 2 reserved, fe_flags, 3 reserved
FIEMAP_MAX_OFFSET = (1 << 64) - 1

EXTENT_LAST = 0x1
EXTENT_UNKNOWN = 0x2
EXTENT_DELALLOC = 0x4
EXTENT_ENCODED = 0x8
EXTENT_NOT_ALIGNED = 0x100
EXTENT_DATA_INLINE = 0x200
EXTENT_DATA_TAIL = 0x400
EXTENT_UNWRITTEN = 0x800
# extents whose physical offset is no disk address (not allocated yet, packed, compressed)
UNMAPPABLE = (EXTENT_UNKNOWN | EXTENT_DELALLOC | EXTENT_ENCODED | EXTENT_NOT_ALIGNED
              | EXTENT_DATA_INLINE | EXTENT_DATA_TAIL)


def fiemap(fd: int, batch: int = 256) -> list[Extent]:
    """Every extent of the open file ``fd``, in logical order (OSError if the filesystem
    can't say, e.g. EOPNOTSUPP on tmpfs). Does not sync: delayed-allocation extents show
    as such, and no IO is started."""
    extents: list[Extent] = []
    start = 0
    while True:
        buf = bytearray(_HEADER.size + batch * _EXTENT.size)
        _HEADER.pack_into(buf, 0, start, FIEMAP_MAX_OFFSET - start, 0, 0, batch, 0)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
        mapped = _HEADER.unpack_from(buf, 0)[3]
        last = False
        for i in range(mapped):
            logical, physical, length, _, _, flags, *_ = _EXTENT.unpack_from(buf, _HEADER.size + i * _EXTENT.size)
            extents.append(Extent(logical, physical, length, flags))
            last = bool(flags & EXTENT_LAST)
        if not mapped or last or mapped < batch:
            return extents
        start = extents[-1].logical + extents[-1].length


class FileTracker:
    """The files of a recording: ``see()`` each syscall's file, ``finish()`` for the maps.

    A file is opened through /proc/PID/fd/N when first seen and kept open (it may be
    deleted before the end). If that fails (the process closed it first), ``finish()``
    opens it by file handle: inode + generation on its filesystem's mount."""

    def __init__(self, max_open: int | None = None):
        if max_open is None:
            max_open = max(0, min(2048, _nofile_limit() - 128))
        self.max_open = max_open
        self._open = 0  # fds kept
        self._files: dict[tuple[str, int], _Seen] = {}

    def __len__(self):
        return len(self._files)

    def see(self, pid: int, fd: int, dev: str, ino: int, gen: int = 0) -> None:
        """Note the file behind pid's fd, the first time (dev, ino) appears."""
        key = (dev, ino)
        if key in self._files:
            return
        seen = self._files[key] = _Seen(gen)
        link = f"/proc/{pid}/fd/{fd}"
        try:
            path = os.readlink(link)
            if self._open >= self.max_open:
                seen.path = path  # mapped by handle or path at the end
                return
            handle = os.open(link, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            seen.error = f"could not open it through {link}: {exc.strerror}"
            return
        if _same_file(handle, dev, ino):
            seen.fd, seen.path = handle, path
            self._open += 1
        else:  # the fd already names another file
            os.close(handle)
            seen.error = "the process closed it before it could be opened"

    def finish(self) -> list[FileMap]:
        """Map every file seen and close the fds."""
        maps = []
        mounts = MountTable()
        for (dev, ino), seen in self._files.items():
            m = FileMap(dev, ino, seen.path)
            fd, seen.fd = seen.fd, None
            try:
                if fd is None:
                    fd = _open_by_handle(_mount_point(mounts, dev), ino, seen.gen)
                    if fd is not None and m.path is None:
                        m.path = os.readlink(f"/proc/self/fd/{fd}")
                if fd is None:
                    m.error = seen.error or "it could not be opened again"
                else:
                    m.extents = fiemap(fd)
            except OSError as exc:
                m.error = f"FIEMAP failed: {exc.strerror or exc}"
            finally:
                if fd is not None:
                    os.close(fd)
            maps.append(m)
        self.close()
        return maps

    def close(self) -> None:
        for seen in self._files.values():
            if seen.fd is not None:
                os.close(seen.fd)
        self._files.clear()
        self._open = 0


class _Seen:
    __slots__ = ("gen", "fd", "path", "error")

    def __init__(self, gen: int):
        self.gen, self.fd, self.path, self.error = gen, None, None, None


def _same_file(fd: int, dev: str, ino: int) -> bool:
    st = os.fstat(fd)
    return dev_str(decode_user_dev(st.st_dev)) == dev and st.st_ino == ino


def _nofile_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _mount_point(table: MountTable, dev: str) -> str | None:
    """A mount point of the filesystem on "major:minor" (its root, if mounted whole)."""
    mount = table.of_device(parse_dev(dev))
    return mount.point if mount else None


FILEID_INO32_GEN = 1  # the handle ext4, xfs (32-bit inodes) and others decode: (ino, gen)


def _open_by_handle(mount: str | None, ino: int, gen: int) -> int | None:
    """open_by_handle_at() of (ino, gen) on the filesystem mounted at ``mount``; None if the
    kernel or the filesystem can't (needs CAP_DAC_READ_SEARCH)."""
    import ctypes

    if mount is None or ino >= 1 << 32:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    handle = struct.pack("=IiII", 8, FILEID_INO32_GEN, ino, gen)
    buf = ctypes.create_string_buffer(handle, len(handle))
    try:
        mount_fd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # O_PATH: EBADF
    except OSError:
        return None
    try:
        fd = libc.open_by_handle_at(mount_fd, buf, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    finally:
        os.close(mount_fd)
    return fd if fd >= 0 else None
