"""BPF_PROG_TEST_RUN: run a loaded program on given input inside the kernel, no hook needed.

With ``flags=BPF_F_TEST_XDP_LIVE_FRAMES`` an XDP program's verdicts are carried out (XDP_TX
and XDP_REDIRECT send the frames out of the ctx's ingress interface, XDP_PASS hands them to
the stack), ``batch_size`` frames at a time: a packet generator, such as xdp-trafficgen's."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from ..errors import EbpfkitError, NotSupportedError
from . import _libbpf as L
from .constants import BPF_F_TEST_XDP_LIVE_FRAMES


@dataclass
class TestRunResult:
    retval: int
    data: bytes
    duration_ns: int  # average per repetition, measured by the kernel

    __test__ = False  # not a pytest test class


def _buffer(data: bytes | None):
    return ctypes.create_string_buffer(data, len(data)) if data else None


def _address(buffer):
    return ctypes.cast(buffer, ctypes.c_void_p) if buffer is not None else None


def test_run(prog_fd: int, name: str, data: bytes = b"", ctx: bytes | None = None, repeat: int = 1,
             data_out_size: int | None = None, *, flags: int = 0, batch_size: int = 0) -> TestRunResult:
    """Run the program ``repeat`` times on ``data`` (and ``ctx``); the output packet is read
    back unless the frames went live (then there is none)."""
    if data_out_size is None:
        data_out_size = 0 if flags & BPF_F_TEST_XDP_LIVE_FRAMES else max(len(data) + 256, 256)
    data_in, ctx_in = _buffer(data), _buffer(ctx)
    data_out = ctypes.create_string_buffer(data_out_size) if data_out_size else None
    opts = L.bpf_test_run_opts(
        data_in=_address(data_in), data_size_in=len(data),
        data_out=_address(data_out), data_size_out=data_out_size,
        ctx_in=_address(ctx_in), ctx_size_in=len(ctx) if ctx else 0,
        repeat=repeat, flags=flags, batch_size=batch_size)
    err = L.lib.bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts))
    if err:
        if abs(err) in (95, 524):
            raise NotSupportedError("test_run", f"program '{name}' cannot be test-run on this kernel")
        if flags & BPF_F_TEST_XDP_LIVE_FRAMES:
            from . import features

            probe = features.probe("xdp_live_frames")
            if not probe.supported:
                raise NotSupportedError("xdp_live_frames", f"program '{name}' cannot send live frames here: "
                                        f"{probe.reason}", hint=features.HINTS["xdp_live_frames"])
        raise EbpfkitError(f"test run of '{name}' failed: {os.strerror(abs(err))}")
    out = data_out.raw[:opts.data_size_out] if data_out else b""
    return TestRunResult(opts.retval, out, opts.duration)
