"""BPF_PROG_TEST_RUN: run a loaded program on given input inside the kernel, no hook needed."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from ..errors import EbpfkitError, NotSupportedError
from . import _libbpf as L


@dataclass
class TestRunResult:
    retval: int
    data: bytes
    duration_ns: int  # average per repetition, measured by the kernel

    __test__ = False  # not a pytest test class


def test_run(prog_fd: int, name: str, data: bytes = b"", ctx: bytes | None = None, repeat: int = 1,
             data_out_size: int | None = None) -> TestRunResult:
    out_size = data_out_size if data_out_size is not None else max(len(data) + 256, 256)
    data_in = ctypes.create_string_buffer(data, len(data)) if data else None
    data_out = ctypes.create_string_buffer(out_size) if out_size else None
    ctx_in = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
    opts = L.bpf_test_run_opts(
        data_in=ctypes.cast(data_in, ctypes.c_void_p) if data_in else None, data_size_in=len(data),
        data_out=ctypes.cast(data_out, ctypes.c_void_p) if data_out else None, data_size_out=out_size,
        ctx_in=ctypes.cast(ctx_in, ctypes.c_void_p) if ctx_in else None,
        ctx_size_in=len(ctx) if ctx else 0, repeat=repeat)
    err = L.lib.bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if err:
        if abs(err) in (95, 524):
            raise NotSupportedError("test_run", f"program '{name}' cannot be test-run on this kernel")
        raise EbpfkitError(f"test run of '{name}' failed: {os.strerror(abs(err))}")
    out = data_out.raw[:opts.data_size_out] if data_out else b""
    return TestRunResult(opts.retval, out, opts.duration)
