"""``bcc.syscall``: syscall numbers and names of this machine's architecture, read from the
kernel's UAPI header (``asm/unistd_64.h``, which every C toolchain here has installed)."""

from __future__ import annotations

import glob

_HEADERS = ("/usr/include/asm/unistd_64.h", *glob.glob("/usr/include/*-linux-gnu/asm/unistd_64.h"))


def _table() -> dict[int, bytes]:
    for path in _HEADERS:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        table = {}
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "#define" and parts[1].startswith("__NR_") and parts[2].isdigit():
                table[int(parts[2])] = parts[1][len("__NR_"):].encode()
        if table:
            return table
    return {}


syscalls = _table()


def syscall_name(number: int) -> bytes:
    return syscalls.get(number, b"[unknown: %d]" % number)
