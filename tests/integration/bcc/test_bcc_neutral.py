"""ebpfkit.bcc.neutral on this host's kernel: a BCC-dialect program's maps and buffers read
through the engine-neutral Table and EventStream, on ebpfkit's engine (BCC itself cannot run
here: no kernel headers; tests/vm/test_bcc_vm.py runs the same check under both engines)."""

from __future__ import annotations

import os
import sys

import pytest

from bcc_neutral import check_either_engine

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]


def test_tables_and_streams_show_exactly_the_opens_made(tmp_path):
    check_either_engine("ebpfkit", tmp_path)


def test_engine_bcc_without_headers_says_what_is_missing(monkeypatch):
    from ebpfkit.bcc import native
    from ebpfkit.bcc.neutral import Program
    from ebpfkit.errors import NotSupportedError

    # whether or not this kernel's headers are installed: none found is what is tested
    monkeypatch.setattr(native, "kernel_headers", lambda: None)
    monkeypatch.delitem(sys.modules, native.PRIVATE_NAME, raising=False)
    with pytest.raises(NotSupportedError, match="engine='bcc' needs") as caught:
        Program(text="int nothing(void *ctx) { return 0; }", engine="bcc")
    assert caught.value.exit_code == 3
