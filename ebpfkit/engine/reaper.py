"""Removing clsact filters (and root qdiscs) when the process that made them dies.

On kernels without tcx links (< 6.6) a tc program is attached as a clsact filter, which is a
netlink object: unlike a bpf_link it stays when its process is killed, even though nothing
reads what it produces any more. So the first such attachment starts a reaper: a small child
process in its own session, connected to this one by a SOCK_SEQPACKET socketpair. Each
filter is registered with it (the network namespace as an fd passed with SCM_RIGHTS, the
ifindex, attach point, handle, priority and program id) and unregistered by a clean detach.
When the socket reads end-of-file, the parent is gone, however it died: the reaper removes
every filter still registered, where the filter still runs the same program, and exits. It
also exits when the last filter is unregistered: no process lingers while nothing needs it
(the next clsact attach starts another). A root qdisc a tool put on a device for as long as
it runs (tc ratelimit's fq) is registered the same way, and deleted (the kernel's default
comes back) if it is still the one of that kind and handle.

Run as ``python -m ebpfkit.engine.reaper FD``; it imports only ctypes and libbpf.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import socket
import subprocess
import sys
import threading

_lock = threading.Lock()
_sock: socket.socket | None = None
_child: subprocess.Popen | None = None
_owner_pid = 0
_live: set[int] = set()   # keys registered and not yet unregistered
_keys = itertools.count(1)
_MAX_MESSAGE = 4096


def _connection() -> socket.socket:
    global _sock, _child, _owner_pid
    if _sock is None or _child_pid_changed() or _child.poll() is not None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            _child = subprocess.Popen(
                [sys.executable, "-m", "ebpfkit.engine.reaper", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        finally:
            theirs.close()
        ours.set_inheritable(False)
        if _sock is not None and not _child_pid_changed():
            _sock.close()  # a reaper that died: what it held is not held any more
        _sock, _owner_pid = ours, os.getpid()
        _live.clear()
    return _sock


def _child_pid_changed() -> bool:
    # a forked copy of this process must not share (and close) its parent's reaper
    return _owner_pid != os.getpid()


def register(netns_fd: int, ifindex: int, attach_point: int, handle: int, priority: int,
             prog_id: int) -> int:
    """Have the reaper remove this filter if this process dies before ``unregister(key)``."""
    return _add({"ifindex": ifindex, "point": attach_point, "handle": handle, "priority": priority,
                 "prog_id": prog_id}, netns_fd)


def register_root_qdisc(netns_fd: int, ifindex: int, kind: str, handle: int) -> int:
    """Have the reaper delete this root qdisc if this process dies before ``unregister(key)``."""
    return _add({"what": "qdisc", "ifindex": ifindex, "kind": kind, "handle": handle}, netns_fd)


def _add(entry: dict, netns_fd: int) -> int:
    with _lock:
        key = next(_keys)
        socket.send_fds(_connection(), [json.dumps({"op": "add", "key": key, **entry}).encode()], [netns_fd])
        _live.add(key)
        return key


def unregister(key: int) -> None:
    global _sock, _child
    with _lock:
        if _sock is None or _child_pid_changed() or key not in _live:
            return
        _live.discard(key)
        try:
            _sock.send(json.dumps({"op": "del", "key": key}).encode())
        except OSError:
            pass  # the reaper is gone: nothing left to tell it
        if not _live:  # it exits with its registry empty: collect it
            _sock.close()
            try:
                _child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _child.kill()
                _child.wait()
            _sock, _child = None, None


# --- the reaper process ---------------------------------------------------------------

def _remove(entry: dict, netns_fd: int) -> None:
    from . import _libbpf as L

    CLONE_NEWNET = 0x40000000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(netns_fd, CLONE_NEWNET) != 0:
        return
    if entry.get("what") == "qdisc":
        _remove_root_qdisc(entry)
        return
    hook = L.bpf_tc_hook(ifindex=entry["ifindex"], attach_point=entry["point"])
    query = L.bpf_tc_opts(handle=entry["handle"], priority=entry["priority"])
    if L.lib.bpf_tc_query(ctypes.byref(hook), ctypes.byref(query)) != 0:
        return  # the filter or its device is gone already
    if query.prog_id != entry["prog_id"]:
        return  # someone else's filter now sits at that handle and priority
    detach = L.bpf_tc_opts(handle=entry["handle"], priority=entry["priority"])
    L.lib.bpf_tc_detach(ctypes.byref(hook), ctypes.byref(detach))


def _remove_root_qdisc(entry: dict) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:  # in the namespace this process has just entered
        roots = [q for q in ipr.get_qdiscs(entry["ifindex"]) if q["parent"] == 0xFFFFFFFF]
        if roots and roots[0].get_attr("TCA_KIND") == entry["kind"] and roots[0]["handle"] == entry["handle"]:
            ipr.tc("del", index=entry["ifindex"], root=True)


def serve(fd: int) -> None:
    """Keep the registry until end-of-file, then remove what is left in it."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # a Ctrl-C to the tool must not take its reaper first
    sock = socket.socket(fileno=fd)
    registry: dict[int, tuple[dict, int]] = {}
    while True:
        data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 1)
        if not data:
            break
        message = json.loads(data)
        if message["op"] == "add" and fds:
            registry[message["key"]] = (message, fds[0])
        elif message["op"] == "del":
            entry = registry.pop(message["key"], None)
            if entry:
                os.close(entry[1])
            if not registry:
                return  # nothing left to guard: the owner starts another when it needs one
    for entry, netns_fd in registry.values():
        try:
            _remove(entry, netns_fd)
        except Exception:  # noqa: BLE001 - best effort for every filter, whatever one does
            pass


if __name__ == "__main__":
    serve(int(sys.argv[1]))
