"""Named network namespaces for tools and tests, through pyroute2.

A namespace is entered per *thread* (setns(2) with CLONE_NEWNET affects only the calling
thread), so code that must run "inside" one - attaching XDP/tc by ifindex, opening sockets -
runs in a short-lived worker thread: ``in_netns(name, fn, *args)``. Sockets created there stay
in that namespace after the thread ends, so they can be used from any thread afterwards.

pyroute2 is imported on first use: it weighs about 15 MiB of RSS, which a process that only
names a namespace (the exporter reading pinned maps) should not carry.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
from typing import TYPE_CHECKING

from ..errors import EbpfkitError

if TYPE_CHECKING:
    from pyroute2 import IPRoute

NETNS_DIR = "/var/run/netns"  # where `ip netns` and pyroute2 (its NETNS_RUN_DIR) name namespaces
THREAD_NETNS = "/proc/thread-self/ns/net"  # the calling thread's namespace (setns is per thread)

_counter = itertools.count()
_counter_lock = threading.Lock()


class NoSuchNetnsError(EbpfkitError, FileNotFoundError):
    """A network namespace named on the command line does not exist: a usage error."""

    exit_code = 2


def unique_name(purpose: str = "test") -> str:
    """``ebpfkit-<purpose>-<pid>-<n>``: unique within this process, and says who made it."""
    with _counter_lock:
        n = next(_counter)
    return f"ebpfkit-{purpose}-{os.getpid()}-{n}"


def _pr_netns():
    from pyroute2 import netns

    return netns


def _iproute(**kwargs) -> IPRoute:
    from pyroute2 import IPRoute

    return IPRoute(**kwargs)


def list_netns() -> list[str]:
    return sorted(_pr_netns().listnetns())


def reap_orphans(purpose: str) -> list[str]:
    """Remove the namespaces unique_name(purpose) made for processes that are gone (one
    killed with SIGKILL between creating and removing its namespace); returns their names."""
    pattern = re.compile(rf"ebpfkit-{re.escape(purpose)}-(\d+)-\d+")
    reaped = []
    for name in list_netns():
        m = pattern.fullmatch(name)
        if m and not os.path.exists(f"/proc/{m[1]}"):
            with contextlib.suppress(OSError):
                _pr_netns().remove(name)
                reaped.append(name)
    return reaped


def netns_path(name: str) -> str:
    """The file of namespace ``name`` (a name under /run/netns, or a path)."""
    return name if "/" in name else os.path.join(NETNS_DIR, name)


def iproute(netns: str | None = None) -> IPRoute:
    """An IPRoute in namespace ``netns`` (None: the caller's); NoSuchNetnsError if there is
    no such namespace (it is never created implicitly)."""
    if netns is None:
        return _iproute()
    if not os.path.exists(netns_path(netns)):
        raise NoSuchNetnsError(f"no network namespace '{netns}' (see `ip netns list`)")
    return _iproute(netns=netns, flags=0)


def netns_label() -> str | None:
    """Which network namespace this thread is in: None for the initial one, else its name
    under /run/netns, else ``netns-<inode>`` (unnamed)."""
    own = os.stat(THREAD_NETNS).st_ino
    with contextlib.suppress(OSError):
        if own == os.stat("/proc/1/ns/net").st_ino:
            return None
    for name in list_netns():
        with contextlib.suppress(OSError):
            if os.stat(netns_path(name)).st_ino == own:
                return name
    return f"netns-{own}"


def in_netns(name: str, fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` in a worker thread that has entered netns ``name``;
    return its result or re-raise its exception. The caller's namespace is untouched."""
    path = netns_path(name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no network namespace {name} ({path})")
    box: dict = {}

    def worker():
        try:
            _pr_netns().setns(path, flags=0)  # this thread only; flags=0: never create it
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # handed back to the caller
            box["error"] = exc

    thread = threading.Thread(target=worker, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def in_netns_or_here(name: str | None, fn, *args, **kwargs):
    """``in_netns``, or ``fn`` called here when ``name`` is None (this namespace)."""
    return fn(*args, **kwargs) if name is None else in_netns(name, fn, *args, **kwargs)


def hold_current() -> int:
    """An fd of this thread's namespace, to do something there later from any thread
    (``run_in_held``); the caller closes it."""
    return os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)


def run_in_held(fd: int, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` in the namespace ``fd`` holds: directly when this thread is
    already there, else in a worker thread that entered it."""
    if os.fstat(fd).st_ino == os.stat(THREAD_NETNS).st_ino:
        return fn(*args, **kwargs)
    return in_netns(f"/proc/self/fd/{fd}", fn, *args, **kwargs)


class NetNS:
    """A fresh, uniquely named network namespace; removed on exit (or ``close()``).

    ``with NetNS("xdp") as ns: ns.run(fn, ...)``; ``ns.iproute()`` is an IPRoute inside it.
    Loopback is brought up so local sockets work inside.
    """

    def __init__(self, purpose: str = "test"):
        self.name = unique_name(purpose)
        self.created = False

    @property
    def path(self) -> str:
        return netns_path(self.name)

    def create(self) -> "NetNS":
        _pr_netns().create(self.name)
        self.created = True
        try:
            with self.iproute() as ipr:
                lo = ipr.link_lookup(ifname="lo")
                if lo:
                    ipr.link("set", index=lo[0], state="up")
        except BaseException:
            self.close()
            raise
        return self

    def iproute(self) -> IPRoute:
        """An IPRoute whose netlink socket lives in this namespace (close it, or use ``with``)."""
        return _iproute(netns=self.name, flags=0)  # flags=0: never create it implicitly

    def run(self, fn, *args, **kwargs):
        return in_netns(self.name, fn, *args, **kwargs)

    def close(self) -> None:
        """Remove the name; the kernel frees the namespace (and its veths) once nothing uses it."""
        if self.created:
            self.created = False
            if os.path.exists(self.path):
                _pr_netns().remove(self.name)

    def __enter__(self) -> "NetNS":
        return self.create()

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<NetNS {self.name}>"
