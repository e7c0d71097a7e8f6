"""Processes as /proc shows them (the facts a tool needs about them, in one place)."""

from __future__ import annotations


def pid_max() -> int:
    """The highest pid plus one (/proc/sys/kernel/pid_max): no more tasks can exist at once."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read())


def parent_of(pid: int) -> int | None:
    """``pid``'s parent, or None when it is gone (or /proc is not readable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the name is in parentheses and may hold anything: the fields after its last ")"
    fields = stat[stat.rfind(b")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else None


def ancestors(pid: int) -> list[int]:
    """``pid`` and its ancestors up to init (1), nearest first."""
    chain = []
    while pid and pid not in chain:
        chain.append(pid)
        if pid == 1:
            break
        pid = parent_of(pid)
    return chain


def name_of(pid: int) -> str | None:
    """``pid``'s command name (comm), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None
