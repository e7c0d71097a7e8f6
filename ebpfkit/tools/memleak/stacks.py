"""memleak's one way of turning a user stack into frames a person reads: objects with a
``str()`` ("leak_here+0x1c [leak]"), innermost first. Everything else in the tool keeps the
frames as objects until output, so the symbolizer behind this function can change alone."""

from __future__ import annotations


def user_frames(symbolizer, pid: int, addresses: list[int]) -> list:
    """The frames of one user stack of ``pid`` (its instruction pointers, innermost first)."""
    return [symbolizer.resolve_user(pid, address) for address in addresses]
