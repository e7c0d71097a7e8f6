"""A pin set: the kernel objects one user of the engine leaves behind in bpffs, in one
directory under /sys/fs/bpf/ebpfkit/<sub-path>, with one lifecycle.

    ps = PinSet("mytool/eth0").create("filter")    # bpffs mounted if needed
    with ps.locked():                               # changes are serialised (flock)
        obj.pin_maps(ps.path); ps.pin("prog", fd); ps.pin_link("link", link)
        ps.seal()                                   # records what a complete set holds
    ps.state()       # "none", "complete", "partial" or "stale"
    ps.remove()      # detaches its links, unpins everything, removes the directory

The directory also holds a small state record (JSON): what the set is (``kind``, given by
its user), who made it (pid and start time: a reused pid is not its owner), whether it
outlives its owner (``persistent``), and once sealed which pins and links it holds.
bpffs holds no regular files, so the record is the target of a symbolic link named
``state`` (bpffs allows symlinks; it refuses names with a dot).

A set is "partial" when it was never sealed (its maker died, or is still making it) or a
sealed pin is missing; "stale" when it is complete but no longer does anything: a link no
longer runs its program where it was attached (the device or cgroup is gone, someone
detached it), or the owner of a set that should not outlive it has died.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time

from ..errors import EbpfkitError
from . import pinned
from .mounts import BPFFS, PIN_ROOT, ensure_bpffs

STATE = "state"
NONE, COMPLETE, PARTIAL, STALE = "none", "complete", "partial", "stale"


class PinSetBusy(EbpfkitError):
    """Another process holds the set's lock (only when asked not to wait)."""


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if
    there is no such process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def owner_alive(record: dict) -> bool:
    owner = record.get("owner") or {}
    pid = owner.get("pid")
    return bool(pid) and _start_time(pid) == owner.get("start")


@contextlib.contextmanager
def lock(directory: str, blocking: bool = True):
    """An exclusive flock on ``directory`` for the duration (PinSetBusy if not ``blocking``
    and another process holds it). The lock dies with its holder and leaves nothing."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            raise PinSetBusy(f"{directory} is locked by another process") from None
        yield
    finally:
        os.close(fd)


def unpinned_lock(blocking: bool = True):
    """The lock for changes to objects that pinned nothing (found by id): the bpffs root."""
    return lock(ensure_bpffs(), blocking)


class PinSet:
    def __init__(self, sub_path: str):
        parts = sub_path.strip("/").split("/")
        if not sub_path.strip("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"not a pin set path: {sub_path!r}")
        self.sub_path = "/".join(parts)
        self.path = os.path.join(PIN_ROOT, self.sub_path)

    def __repr__(self):
        return f"<PinSet {self.path}>"

    @classmethod
    def under(cls, sub_path: str) -> list["PinSet"]:
        """The sets in the directories directly under ``sub_path``, by name."""
        parent = os.path.join(PIN_ROOT, sub_path)
        try:
            names = sorted(os.listdir(parent))
        except OSError:
            return []
        return [cls(f"{sub_path}/{n}") for n in names if os.path.isdir(os.path.join(parent, n))]

    # --- making it ---

    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def create(self, kind: str, persistent: bool = True, **info) -> "PinSet":
        """Make the directory (mounting bpffs if needed) and its unsealed state record."""
        ensure_bpffs()
        os.makedirs(self.path, exist_ok=True)
        self._write_record({"kind": kind, "persistent": persistent, "created": time.time(),
                            "owner": {"pid": os.getpid(), "start": _start_time(os.getpid())}, **info})
        return self

    def pin(self, name: str, fd: int) -> str:
        """Pin the map or program ``fd`` as ``name``; returns the pin's path."""
        path = os.path.join(self.path, name)
        pinned.pin(fd, path)
        return path

    def pin_link(self, name: str, link) -> str:
        """Pin an engine Link as ``name``; remove() detaches it (newest first)."""
        path = os.path.join(self.path, name)
        link.pin(path)
        record = self.record() or {}
        record["links"] = [*record.get("links", ()), name]  # so that remove() detaches it, sealed or not
        self._write_record(record)
        return path

    def pin_maps(self, obj) -> None:
        """Pin every map of a loaded engine Object under its own name."""
        obj.pin_maps(self.path)

    def seal(self, **info) -> None:
        """Record the set as complete: the pins it holds now, its links, and ``info``."""
        record = self.record() or {}
        record.update(info, pins=self.names())
        self._write_record(record)

    def drop(self, name: str) -> bool:
        """Take one pin out of a set (detaching it first if it is one of its links), the
        record following, sealed or not. True if it was there."""
        path = os.path.join(self.path, name)
        record = self.record() or {}
        if name in record.get("links", ()):
            pinned.detach_pinned_link(path)
            record["links"] = [n for n in record["links"] if n != name]
        if "pins" in record:
            record["pins"] = [n for n in record["pins"] if n != name]
        self._write_record(record)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def _write_record(self, record: dict) -> None:
        new = os.path.join(self.path, STATE + "_new")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(new)
        os.symlink(json.dumps(record, sort_keys=True), new)
        os.rename(new, os.path.join(self.path, STATE))  # readers see the old or the new one

    def locked(self, blocking: bool = True):
        """Serialise changes to the set (the directory must exist)."""
        return lock(self.path, blocking)

    # --- reading it ---

    def record(self) -> dict | None:
        try:
            return json.loads(os.readlink(os.path.join(self.path, STATE)))
        except (OSError, ValueError):
            return None

    def names(self) -> list[str]:
        """The pins in the set (not its state record)."""
        try:
            return sorted(n for n in os.listdir(self.path) if n not in (STATE, STATE + "_new"))
        except FileNotFoundError:
            return []

    def open(self, name: str, readonly: bool = False) -> int:
        """An fd of the pin ``name`` (PinError if there is none); the caller closes it."""
        return pinned.open_pin(os.path.join(self.path, name), readonly)

    def open_map(self, name: str, readonly: bool = False) -> pinned.FdMap:
        return pinned.FdMap.open_pinned(os.path.join(self.path, name), readonly)

    def prog_id(self, name: str) -> int | None:
        """The id of the program pinned as ``name`` (None: nothing there)."""
        return pinned.pinned_prog_id(os.path.join(self.path, name))

    def state(self) -> str:
        """none, partial (unsealed, or a pin gone), stale (a link detached, or the owner of a
        set that should not outlive it gone) or complete."""
        if not self.exists():
            return NONE
        record = self.record()
        if not record or "pins" not in record or set(record["pins"]) - set(self.names()):
            return PARTIAL
        if not record.get("persistent", True) and not owner_alive(record):
            return STALE
        for name in record.get("links", ()):
            if not pinned.pinned_link_attached(os.path.join(self.path, name)):
                return STALE
        return COMPLETE

    # --- removing it ---

    def detach_links(self) -> bool:
        """Detach the set's links, newest first: at once, even if another process holds
        one (their pins stay). True if one of them was attached until then."""
        detached = False
        for name in reversed((self.record() or {}).get("links", ())):
            path = os.path.join(self.path, name)
            was_attached = pinned.pinned_link_attached(path)
            detached |= bool(pinned.detach_pinned_link(path) == 0 and was_attached)
        return detached

    def remove(self) -> bool:
        """Detach the set's links, unpin everything, remove the directory and the parents it
        leaves empty. True if a link was attached until then. PermissionError when a policy
        forbids unpinning."""
        if not self.exists():
            return False
        detached = self.detach_links()
        for name in os.listdir(self.path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, name))
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(self.path)
        self._remove_empty_parents()
        return detached

    def _remove_empty_parents(self) -> None:
        parent = os.path.dirname(self.path)
        while parent.startswith(PIN_ROOT) and parent != BPFFS:
            try:
                os.rmdir(parent)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    break  # not empty: another set lives there
            parent = os.path.dirname(parent)
