"""``bcc.utils`` for BCC's scripts: printing bytes, argument strings, CPU lists."""

from __future__ import annotations


def printb(s: bytes, file=None, nl: int = 1) -> None:
    """Write bytes as they are (BCC's scripts print comm and paths this way)."""
    data = s + (b"\n" if nl else b"")
    if file is None:
        from ..output import forward_output

        forward_output("stdout", data)
        return
    file.flush()
    file.buffer.write(data)
    file.buffer.flush()


class ArgString:
    """An argparse type that keeps the argument as bytes (``bytes(ArgString("x"))``)."""

    def __init__(self, s: str):
        self.s = s

    def __bytes__(self) -> bytes:
        return self.s.encode(errors="surrogateescape")

    def __str__(self) -> str:
        return self.s


def _read_cpu_range(path: str) -> list[int]:
    cpus = []
    with open(path) as f:
        for part in f.read().strip().split(","):
            low, _, high = part.partition("-")
            cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def get_online_cpus() -> list[int]:
    return _read_cpu_range("/sys/devices/system/cpu/online")


def get_possible_cpus() -> list[int]:
    return _read_cpu_range("/sys/devices/system/cpu/possible")
