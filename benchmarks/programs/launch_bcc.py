"""Start one BCC-dialect program (TRACEPOINT_PROBEs attach inside BPF()), print ATTACHED,
then wait for SIGINT/SIGTERM. Run with the Python that has BCC (Debian: /usr/bin/python3).

    python3 launch_bcc.py PROGRAM.c [-DMACRO ...]
"""
import os
import signal
import sys

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

from bcc import BPF  # noqa: E402

with open(sys.argv[1]) as f:
    b = BPF(text=f.read(), cflags=sys.argv[2:])
os.write(1, b"ATTACHED\n")

signal.sigwait({signal.SIGINT, signal.SIGTERM})
b.cleanup()
