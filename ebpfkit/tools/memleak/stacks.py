"""memleak's one way of turning a user stack into frames a person reads: SourceFrames whose
``str()`` is e.g. "leak_here (leak.c:25) [leak]" (demangled, file:line where there is debug
info, inlined frames in place), innermost first. The rest of the tool keeps them as objects
until output."""

from __future__ import annotations

from ...engine.srclines import user_source_stacks


def user_frames(symbolizer, pid: int, addresses: list[int]) -> list:
    """The frames of one user stack of ``pid`` (innermost first). memleak takes its stacks at the
    allocator's return (a uretprobe), so every address is a return address: each resolves at
    its call, and the innermost frame is the allocator's caller."""
    return user_source_stacks(pid, [addresses], return_addresses_from=0, symbolizer=symbolizer)[0]
