"""Folded stacks, the text flamegraph.pl, speedscope and inferno read: one line per stack,
its frames outermost first joined by ";", a space, and its value::

    comm;main;block_here;-;entry_SYSCALL_64;do_syscall_64;...;schedule 1001126

The process name comes first, then the user frames, "-" between user and kernel frames
(when the entries have both), then the kernel frames; the value is the time off the CPU in
µs. Entries of the same name and stacks (other threads of a program) share one line."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

SEPARATOR = "-"


def folded_lines(entries: Iterable) -> list[str]:
    """The folded lines of ``entries`` (anything with comm, user_stack, kernel_stack,
    total_us), most time first; a stack with less than 1 µs in all is left out."""
    totals: Counter[tuple[str, ...]] = Counter()
    for entry in entries:
        totals[_frames(entry)] += entry.total_us
    ordered = sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    return [f"{';'.join(frames)} {value}" for frames, value in ordered if value > 0]


def _frames(entry) -> tuple[str, ...]:
    user = [_frame(f) for f in reversed(entry.user_stack)]
    kernel = [_frame(f) for f in reversed(entry.kernel_stack)]
    middle = [SEPARATOR] if user and kernel else []
    return (_frame(entry.comm) or "[unknown]", *user, *middle, *kernel)


def _frame(name: str) -> str:
    """A frame that cannot break the line's syntax: ";" splits frames, a line ends the stack."""
    return name.replace(";", ":").replace("\n", " ")
