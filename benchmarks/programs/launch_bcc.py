"""Start one BCC-dialect program (TRACEPOINT_PROBEs attach inside BPF()), print ATTACHED,
then read its "events" perf buffer, if it has one, until SIGINT/SIGTERM. Run with the Python
that has BCC (Debian: /usr/bin/python3), or with BCC_ENGINE=ebpfkit under ebpfkit's Python to
run the same program through ebpfkit.bcc.

    python3 launch_bcc.py PROGRAM.c [-DMACRO ...]
"""
import os
import signal
import sys

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

if os.environ.get("BCC_ENGINE") == "ebpfkit":
    from ebpfkit.bcc import BPF  # noqa: E402
else:
    from bcc import BPF  # noqa: E402

with open(sys.argv[1]) as f:
    b = BPF(text=f.read(), cflags=sys.argv[2:])
try:  # (not `"events" in b`: BCC keeps table names as bytes, so that is False there)
    b["events"].open_perf_buffer(lambda cpu, data, size: None, page_cnt=64)
    reading = True
except KeyError:
    reading = False
os.write(1, b"ATTACHED\n")

if reading:  # poll until a stop signal is pending
    while not signal.sigpending() & {signal.SIGINT, signal.SIGTERM}:
        b.perf_buffer_poll(100)
else:
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
b.cleanup()
