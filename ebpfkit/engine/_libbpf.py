"""ctypes bindings for libbpf.so.1 (>= 1.0) and the few libc calls the engine needs.

This is the only module that loads a shared library. Everything here is private to
``ebpfkit.engine``: other modules call ``lib.<function>`` with the prototypes declared
below and turn failures into ebpfkit errors.

libbpf >= 1.0 reports errors as negative return values (int functions) or NULL plus
``errno`` (pointer functions); ``use_errno=True`` lets us read that errno safely.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE, POINTER, Structure, Union, c_bool, c_char, c_char_p, c_int, c_long, c_size_t,
    c_uint, c_uint8, c_uint32, c_uint64, c_ulong, c_void_p,
)

from ..errors import NotSupportedError
from ._log import DEBUG, INFO, WARNING, get_logger

MIN_VERSION = (1, 0)

c_u32 = c_uint32
c_u64 = c_uint64


def _load_libbpf() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libbpf.so.1", use_errno=True)
    except OSError as exc:
        last = exc
    from ctypes.util import find_library  # spawns ldconfig: only when the usual name fails

    for name in (find_library("bpf"), "libbpf.so"):
        try:
            return ctypes.CDLL(name, use_errno=True)
        except (OSError, TypeError) as exc:
            last = exc
    raise NotSupportedError(
        "libbpf", f"libbpf.so.1 could not be loaded ({last})",
        hint="install libbpf 1.x: apt-get install libbpf1 (Debian/Ubuntu) or dnf install libbpf")


lib = _load_libbpf()
libc = ctypes.CDLL(None, use_errno=True)


# --- option structs (each begins with sz; libbpf accepts a smaller sz from older callers) ---

class _Opts(Structure):
    """Base for libbpf *_opts structs: fills in ``sz`` automatically."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.sz = ctypes.sizeof(self)


class bpf_object_open_opts(_Opts):
    _fields_ = [
        ("sz", c_size_t),
        ("object_name", c_char_p),
        ("relaxed_maps", c_bool),
        ("pin_root_path", c_char_p),
        ("_attach_prog_fd", c_u32),
        ("kconfig", c_char_p),
        ("btf_custom_path", c_char_p),
        ("kernel_log_buf", c_void_p),
        ("kernel_log_size", c_size_t),
        ("kernel_log_level", c_u32),
    ]


class bpf_uprobe_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("ref_ctr_offset", c_size_t), ("bpf_cookie", c_u64),
                ("retprobe", c_bool), ("func_name", c_char_p)]


class bpf_usdt_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("usdt_cookie", c_u64)]


class bpf_kprobe_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("bpf_cookie", c_u64), ("offset", c_size_t), ("retprobe", c_bool)]


class bpf_perf_event_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("bpf_cookie", c_u64)]


class bpf_prog_load_opts(_Opts):
    _fields_ = [
        ("sz", c_size_t), ("attempts", c_int), ("expected_attach_type", c_uint),
        ("prog_btf_fd", c_u32), ("prog_flags", c_u32), ("prog_ifindex", c_u32),
        ("kern_version", c_u32), ("attach_btf_id", c_u32), ("attach_prog_fd", c_u32),
        ("attach_btf_obj_fd", c_u32), ("fd_array", c_void_p),
        ("func_info", c_void_p), ("func_info_cnt", c_u32), ("func_info_rec_size", c_u32),
        ("line_info", c_void_p), ("line_info_cnt", c_u32), ("line_info_rec_size", c_u32),
        ("log_level", c_u32), ("log_size", c_u32), ("log_buf", c_void_p),
    ]


class _link_create_target(Union):
    _fields_ = [("perf_event_cookie", c_u64), ("_pad", c_u64 * 5)]


class bpf_link_create_opts(_Opts):
    _fields_ = [
        ("sz", c_size_t), ("flags", c_u32), ("iter_info", c_void_p), ("iter_info_len", c_u32),
        ("target_btf_id", c_u32), ("u", _link_create_target),
    ]


class bpf_attr_uprobe_multi(Structure):
    """The BPF_LINK_CREATE attr for BPF_TRACE_UPROBE_MULTI (kernel 6.6): libbpf 1.1's
    bpf_link_create() predates it, so the engine makes that one bpf() call itself. Padded to
    the size of the kernel's union bpf_attr part it reads (the rest must be zero)."""
    _fields_ = [
        ("prog_fd", c_u32), ("target_fd", c_u32), ("attach_type", c_u32), ("flags", c_u32),
        ("path", c_u64), ("offsets", c_u64), ("ref_ctr_offsets", c_u64), ("cookies", c_u64),
        ("cnt", c_u32), ("multi_flags", c_u32), ("pid", c_u32), ("_pad", c_u32 * 15),
    ]


BPF_LINK_CREATE = 28
BPF_F_UPROBE_MULTI_RETURN = 1
_NR_BPF = {"x86_64": 321, "aarch64": 280, "s390x": 351, "ppc64le": 361, "riscv64": 280}


def bpf_syscall(cmd: int, attr: Structure) -> int:
    """bpf(cmd, attr): the result, or -errno (as libbpf's own calls return)."""
    nr = _NR_BPF.get(os.uname().machine)
    if nr is None:
        return -38  # ENOSYS: not wired up for this architecture
    ret = libc.syscall(nr, ctypes.c_int(cmd), ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr)))
    return ret if ret >= 0 else -ctypes.get_errno()


class bpf_map_batch_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("elem_flags", c_u64), ("flags", c_u64)]


class bpf_map_create_opts(_Opts):
    _fields_ = [
        ("sz", c_size_t), ("btf_fd", c_u32), ("btf_key_type_id", c_u32),
        ("btf_value_type_id", c_u32), ("btf_vmlinux_value_type_id", c_u32),
        ("inner_map_fd", c_u32), ("map_flags", c_u32), ("map_extra", c_u64),
        ("numa_node", c_u32), ("map_ifindex", c_u32),
    ]


class bpf_test_run_opts(_Opts):
    _fields_ = [
        ("sz", c_size_t), ("data_in", c_void_p), ("data_out", c_void_p),
        ("data_size_in", c_u32), ("data_size_out", c_u32), ("ctx_in", c_void_p),
        ("ctx_out", c_void_p), ("ctx_size_in", c_u32), ("ctx_size_out", c_u32),
        ("retval", c_u32), ("repeat", c_int), ("duration", c_u32), ("flags", c_u32),
        ("cpu", c_u32), ("batch_size", c_u32),
    ]


class bpf_tc_hook(_Opts):
    _fields_ = [("sz", c_size_t), ("ifindex", c_int), ("attach_point", c_uint), ("parent", c_u32)]


class bpf_tc_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("prog_fd", c_int), ("flags", c_u32), ("prog_id", c_u32),
                ("handle", c_u32), ("priority", c_u32)]


class bpf_obj_get_opts(_Opts):
    _fields_ = [("sz", c_size_t), ("file_flags", c_u32), ("path_fd", c_int)]


class btf_dump_opts(_Opts):
    _fields_ = [("sz", c_size_t)]


class bpf_prog_info(Structure):
    """The leading part of struct bpf_prog_info (the kernel accepts a shorter buffer)."""
    _fields_ = [
        ("type", c_u32), ("id", c_u32), ("tag", c_uint8 * 8), ("jited_prog_len", c_u32),
        ("xlated_prog_len", c_u32), ("jited_prog_insns", c_u64), ("xlated_prog_insns", c_u64),
        ("load_time", c_u64), ("created_by_uid", c_u32), ("nr_map_ids", c_u32),
        ("map_ids", c_u64), ("name", c_char * 16), ("ifindex", c_u32),
        ("gpl_compatible_and_pad", c_u32), ("netns_dev", c_u64), ("netns_ino", c_u64),
        ("nr_jited_ksyms", c_u32), ("nr_jited_func_lens", c_u32), ("jited_ksyms", c_u64),
        ("jited_func_lens", c_u64), ("btf_id", c_u32), ("func_info_rec_size", c_u32),
        ("func_info", c_u64), ("nr_func_info", c_u32), ("nr_line_info", c_u32),
        ("line_info", c_u64), ("jited_line_info", c_u64), ("nr_jited_line_info", c_u32),
        ("line_info_rec_size", c_u32), ("jited_line_info_rec_size", c_u32),
        ("nr_prog_tags", c_u32), ("prog_tags", c_u64), ("run_time_ns", c_u64),
        ("run_cnt", c_u64), ("recursion_misses", c_u64),
    ]


class bpf_link_info(Structure):
    """The leading part of struct bpf_link_info: type, id and program id."""
    _fields_ = [("type", c_u32), ("id", c_u32), ("prog_id", c_u32), ("_pad", c_u32),
                ("_union", c_u64 * 8)]


class bpf_map_info(Structure):
    _fields_ = [("type", c_u32), ("id", c_u32), ("key_size", c_u32), ("value_size", c_u32),
                ("max_entries", c_u32), ("map_flags", c_u32), ("name", c_char * 16),
                ("ifindex", c_u32), ("btf_vmlinux_value_type_id", c_u32), ("netns_dev", c_u64),
                ("netns_ino", c_u64), ("btf_id", c_u32), ("btf_key_type_id", c_u32),
                ("btf_value_type_id", c_u32), ("btf_vmlinux_id", c_u32), ("map_extra", c_u64)]


# --- callback types ---

print_fn_t = CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
ring_buffer_sample_fn = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)
perf_buffer_sample_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_u32)
perf_buffer_lost_fn = CFUNCTYPE(None, c_void_p, c_int, c_u64)

P = c_void_p  # opaque libbpf objects (struct bpf_object *, bpf_program *, ...)

_PROTOTYPES = {
    # library
    "libbpf_major_version": (c_u32, []),
    "libbpf_minor_version": (c_u32, []),
    "libbpf_set_print": (c_void_p, [print_fn_t]),
    "libbpf_strerror": (c_int, [c_int, c_char_p, c_size_t]),
    "libbpf_probe_bpf_prog_type": (c_int, [c_uint, c_void_p]),
    "libbpf_probe_bpf_map_type": (c_int, [c_uint, c_void_p]),
    "libbpf_probe_bpf_helper": (c_int, [c_uint, c_uint, c_void_p]),
    # object
    "bpf_object__open_mem": (P, [c_void_p, c_size_t, POINTER(bpf_object_open_opts)]),
    "bpf_object__open_file": (P, [c_char_p, POINTER(bpf_object_open_opts)]),
    "bpf_object__load": (c_int, [P]),
    "bpf_object__close": (None, [P]),
    "bpf_object__name": (c_char_p, [P]),
    "bpf_object__btf": (P, [P]),
    "bpf_object__next_program": (P, [P, P]),
    "bpf_object__next_map": (P, [P, P]),
    # program
    "bpf_program__name": (c_char_p, [P]),
    "bpf_program__section_name": (c_char_p, [P]),
    "bpf_program__type": (c_uint, [P]),
    "bpf_program__set_type": (c_int, [P, c_uint]),
    "bpf_program__expected_attach_type": (c_uint, [P]),
    "bpf_program__set_expected_attach_type": (c_int, [P, c_uint]),
    "bpf_program__fd": (c_int, [P]),
    "bpf_program__autoload": (c_bool, [P]),
    "bpf_program__set_autoload": (c_int, [P, c_bool]),
    "bpf_program__set_log_level": (c_int, [P, c_u32]),
    "bpf_program__set_log_buf": (c_int, [P, c_void_p, c_size_t]),
    "bpf_program__set_attach_target": (c_int, [P, c_int, c_char_p]),
    "bpf_program__insn_cnt": (c_size_t, [P]),
    "bpf_program__pin": (c_int, [P, c_char_p]),
    "bpf_program__unpin": (c_int, [P, c_char_p]),
    # attach (each returns struct bpf_link * or NULL with errno)
    "bpf_program__attach": (P, [P]),
    "bpf_program__attach_tracepoint": (P, [P, c_char_p, c_char_p]),
    "bpf_program__attach_raw_tracepoint": (P, [P, c_char_p]),
    "bpf_program__attach_trace": (P, [P]),
    "bpf_program__attach_lsm": (P, [P]),
    "bpf_program__attach_kprobe_opts": (P, [P, c_char_p, POINTER(bpf_kprobe_opts)]),
    "bpf_program__attach_uprobe_opts": (P, [P, c_int, c_char_p, c_size_t, POINTER(bpf_uprobe_opts)]),
    "bpf_program__attach_usdt": (P, [P, c_int, c_char_p, c_char_p, c_char_p, POINTER(bpf_usdt_opts)]),
    "bpf_program__attach_perf_event_opts": (P, [P, c_int, POINTER(bpf_perf_event_opts)]),
    "bpf_program__attach_xdp": (P, [P, c_int]),
    "bpf_program__attach_cgroup": (P, [P, c_int]),
    "bpf_program__attach_netns": (P, [P, c_int]),
    # link
    "bpf_link__fd": (c_int, [P]),
    "bpf_link__pin": (c_int, [P, c_char_p]),
    "bpf_link__unpin": (c_int, [P]),
    "bpf_link__open": (P, [c_char_p]),
    "bpf_link__disconnect": (None, [P]),
    "bpf_link__detach": (c_int, [P]),
    "bpf_link__destroy": (c_int, [P]),
    # map (libbpf view)
    "bpf_map__name": (c_char_p, [P]),
    "bpf_map__type": (c_uint, [P]),
    "bpf_map__key_size": (c_u32, [P]),
    "bpf_map__value_size": (c_u32, [P]),
    "bpf_map__max_entries": (c_u32, [P]),
    "bpf_map__set_max_entries": (c_int, [P, c_u32]),
    "bpf_map__autocreate": (c_bool, [P]),
    "bpf_map__set_autocreate": (c_int, [P, c_bool]),
    "bpf_map__map_flags": (c_u32, [P]),
    "bpf_map__fd": (c_int, [P]),
    "bpf_map__btf_key_type_id": (c_u32, [P]),
    "bpf_map__btf_value_type_id": (c_u32, [P]),
    "bpf_map__initial_value": (c_void_p, [P, POINTER(c_size_t)]),
    "bpf_map__is_internal": (c_bool, [P]),
    "bpf_map__set_pin_path": (c_int, [P, c_char_p]),
    "bpf_map__pin": (c_int, [P, c_char_p]),
    "bpf_map__unpin": (c_int, [P, c_char_p]),
    "bpf_map__reuse_fd": (c_int, [P, c_int]),
    # syscall wrappers (bpf.h)
    "bpf_map_create": (c_int, [c_uint, c_char_p, c_u32, c_u32, c_u32, POINTER(bpf_map_create_opts)]),
    "bpf_map_lookup_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_elem_flags": (c_int, [c_int, c_void_p, c_void_p, c_u64]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, c_u64]),
    "bpf_map_delete_elem": (c_int, [c_int, c_void_p]),
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_and_delete_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_lookup_batch": (c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p,
                                     POINTER(c_u32), POINTER(bpf_map_batch_opts)]),
    "bpf_map_lookup_and_delete_batch": (c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p,
                                                POINTER(c_u32), POINTER(bpf_map_batch_opts)]),
    "bpf_map_update_batch": (c_int, [c_int, c_void_p, c_void_p, POINTER(c_u32),
                                     POINTER(bpf_map_batch_opts)]),
    "bpf_map_delete_batch": (c_int, [c_int, c_void_p, POINTER(c_u32), POINTER(bpf_map_batch_opts)]),
    "bpf_prog_load": (c_int, [c_uint, c_char_p, c_char_p, c_void_p, c_size_t,
                              POINTER(bpf_prog_load_opts)]),
    "bpf_link_create": (c_int, [c_int, c_int, c_uint, POINTER(bpf_link_create_opts)]),
    "bpf_link_detach": (c_int, [c_int]),
    "bpf_raw_tracepoint_open": (c_int, [c_char_p, c_int]),
    "bpf_prog_attach": (c_int, [c_int, c_int, c_uint, c_uint]),
    "bpf_prog_detach2": (c_int, [c_int, c_int, c_uint]),
    "bpf_obj_pin": (c_int, [c_int, c_char_p]),
    "bpf_obj_get": (c_int, [c_char_p]),
    "bpf_obj_get_opts": (c_int, [c_char_p, POINTER(bpf_obj_get_opts)]),
    "bpf_obj_get_info_by_fd": (c_int, [c_int, c_void_p, POINTER(c_u32)]),
    "bpf_prog_get_next_id": (c_int, [c_u32, POINTER(c_u32)]),
    "bpf_link_get_next_id": (c_int, [c_u32, POINTER(c_u32)]),
    "bpf_map_get_next_id": (c_int, [c_u32, POINTER(c_u32)]),
    "bpf_prog_get_fd_by_id": (c_int, [c_u32]),
    "bpf_link_get_fd_by_id": (c_int, [c_u32]),
    "bpf_map_get_fd_by_id": (c_int, [c_u32]),
    "bpf_prog_test_run_opts": (c_int, [c_int, POINTER(bpf_test_run_opts)]),
    "bpf_enable_stats": (c_int, [c_uint]),
    # tc (netlink based, for kernels without tcx links)
    "bpf_tc_hook_create": (c_int, [POINTER(bpf_tc_hook)]),
    "bpf_tc_hook_destroy": (c_int, [POINTER(bpf_tc_hook)]),
    "bpf_tc_attach": (c_int, [POINTER(bpf_tc_hook), POINTER(bpf_tc_opts)]),
    "bpf_tc_detach": (c_int, [POINTER(bpf_tc_hook), POINTER(bpf_tc_opts)]),
    "bpf_tc_query": (c_int, [POINTER(bpf_tc_hook), POINTER(bpf_tc_opts)]),
    # BTF
    "btf__load_vmlinux_btf": (P, []),
    "btf__parse": (P, [c_char_p, c_void_p]),
    "btf__new": (P, [c_void_p, c_u32]),
    "btf__free": (None, [P]),
    "btf__type_cnt": (c_u32, [P]),
    "btf__type_by_id": (c_void_p, [P, c_u32]),
    "btf__raw_data": (c_void_p, [P, POINTER(c_u32)]),
    "btf__find_by_name": (c_int, [P, c_char_p]),
    "btf__find_by_name_kind": (c_int, [P, c_char_p, c_u32]),
    "btf__fd": (c_int, [P]),
    "btf__load_from_kernel_by_id": (P, [c_u32]),
    "btf_dump__new": (P, [P, c_void_p, c_void_p, POINTER(btf_dump_opts)]),
    "btf_dump__dump_type": (c_int, [P, c_u32]),
    "btf_dump__free": (None, [P]),
    # ring and perf buffers
    "ring_buffer__new": (P, [c_int, ring_buffer_sample_fn, c_void_p, c_void_p]),
    "ring_buffer__add": (c_int, [P, c_int, ring_buffer_sample_fn, c_void_p]),
    "ring_buffer__poll": (c_int, [P, c_int]),
    "ring_buffer__consume": (c_int, [P]),
    "ring_buffer__epoll_fd": (c_int, [P]),
    "ring_buffer__free": (None, [P]),
    "perf_buffer__new": (P, [c_int, c_size_t, perf_buffer_sample_fn, perf_buffer_lost_fn,
                             c_void_p, c_void_p]),
    "perf_buffer__poll": (c_int, [P, c_int]),
    "perf_buffer__consume": (c_int, [P]),
    "perf_buffer__epoll_fd": (c_int, [P]),
    "perf_buffer__free": (None, [P]),
}

_LIBC_PROTOTYPES = {
    "fopen": (c_void_p, [c_char_p, c_char_p]),
    "fclose": (c_int, [c_void_p]),
    "fputs": (c_int, [c_char_p, c_void_p]),
    "vsnprintf": (c_int, [c_char_p, c_size_t, c_char_p, c_void_p]),
    "mount": (c_int, [c_char_p, c_char_p, c_char_p, c_ulong, c_void_p]),
    "umount2": (c_int, [c_char_p, c_int]),
    "syscall": (c_long, [c_long]),  # variadic; callers pass extra ctypes-typed arguments
    "close": (c_int, [c_int]),
    "ioctl": (c_int, [c_int, c_ulong, c_ulong]),
    "mmap": (c_void_p, [c_void_p, c_size_t, c_int, c_int, c_int, c_long]),
    "munmap": (c_int, [c_void_p, c_size_t]),
}


def _declare(library: ctypes.CDLL, table: dict) -> None:
    for name, (restype, argtypes) in table.items():
        try:
            fn = getattr(library, name)
        except AttributeError:
            continue  # newer symbol on an older libbpf: callers check has()
        fn.restype = restype
        if name != "syscall":
            fn.argtypes = argtypes


_declare(lib, _PROTOTYPES)
_declare(libc, _LIBC_PROTOTYPES)

# vfprintf(FILE *, const char *, va_list) has the same calling shape as libbpf's
# btf_dump printf callback (void *ctx, const char *fmt, va_list), so btf_dump can
# write straight into a FILE * without a Python callback per printf call.
VFPRINTF_ADDR = ctypes.cast(libc.vfprintf, c_void_p).value


def has(name: str) -> bool:
    """Does the loaded libbpf export ``name``?"""
    return hasattr(lib, name)


BPF_F_RDONLY = 1 << 3


def obj_get(path: bytes, readonly: bool = False) -> int:
    """An fd for the pinned object at ``path`` (read-only if asked), or -errno. A read-only
    fd is what a BPF-LSM policy may grant where it refuses a writable one."""
    if readonly and has("bpf_obj_get_opts"):
        return lib.bpf_obj_get_opts(path, ctypes.byref(bpf_obj_get_opts(file_flags=BPF_F_RDONLY)))
    return lib.bpf_obj_get(path)


def version() -> tuple[int, int]:
    return int(lib.libbpf_major_version()), int(lib.libbpf_minor_version())


def errno() -> int:
    return ctypes.get_errno()


def strerror(err: int) -> str:
    buf = ctypes.create_string_buffer(256)
    lib.libbpf_strerror(-abs(err), buf, len(buf))
    return buf.value.decode(errors="replace")


def _check_version() -> None:
    if not has("libbpf_major_version"):
        raise NotSupportedError("libbpf", "libbpf is older than 1.0",
                                hint="install libbpf >= 1.0 (libbpf1 on Debian 12 / Ubuntu 22.10+)")
    if version() < MIN_VERSION:
        raise NotSupportedError("libbpf", "libbpf %d.%d is older than 1.0" % version(),
                                hint="install libbpf >= 1.0")


_check_version()

# libbpf's messages go to Python logging; WARN/INFO/DEBUG map to logger levels. They are
# formatted with vsnprintf because the arguments arrive as a C va_list.
_log = get_logger("ebpfkit.libbpf")
_LEVELS = {0: WARNING, 1: INFO, 2: DEBUG}
_print_listeners: list = []


@print_fn_t
def _libbpf_print(level, fmt, args):
    pylevel = _LEVELS.get(level, DEBUG)
    if not _print_listeners and not _log.isEnabledFor(pylevel):
        return 0
    buf = ctypes.create_string_buffer(8192)
    libc.vsnprintf(buf, len(buf), fmt, args)
    text = buf.value.decode(errors="replace").rstrip("\n")
    for listener in _print_listeners:
        listener(level, text)
    # libbpf warns loudly about things the engine reports itself (verifier logs, missing
    # features); keep them at DEBUG so a user sees them only with -v -v.
    _log.log(DEBUG if pylevel == WARNING else pylevel, "%s", text)
    return 0


_NO_PRINT = print_fn_t()  # NULL: libbpf prints nothing


def sync_print() -> None:
    """Have libbpf call back only when someone reads its messages: opening an object prints a
    few hundred debug lines, and each call into Python costs microseconds even when dropped."""
    wanted = bool(_print_listeners) or _log.isEnabledFor(INFO)
    lib.libbpf_set_print(_libbpf_print if wanted else _NO_PRINT)


sync_print()


class capture_libbpf_messages:
    """Collect libbpf's messages while the block runs (used to explain a failed load)."""

    def __init__(self):
        self.lines: list[str] = []

    def _listen(self, level, text):
        self.lines.append(text)

    def __enter__(self):
        _print_listeners.append(self._listen)
        sync_print()
        return self

    def __exit__(self, *exc):
        _print_listeners.remove(self._listen)
        sync_print()
        return False
