"""The fields detect's rules can use, and an event's values for them.

Names follow Falco's where Falco has the field (``proc.name``, ``proc.aname[2]``, ``fd.rip``);
ebpfkit's own say what Falco spreads over several events (``proc.stdin.type``: what fd 0 was
when it happened). Values are computed when a rule reads them: most events are decided by
``evt.type`` alone.
"""

from __future__ import annotations

import errno
import ipaddress
import os
from collections.abc import Mapping

from ...policy.condition import FieldSpec

EXEC, CONNECT, DUP, FILE, SYSCALL = 1, 2, 3, 4, 5  # detect.h's enum detect_kind
FD_KINDS = ("none", "file", "ipv4", "ipv6", "unix", "socket", "pipe", "char", "fifo")  # enum detect_fd_kind
SOCKET_CALLS = {0: "connect", 1: "bind", 2: "accept", 3: "accept4"}           # enum detect_socket_call
DUP_CALLS = {1: "dup", 2: "dup2", 3: "dup3", 4: "fcntl"}                      # enum detect_dup_call
FILE_CALLS = {1: "open", 2: "openat", 3: "openat2", 4: "creat", 5: "truncate", 6: "ftruncate",  # enum
              7: "rename", 8: "renameat", 9: "renameat2", 10: "unlink", 11: "unlinkat",       # detect_file_call
              12: "write", 13: "pwrite64", 14: "writev", 15: "pwritev", 16: "pwritev2"}
SYS_CALLS = {1: "setuid", 2: "setreuid", 3: "setresuid", 4: "capset", 5: "ptrace", 6: "init_module",  # enum
             7: "finit_module", 8: "bpf", 9: "mount", 10: "fsopen"}                                # detect_sys_call
FSTYPE_AT, SOURCE_AT = 0, 128   # DETECT_FSTYPE_AT, DETECT_SOURCE_AT
PTRACE_REQUESTS = {0: "PTRACE_TRACEME", 1: "PTRACE_PEEKTEXT", 2: "PTRACE_PEEKDATA", 4: "PTRACE_POKETEXT",
                   5: "PTRACE_POKEDATA", 6: "PTRACE_POKEUSR", 7: "PTRACE_CONT", 8: "PTRACE_KILL",
                   9: "PTRACE_SINGLESTEP", 12: "PTRACE_GETREGS", 13: "PTRACE_SETREGS", 16: "PTRACE_ATTACH",
                   17: "PTRACE_DETACH", 24: "PTRACE_SYSCALL", 0x4200: "PTRACE_SETOPTIONS", 0x4206: "PTRACE_SEIZE",
                   0x4207: "PTRACE_INTERRUPT"}
BPF_COMMANDS = {5: "BPF_PROG_LOAD"}  # the only one the kernel reports
ANCESTORS = 4                                                                 # DETECT_ANCESTORS

S = FieldSpec
FIELDS: dict[str, FieldSpec] = {
    "evt.type": S("str", doc="execve, connect, bind, accept, accept4, the call that put a socket on fd 0-2 (dup, dup2, dup3, fcntl), "
                             "the one that touched a bait file (" + ", ".join(FILE_CALLS.values()) + "), or a "
                             "watched call (" + ", ".join(SYS_CALLS.values()) + ")"),
    "evt.time": S("int", doc="when, ns since the epoch"),
    "proc.pid": S("int", doc="the process (thread group) id"),
    "thread.tid": S("int", doc="the thread id"),
    "proc.name": S("str", doc="the command name (comm)"),
    "proc.exepath": S("str", doc="the executable's path"),
    "proc.cmdline": S("str", doc="the name and arguments, space-separated"),
    "proc.args": S("str", doc="the arguments after the name, space-separated"),
    "proc.argv": S("strs", doc="the arguments after the name, a list (for intersects)"),
    "proc.ppid": S("int", doc="the parent's pid"),
    "proc.pname": S("str", doc="the parent's name"),
    "proc.aname": S("str", indexed=True, doc=f"the name of ancestor N (1: the parent, up to {ANCESTORS})"),
    "proc.apid": S("int", indexed=True, doc="the pid of ancestor N"),
    "proc.anames": S("strs", doc="the ancestors' names, parent first"),
    "proc.stdin.type": S("str", doc="what fd 0 is: " + ", ".join(FD_KINDS)),
    "proc.stdout.type": S("str", doc="what fd 1 is"),
    "proc.stderr.type": S("str", doc="what fd 2 is"),
    "user.uid": S("int", doc="the user id"),
    "container.id": S("str", doc="the container's short id, or host"),
    "fd.num": S("int", doc="connect, bind: the socket's fd; accept: the new fd; dup: the fd it was put on "
                           "(0-2); a bait's open and ftruncate: its fd"),
    "fd.oldnum": S("int", doc="dup: the fd duplicated"),
    "fd.type": S("str", doc="connect/bind/accept/dup: the kind of the socket (" + ", ".join(FD_KINDS) + ")"),
    "fd.rip": S("str", doc="connect: the remote address; accept: the peer's"),
    "fd.rport": S("int", doc="connect: the remote port; accept: the peer's"),
    "fd.lip": S("str", doc="bind: the local address"),
    "fd.lport": S("int", doc="bind: the local port"),
    "fd.name": S("str", doc="connect, bind, accept: address:port; a watched file's event: the file's path (a file rules name "
                            "with fd.name = or in, a bait, or one opened for writing in a directory named with "
                            "fd.directory)"),
    "fd.directory": S("str", doc="a watched file's event: the directory of fd.name"),
    "fd.filename": S("str", doc="a watched file's event: the last part of fd.name"),
    "bait.name": S("str", doc="a bait file's event: the name of the `- bait:` that declared it"),
    "evt.arg.path": S("str", doc="a watched file's event: the path the call named (rename: the old one)"),
    "evt.arg.newpath": S("str", doc="rename of a watched file: the new path"),
    "evt.arg.flags": S("int", doc="open of a watched file: its flags"),
    "evt.killed": S("str", doc="a watched file's event: true when the kernel sent the process SIGKILL (baits)"),
    "evt.res": S("str", doc="open of a watched file: SUCCESS, or the error it failed with (EPERM: denied)"),
    "evt.arg.uid": S("int", doc="setuid, setreuid, setresuid: the effective uid asked for (-1: unchanged)"),
    "evt.arg.request": S("str", doc="ptrace: the request (PTRACE_ATTACH, PTRACE_POKETEXT, ...)"),
    "evt.arg.pid": S("int", doc="ptrace: the target process"),
    "evt.arg.cmd": S("str", doc="bpf: the command (only BPF_PROG_LOAD is reported)"),
    "proc.is_exe_from_memfd": S("str", doc="execve: true when the file executed is a memfd (fileless)"),
    "evt.arg.fstype": S("str", doc="mount, fsopen: the filesystem type"),
    "evt.arg.source": S("str", doc="mount: the source (a device, a directory, or a name)"),
    "evt.arg.target": S("str", doc="mount: where it is mounted"),
    "socket.ino": S("int", doc="the network socket involved, by inode: connect's, the one duplicated, or the "
                               "first on the process's stdio (shared by every process it was passed to)"),
}


class EventFields(Mapping):
    """One decoded detect_event as rule fields. ``containers`` maps a cgroup id to its
    container's short id (or "host"); ``processes`` remembers what exec events said of a
    process (its path and arguments) for the events that follow; ``watched`` (watch.Watched)
    are the files and directories the session watches."""

    def __init__(self, event, wall_ns: int, containers, processes: dict, watched=None):
        self.event, self.wall_ns = event, wall_ns
        self._containers, self._processes = containers, processes
        self._watched = watched
        self._cache: dict[str, object] = {}

    def __getitem__(self, name: str):
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def get(self, name, default=None):
        try:
            value = self._cache[name]
        except KeyError:
            value = self._cache[name] = self._value(name)
        return default if value is None else value

    def __iter__(self):
        return iter(n for n in self.names() if self.get(n) is not None)

    def __len__(self):
        return sum(1 for _ in self)

    def names(self) -> list[str]:
        """Every field this event may have (indexed ones at each index)."""
        plain = [n for n, spec in FIELDS.items() if not spec.indexed]
        indexed = [f"{n}[{i}]" for n, spec in FIELDS.items() if spec.indexed for i in range(1, ANCESTORS + 1)]
        return plain + indexed

    def _value(self, name: str):
        ev = self.event
        base, _, index = name.partition("[")
        if index:
            i = int(index.rstrip("]"))
            if not 1 <= i <= ev.nancestors:
                return None
            ancestor = ev.ancestors[i - 1]
            return ancestor.comm if base == "proc.aname" else ancestor.pid if base == "proc.apid" else None
        getter = _GETTERS.get(name)
        return getter(self) if getter else None

    # what an exec said of this process, for later events
    def process(self) -> dict:
        ev = self.event
        if ev.kind == EXEC:
            argv = bytes(ev.args[:ev.args_len]).rstrip(b"\0").split(b"\0")
            info = {"exepath": ev.path, "args": [a.decode(errors="replace") for a in argv[1:]]}
            self._processes[ev.tgid] = info
            return info
        return self._processes.get(ev.tgid) or _from_proc(ev.tgid)


def _from_proc(pid: int) -> dict:
    """A process that exec'd before detect started: what /proc still says of it."""
    try:
        exepath = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return {}
    return {"exepath": exepath, "args": [a.decode(errors="replace") for a in argv[1:]]}


def _evt_type(f: EventFields):
    ev = f.event
    if ev.kind == FILE:
        return FILE_CALLS.get(ev.call, "file")
    if ev.kind == SYSCALL:
        return SYS_CALLS.get(ev.call, "syscall")
    if ev.kind == CONNECT:
        return SOCKET_CALLS.get(ev.call, "connect")
    return "execve" if ev.kind == EXEC else DUP_CALLS.get(ev.call, "dup")


def _watched(f: EventFields):
    """(the watched entry, the file's path) of a file event; (None, None) otherwise."""
    if f.event.kind != FILE or f._watched is None:
        return None, None
    if "watched" not in f._cache:
        f._cache["watched"] = f._watched.of_event(f.event)
    return f._cache["watched"]


def _newpath(ev) -> str:
    return bytes(ev.args).partition(b"\0")[0].decode(errors="replace")


def _fd_name(f: EventFields):
    if f.event.kind == CONNECT:
        return f"{_address(f.event)}:{f.event.port}"
    return _watched(f)[1]


def _res(f: EventFields):
    ev = f.event
    if ev.kind != FILE or ev.call > 4:  # only the open calls are seen at their exit
        return None
    return "SUCCESS" if ev.fd >= 0 else errno.errorcode.get(-ev.fd, str(-ev.fd))


def _uid_asked(f: EventFields):
    ev = f.event
    if ev.kind != SYSCALL or ev.call not in (1, 2, 3):  # setuid: its argument; the others: the euid's
        return None
    uid = ev.arg[0] if ev.call == 1 else ev.arg[1]
    return -1 if uid & 0xFFFFFFFF == 0xFFFFFFFF else uid & 0xFFFFFFFF


def _mount_arg(f: EventFields, at: int):
    ev = f.event
    if ev.kind != SYSCALL or ev.call not in (9, 10) or (at == SOURCE_AT and ev.call != 9):
        return None
    return bytes(ev.args[at:]).partition(b"\0")[0].decode(errors="replace")


def _syscall(f: EventFields, call: int, value):
    return value if f.event.kind == SYSCALL and f.event.call == call else None


def _file(f: EventFields, value):
    return value if f.event.kind == FILE else None


def _address(ev) -> str | None:
    if ev.kind != CONNECT:
        return None
    raw = bytes(ev.addr)
    return str(ipaddress.IPv4Address(raw[:4]) if ev.family == 2 else ipaddress.IPv6Address(raw))


def _bound(ev) -> bool:
    """A bind(): its address is the local one."""
    return ev.kind == CONNECT and ev.call == 1


def _args(f: EventFields):
    args = f.process().get("args")
    return None if args is None else " ".join(args)


def _cmdline(f: EventFields):
    args = _args(f)
    return f.event.comm if not args else f"{f.event.comm} {args}"


def _fd(f: EventFields, value):
    return value if f.event.kind in (CONNECT, DUP) or f.event.kind == FILE and value >= 0 else None


_GETTERS = {
    "evt.type": _evt_type,
    "evt.time": lambda f: f.wall_ns,
    "proc.pid": lambda f: f.event.tgid,
    "thread.tid": lambda f: f.event.pid,
    "proc.name": lambda f: f.event.comm,
    "proc.exepath": lambda f: f.process().get("exepath"),
    "proc.cmdline": _cmdline,
    "proc.args": _args,
    "proc.argv": lambda f: f.process().get("args"),
    "proc.ppid": lambda f: f.event.ancestors[0].pid if f.event.nancestors else None,
    "proc.pname": lambda f: f.event.ancestors[0].comm if f.event.nancestors else None,
    "proc.anames": lambda f: [a.comm for a in f.event.ancestors[:f.event.nancestors]],
    "proc.stdin.type": lambda f: FD_KINDS[f.event.stdio[0]],
    "proc.stdout.type": lambda f: FD_KINDS[f.event.stdio[1]],
    "proc.stderr.type": lambda f: FD_KINDS[f.event.stdio[2]],
    "user.uid": lambda f: f.event.uid,
    "container.id": lambda f: f._containers(f.event.cgroup_id),
    "fd.num": lambda f: _fd(f, f.event.fd),
    "fd.oldnum": lambda f: f.event.oldfd if f.event.kind == DUP else None,
    "fd.type": lambda f: FD_KINDS[f.event.fd_kind] if f.event.kind in (CONNECT, DUP) else None,
    "fd.rip": lambda f: None if _bound(f.event) else _address(f.event),
    "fd.rport": lambda f: f.event.port if f.event.kind == CONNECT and not _bound(f.event) else None,
    "fd.lip": lambda f: _address(f.event) if _bound(f.event) else None,
    "fd.lport": lambda f: f.event.port if _bound(f.event) else None,
    "fd.name": _fd_name,
    "bait.name": lambda f: getattr(_watched(f)[0], "bait", None),
    "fd.directory": lambda f: os.path.dirname(_fd_name(f)) if f.event.kind == FILE and _fd_name(f) else None,
    "fd.filename": lambda f: os.path.basename(_fd_name(f)) if f.event.kind == FILE and _fd_name(f) else None,
    "evt.arg.path": lambda f: _file(f, f.event.path or None),
    "evt.arg.newpath": lambda f: _file(f, _newpath(f.event) or None),
    "evt.arg.flags": lambda f: f.event.flags if f.event.kind == FILE and f.event.call <= 4 else None,
    "evt.killed": lambda f: _file(f, "true" if f.event.killed else "false"),
    "evt.res": _res,
    "evt.arg.uid": _uid_asked,
    "evt.arg.request": lambda f: _syscall(f, 5, PTRACE_REQUESTS.get(f.event.arg[0], str(f.event.arg[0]))),
    "evt.arg.pid": lambda f: _syscall(f, 5, f.event.arg[1]),
    "evt.arg.cmd": lambda f: _syscall(f, 8, BPF_COMMANDS.get(f.event.arg[0], str(f.event.arg[0]))),
    "evt.arg.fstype": lambda f: _mount_arg(f, FSTYPE_AT),
    "evt.arg.source": lambda f: _mount_arg(f, SOURCE_AT),
    "evt.arg.target": lambda f: _syscall(f, 9, f.event.path),
    "proc.is_exe_from_memfd": lambda f: ("true" if f.event.exe_memfd else "false") if f.event.kind == EXEC else None,
    "socket.ino": lambda f: f.event.socket_ino or None,
}
