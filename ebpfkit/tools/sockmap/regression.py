"""The sockhash receive-path regression (kernel commit 929e30f93125, in 6.6.128+, 6.12.75+,
6.18.14+): a socket in a SOCKHASH with no sk_skb verdict program reports FIONREAD 0 for
data that came through TCP and can miss epoll wake-ups, so nginx stalls or truncates and
epoll clients hang (grafana/beyla#2941, #3025). With a verdict program on the map, that
data goes through the psock ingress queue, which FIONREAD and poll account for.

Detected by trying it: a loopback pair, one end put in a throw-away SOCKHASH from user
space (no program, nothing attached anywhere), a few bytes sent, FIONREAD compared with
what MSG_PEEK sees. The kernel release is only a fallback when the probe cannot run.
"""

from __future__ import annotations

import array
import fcntl
import platform
import re
import socket
import struct
import termios
import time
from dataclasses import dataclass

# (first affected release, first release of the next series) per stable series; 6.19+ all
AFFECTED_SINCE = {(6, 6): 128, (6, 12): 75, (6, 18): 14}
PROBE_BYTES = 100


@dataclass(frozen=True)
class RegressionCheck:
    affected: bool
    method: str  # "probe" or "kernel release"
    detail: str

    def to_dict(self) -> dict:
        return {"affected": self.affected, "method": self.method, "detail": self.detail}


def release_affected(release: str | None = None) -> bool:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release or platform.release())
    if not m:
        return False
    major, minor, patch = int(m[1]), int(m[2]), int(m[3] or 0)
    if (major, minor) >= (6, 19):
        return True
    since = AFFECTED_SINCE.get((major, minor))
    return since is not None and patch >= since


def _loopback_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=5)
        server, _ = listener.accept()
    return client, server


def _fionread(sock: socket.socket) -> int:
    buf = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    return buf[0]


def probe() -> tuple[int, int]:
    """(bytes MSG_PEEK sees, bytes FIONREAD reports) on a socket inside a SOCKHASH."""
    from ...engine.constants import MapType
    from ...engine.maps import create_map
    from ...engine.pinned import FdMap

    sockets = FdMap(create_map(MapType.SOCKHASH, 4, 8, 1, "ek_fionread"))
    client = server = None
    try:
        client, server = _loopback_pair()
        sockets.update(struct.pack("=I", 0), struct.pack("=Q", server.fileno()))
        client.sendall(b"x" * PROBE_BYTES)
        peeked, deadline = 0, time.monotonic() + 2
        while peeked < PROBE_BYTES and time.monotonic() < deadline:
            try:
                peeked = len(server.recv(PROBE_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except BlockingIOError:
                time.sleep(0.005)
        return peeked, _fionread(server)
    finally:
        for s in (client, server):
            if s is not None:
                s.close()
        sockets.close()


def detect() -> RegressionCheck:
    try:
        peeked, reported = probe()
    except Exception as exc:  # no privileges or no SOCKHASH: judge by the release
        affected = release_affected()
        return RegressionCheck(affected, "kernel release",
                               f"probe failed ({exc}); {platform.release()} is "
                               f"{'in' if affected else 'outside'} the affected releases")
    if peeked < PROBE_BYTES:
        return RegressionCheck(release_affected(), "kernel release",
                               f"probe inconclusive: only {peeked} of {PROBE_BYTES} bytes arrived")
    affected = reported != peeked
    return RegressionCheck(affected, "probe", f"FIONREAD reported {reported} of {peeked} queued bytes "
                                              "on a socket in a SOCKHASH without a verdict program")
