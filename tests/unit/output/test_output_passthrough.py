"""forward_output: a child process's bytes reach our stdout/stderr unchanged and in order with
what we wrote before them through the text layer."""

from __future__ import annotations

import sys

from ebpfkit.output import forward_output


def test_bytes_pass_through_to_the_named_stream_in_order(capfdbinary):
    sys.stdout.write("ours first\n")  # buffered text, must not be overtaken by the raw bytes
    forward_output("stdout", b"guest \xff line\n")
    forward_output("stderr", b"guest error\n")
    out, err = capfdbinary.readouterr()
    assert out == b"ours first\nguest \xff line\n"  # not valid UTF-8: passed as it is
    assert err == b"guest error\n"
