"""The runtime engine: compile (clang + kernel BTF), open, configure, load, attach.

It knows nothing of ebpfkit's tools. Typical use::

    spec = compile("runqlat.bpf.c")           # a file, or compile(text=C_SOURCE)
    spec.rodata["targ_tgid"] = 1234           # read-only config, before load
    with spec.load() as obj:
        obj.attach()                          # auto-attach from SEC() names
        hist = obj.maps["hist"].log2_histogram(unit="usecs")
"""

from __future__ import annotations

import os


def compile(path: str | os.PathLike | None = None, *, text: str | bytes | None = None,
            name: str | None = None, cflags=(), btf: str | None = None):
    """Compile C (a file, one of ebpfkit's programs by name, or ``text``) and open the object.

    Returns an ``ObjectSpec``: set ``.rodata`` config and map sizes, then ``.load()``.
    """
    from .btf import find_kernel_btf
    from .compiler import Compiler, Source
    from .object import ObjectSpec

    if (path is None) == (text is None):
        raise TypeError("compile() takes a path or text=, not both")
    source = Source.from_text(text, name or "snippet.bpf.c") if text is not None else Source.from_path(path)
    kernel_btf = find_kernel_btf(btf)
    obj_path = Compiler(btf=kernel_btf, cflags=tuple(cflags)).compile(source)
    return ObjectSpec(obj_path, name=(name or source.name).split(".")[0],
                      btf_path=kernel_btf.path if kernel_btf.custom else None)


def open_object(path: str | os.PathLike, name: str | None = None, btf: str | None = None):
    """Open an already compiled object file (.o) as an ``ObjectSpec``; CO-RE relocates it
    against ``btf``, else $EBPFKIT_BTF (--btf), else the running kernel's BTF."""
    from .btf import usable_btf_file, user_btf_path
    from .object import ObjectSpec

    btf = btf or user_btf_path()
    if btf:
        btf = usable_btf_file(btf)
    return ObjectSpec(path, name=name, btf_path=btf)


def kernel_enum(enumerator: str, btf: str | None = None) -> dict[str, int]:
    """The enumerators ({name: value}, in order) of the kernel's enum that declares
    ``enumerator``: found by a member, so anonymous enums too (``kernel_enum("NR_SOFTIRQS")``
    gives HI_SOFTIRQ=0 ... NR_SOFTIRQS). Read from the kernel's BTF (or ``btf``, else
    $EBPFKIT_BTF); ``{}`` when it declares no such enumerator."""
    from .btf import find_kernel_btf
    from .slimheader import _ENUM, _ENUM64, KernelTypes

    with KernelTypes(find_kernel_btf(btf, for_compiling=False)) as types:
        for type_id in types.ids(enumerator.encode()):
            if types.kind(type_id) in (_ENUM, _ENUM64):
                return types.enumerators(type_id)
    return {}


def kernel_struct_members(name: str, btf: str | None = None) -> list[str]:
    """The member names of the kernel's ``struct name`` (``[]`` when it has none such),
    from the kernel's BTF (or ``btf``, else $EBPFKIT_BTF)."""
    from .btf import find_kernel_btf
    from .slimheader import _STRUCT, KernelTypes

    with KernelTypes(find_kernel_btf(btf, for_compiling=False)) as types:
        type_id = types.find(name.encode(), _STRUCT)
        return [] if type_id <= 0 else [m.decode() for m, _ in types.members(type_id)]


def load(source, config: dict | None = None, **compile_args):
    """Compile (for .c) or open (for .o) ``source`` and load it: ``Object``."""
    from .object import ObjectSpec

    if isinstance(source, ObjectSpec):
        return source.load(config)
    if os.fspath(source).endswith(".o"):
        return open_object(source).load(config)
    return compile(source, **compile_args).load(config)


class run_time_stats:
    """The kernel's run-time statistics of every BPF program (``Program.info().run_time_ns``
    and ``run_cnt``) for a ``with`` block. BPF_ENABLE_STATS holds them on while its fd is
    open, so they go off again even if the process is killed. Each run then pays for two
    clock reads, which the figures include."""

    def __enter__(self):
        from ..errors import NotSupportedError
        from . import _libbpf as L

        self.fd = L.lib.bpf_enable_stats(0)  # BPF_STATS_RUN_TIME
        if self.fd < 0:
            raise NotSupportedError("run-time statistics", f"BPF_ENABLE_STATS failed: {os.strerror(-self.fd)}")
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def run_time(programs, workload) -> tuple[int, int]:
    """(ns, runs) the kernel's run-time statistics add up for ``programs`` while
    ``workload()`` runs, with the statistics on just for it."""
    programs = list(programs)
    with run_time_stats():
        before = [p.info() for p in programs]
        workload()
        after = [p.info() for p in programs]
    return (sum(a.run_time_ns - b.run_time_ns for a, b in zip(after, before)),
            sum(a.run_cnt - b.run_cnt for a, b in zip(after, before)))
