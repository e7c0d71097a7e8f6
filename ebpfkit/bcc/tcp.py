"""``bcc.tcp``: TCP state names (from the kernel's own enum, in its BTF) and flag names."""

from __future__ import annotations


def _states() -> dict[int, str]:
    from ..engine import kernel_enum

    return {value: name[len("TCP_"):] for name, value in kernel_enum("TCP_ESTABLISHED").items()
            if name.startswith("TCP_") and name != "TCP_MAX_STATES"}


tcpstate = _states()

# the TCP header's flag bits (RFC 9293, 3168), lowest first
_FLAGS = ((0x01, "FIN"), (0x02, "SYN"), (0x04, "RST"), (0x08, "PSH"), (0x10, "ACK"), (0x20, "URG"),
          (0x40, "ECE"), (0x80, "CWR"))


def flags2str(flags: int) -> str:
    return "|".join(name for bit, name in _FLAGS if flags & bit)
