"""Kernel objects by file descriptor: maps, programs and links that outlive the process
that loaded them (pinned in bpffs), or that belong to an object still loaded.

A persistent tool's later commands (``rules add``, ``status``, ``stop``) work on what an
earlier command pinned, without its libbpf object: ``FdMap`` reads and writes a map with
keys and values as bytes (the tool packs its own layouts), and the functions below open
pins, pin fds, and find, inspect or detach links. ``Map`` does its kernel work through an
``FdMap`` of its own fd, so the two never drift apart.
"""

from __future__ import annotations

import ctypes
import os
import sys

from ..errors import EbpfkitError, MapError, NotSupportedError
from . import _libbpf as L
from .constants import PER_CPU_MAPS, LinkType, MapType

_ARRAYS = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
_NO_BATCH = (22, 95, 524)  # EINVAL, EOPNOTSUPP, ENOTSUPP: the map type has no batch ops


def round8(n: int) -> int:
    return (n + 7) & ~7


class PinError(EbpfkitError):
    """A pin could not be opened or made; ``errno`` says why (ENOENT: nothing pinned there,
    EPERM: a policy such as ebpfkit's guard refuses this caller)."""

    def __init__(self, message: str, errno: int):
        super().__init__(message)
        self.errno = errno


def fill_info(fd: int, out):
    """bpf_obj_get_info_by_fd into ``out`` (a bpf_prog_info, bpf_map_info or bpf_link_info,
    pointers for the kernel's strings already set in it)."""
    size = ctypes.c_uint32(ctypes.sizeof(out))
    err = L.lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(out), ctypes.byref(size))
    if err:
        raise EbpfkitError(f"fd {fd}: no BPF object info ({os.strerror(abs(err))})")
    return out


def info(fd: int, struct_type):
    """bpf_obj_get_info_by_fd into a ``struct_type`` (bpf_prog_info, bpf_map_info, bpf_link_info)."""
    return fill_info(fd, struct_type())


def open_pin(path: str, readonly: bool = False) -> int:
    """An fd for the object pinned at ``path`` (read-only if asked: what a BPF-LSM policy
    may grant where it refuses a writable one). The caller closes it."""
    fd = L.obj_get(os.fsencode(path), readonly)
    if fd < 0:
        raise PinError(f"cannot open pin {path}: {os.strerror(-fd)}", -fd)
    return fd


class KernelProgram:
    """A program the kernel holds, reached by an fd (a pin's): what the attach functions of
    links.py need of a program (``fd``, ``name``, ``info()``), to attach a pinned program
    again where another command loaded it. ``close()`` closes the fd."""

    def __init__(self, fd: int):
        self.fd = fd
        self.name = self.info().name.decode(errors="replace")

    @classmethod
    def open_pinned(cls, path: str) -> "KernelProgram":
        return cls(open_pin(path))

    def info(self) -> L.bpf_prog_info:
        return info(self.fd, L.bpf_prog_info)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def pin(fd: int, path: str) -> None:
    err = L.lib.bpf_obj_pin(fd, os.fsencode(path))
    if err:
        raise PinError(f"cannot pin {path}: {os.strerror(abs(err))}", abs(err))


def _with_pin(path: str, use):
    """``use(fd)`` of the object pinned at ``path`` (the fd closed after), or None when
    nothing is pinned there."""
    try:
        fd = open_pin(path)
    except PinError:
        return None
    try:
        return use(fd)
    finally:
        os.close(fd)


def pinned_prog_id(path: str) -> int | None:
    """The id of the program pinned at ``path``, or None when nothing is pinned there."""
    return _with_pin(path, lambda fd: info(fd, L.bpf_prog_info).id)


def link_info(fd: int) -> L.bpf_link_info:
    """A link's type, id and program id."""
    return info(fd, L.bpf_link_info)


def detach_link(fd: int) -> int:
    """BPF_LINK_DETACH: the link stays (its fds and pins) but no longer runs its program.
    0, or the errno (EOPNOTSUPP for link types that cannot detach; EPERM from a policy)."""
    err = L.lib.bpf_link_detach(fd)
    return abs(err) if err else 0


def prog_detach(prog_fd: int, target_fd: int, attach_type: int) -> int:
    """BPF_PROG_DETACH (what BPF_PROG_ATTACH made, on kernels without a link for it): 0 or errno."""
    err = L.lib.bpf_prog_detach2(prog_fd, target_fd, attach_type)
    return abs(err) if err else 0


def detach_pinned_link(path: str) -> int | None:
    """BPF_LINK_DETACH the link pinned at ``path`` (the pin stays): 0, the errno, or None
    when no link can be opened there."""
    return _with_pin(path, detach_link)


def prog_exists(prog_id: int) -> bool:
    """Whether the program ``prog_id`` is still loaded (a released link frees its program
    in a kernel worker, after the call that dropped the last reference returned)."""
    from . import inventory

    return inventory.program(prog_id) is not None


def pinned_link_prog_id(path: str) -> int | None:
    """The id of the program the link pinned at ``path`` runs (None: no link there)."""
    return _with_pin(path, lambda fd: link_info(fd).prog_id)


# the size of what bpf_link_info's union names a link's target by (cgroup id, netns inode,
# ifindex, map id): the kernel reports 0 there once the link is detached
_TARGET_SIZE = {LinkType.CGROUP: 8, LinkType.NETNS: 4, LinkType.XDP: 4, LinkType.TCX: 4,
                LinkType.NETKIT: 4, LinkType.SOCKMAP: 4}


def link_attached(fd: int) -> bool:
    """Whether the link still runs its program where it was attached. Links whose info
    names no target (tracing, LSM, perf events) count as attached while they exist."""
    link = link_info(fd)
    size = _TARGET_SIZE.get(link.type)
    return size is None or any(ctypes.string_at(ctypes.addressof(link._union), size))


def pinned_link_attached(path: str) -> bool | None:
    """link_attached() of the link pinned at ``path`` (None: no link can be opened there)."""
    return _with_pin(path, link_attached)


def program_maps(prog_id: int) -> dict[str, "FdMap"]:
    """The maps of the process that holds the program ``prog_id``, by (kernel) name, each on
    an fd of its own: how to reach every map of a program that pinned nothing (the kernel
    lists only the maps a program uses). {} when no process holds it."""
    from . import inventory

    for pid in filter(str.isdigit, os.listdir("/proc")):
        held = inventory.held_by(pid)
        if prog_id not in held["prog"]:
            continue
        maps = {}
        for map_id in dict.fromkeys(held["map"]):
            fd = L.lib.bpf_map_get_fd_by_id(map_id)
            if fd >= 0:
                m = FdMap(fd)
                if maps.setdefault(m.name, m) is not m:
                    m.close()  # a second map of that name: the first one found stays
        return maps
    return {}


def detach_links_of(link_type: int, prog_id: int) -> bool:
    """Detach every link of ``link_type`` running ``prog_id`` (the links of a process that
    kept no pin: the kernel would only detach them when their last fd closes). True if any."""
    from . import inventory

    done = False
    for link in inventory.links():
        if link.type != link_type or link.prog_id != prog_id:
            continue
        try:
            fd = inventory.open_by_id("link", link.id)
        except EbpfkitError:  # refused by a policy
            continue
        if fd is None:
            continue  # gone meanwhile
        try:
            done |= detach_link(fd) == 0
        finally:
            os.close(fd)
    return done


class FdMap:
    """One map by fd, keys and values as bytes. Per-CPU values are given and returned for
    every CPU (8-byte aligned each); ``update`` also takes one value for all CPUs.

    ``owned``: ``close()`` closes the fd (a pin opened here); otherwise it belongs to
    someone else (a loaded object's map)."""

    def __init__(self, fd: int, name: str = "", owned: bool = True):
        self.fd, self.owned = fd, owned
        try:
            meta = info(fd, L.bpf_map_info)
        except EbpfkitError:
            raise MapError(f"fd {fd} is not a BPF map") from None
        self.type = map_type(meta.type)
        self.id = meta.id
        self.name = name or meta.name.decode()
        self.key_size, self.value_size = meta.key_size, meta.value_size
        self.max_entries = meta.max_entries
        self.per_cpu = self.type in PER_CPU_MAPS
        if self.per_cpu:
            from .perf import possible_cpus

            self.ncpus = len(possible_cpus())
            self.value_buf_size = round8(self.value_size) * self.ncpus
        else:
            self.ncpus, self.value_buf_size = 1, self.value_size

    @classmethod
    def open_pinned(cls, path: str, readonly: bool = False) -> "FdMap":
        fd = open_pin(path, readonly)
        try:
            return cls(fd, os.path.basename(path))
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def of(cls, engine_map) -> "FdMap":
        """An FdMap on its own duplicate of an engine Map's fd (it outlives the object)."""
        return cls(os.dup(engine_map.fd), engine_map.name)

    def close(self) -> None:
        if self.owned and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<FdMap {self.name} fd={self.fd}>"

    def error(self, op: str, err: int) -> MapError:
        exc = MapError(f"{op} on map '{self.name}' failed: {os.strerror(abs(err))}")
        exc.errno = abs(err)
        return exc

    # --- single elements ---

    def lookup(self, key: bytes) -> bytes | None:
        buf = ctypes.create_string_buffer(self.value_buf_size)
        err = L.lib.bpf_map_lookup_elem(self.fd, key, buf)
        if err:
            if abs(err) == 2:
                return None
            raise self.error("lookup", err)
        return buf.raw

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        err = L.lib.bpf_map_update_elem(self.fd, key, self._full_value(value), flags)
        if err:
            raise self.error("update", err)

    def delete(self, key: bytes) -> bool:
        """False if the key was not there."""
        err = L.lib.bpf_map_delete_elem(self.fd, key)
        if err and abs(err) != 2:
            raise self.error("delete", err)
        return not err

    def _full_value(self, value: bytes) -> bytes:
        """A per-CPU map's value for every CPU from one CPU's value."""
        if self.per_cpu and len(value) == self.value_size and len(value) != self.value_buf_size:
            return value.ljust(round8(self.value_size), b"\0") * self.ncpus
        return value

    def per_cpu_values(self, raw: bytes) -> list[bytes]:
        stride = round8(self.value_size)
        return [raw[i * stride:i * stride + self.value_size] for i in range(self.ncpus)]

    # --- whole map ---

    def iter_keys(self):
        key = ctypes.create_string_buffer(self.key_size)
        nxt = ctypes.create_string_buffer(self.key_size)
        err = L.lib.bpf_map_get_next_key(self.fd, None, nxt)
        while err == 0:
            yield nxt.raw
            ctypes.memmove(key, nxt, self.key_size)
            err = L.lib.bpf_map_get_next_key(self.fd, key, nxt)
        if abs(err) != 2:
            raise self.error("iterate", err)

    def keys(self) -> list[bytes]:
        return list(self.iter_keys())

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every (key, value); batched where the map type allows it."""
        try:
            return self.batch()
        except NotSupportedError:
            return [(k, v) for k in self.iter_keys() if (v := self.lookup(k)) is not None]

    def batch(self, delete: bool = False, chunk: int = 4096, limit: int | None = None) -> list[tuple[bytes, bytes]]:
        """Every (key, value) by BPF_MAP_LOOKUP(_AND_DELETE)_BATCH, a syscall per ``chunk``
        entries; with ``limit``, the first ``limit`` of them in the map's order (an array's
        keys 0..limit-1). NotSupportedError where the kernel has no batch ops for this map."""
        if limit is not None:
            chunk = max(1, min(chunk, limit))
        fn = L.lib.bpf_map_lookup_and_delete_batch if delete else L.lib.bpf_map_lookup_batch
        ks, vs = self.key_size, self.value_buf_size
        keys = ctypes.create_string_buffer(ks * chunk)
        vals = ctypes.create_string_buffer(vs * chunk)
        tok = max(ks, 8)
        in_tok, out_tok = ctypes.create_string_buffer(tok), ctypes.create_string_buffer(tok)
        opts, out, first = L.bpf_map_batch_opts(), [], True
        while True:
            count = ctypes.c_uint32(chunk)
            err = fn(self.fd, None if first else in_tok, out_tok, keys, vals, ctypes.byref(count),
                     ctypes.byref(opts))
            if err and first and abs(err) in _NO_BATCH:
                raise NotSupportedError("map batch", f"batch ops not supported on map '{self.name}'")
            if err and abs(err) != 2:
                raise self.error("batch lookup", err)
            kraw, vraw = keys.raw, vals.raw
            out.extend((kraw[i * ks:(i + 1) * ks], vraw[i * vs:(i + 1) * vs]) for i in range(count.value))
            if err:  # ENOENT: that was the last batch
                return out
            if limit is not None and len(out) >= limit:
                return out[:limit]
            ctypes.memmove(in_tok, out_tok, tok)
            first = False

    def update_many(self, pairs: list[tuple[bytes, bytes]]) -> None:
        """Write many elements: one syscall per few thousand where the kernel can."""
        pairs = [(k, self._full_value(v)) for k, v in pairs]
        for start in range(0, len(pairs), 4096):
            part = pairs[start:start + 4096]
            if not self.update_packed(b"".join(k for k, _ in part), b"".join(v for _, v in part), len(part)):
                for k, v in part:
                    self.update(k, v)

    def update_packed(self, keys: bytes, values: bytes, count: int) -> bool:
        """One BPF_MAP_UPDATE_BATCH of ``count`` packed keys and values (per-CPU values
        already for every CPU). False if the map type has no batch update."""
        opts = L.bpf_map_batch_opts()
        n = ctypes.c_uint32(count)
        err = L.lib.bpf_map_update_batch(self.fd, keys, values, ctypes.byref(n), ctypes.byref(opts))
        # a kernel without the map type's batch op returns before writing the count back (5.10's
        # LPM trie: ENOTSUPP, count as given); one that failed part way wrote how many it did
        if err and abs(err) in _NO_BATCH and n.value in (0, count):
            return False
        if err:
            raise self.error("batch update", err)
        return True

    def delete_many(self, keys) -> None:
        for k in keys:
            self.delete(k)

    def clear(self) -> None:
        """Remove every entry (arrays: set every element to zero)."""
        if self.type in _ARRAYS:
            zero = bytes(self.value_buf_size)
            self.update_many([(i.to_bytes(4, sys.byteorder), zero) for i in range(self.max_entries)])
        else:
            self.delete_many(self.keys())


def map_type(value: int):
    """The MapType of a kernel map type number (the number itself for types newer than ours)."""
    try:
        return MapType(value)
    except ValueError:
        return value
