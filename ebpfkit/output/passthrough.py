"""Another process's own output, passed through unchanged: what a command run in a VM writes
(`ebpfkit vm run`, and the guest's pytest live under `pytest -s`). It is that process's
result, not a record of ours, so it skips tables, formats and logging."""

from __future__ import annotations

import sys


def forward_output(stream: str, data: bytes) -> None:
    """Write ``data`` to our stdout (``stream == "stdout"``) or stderr, as it came."""
    target = sys.stdout if stream == "stdout" else sys.stderr
    target.flush()  # keep the order with what was written through the text layer
    target.buffer.write(data)
    target.buffer.flush()


def line_buffered_stdout() -> None:
    """Each line written to stdout goes out as it is printed, into a pipe too (another
    program's prints, `| grep`): Python would hold a pipe's output until 8 KiB gathered."""
    sys.stdout.reconfigure(line_buffering=True)
