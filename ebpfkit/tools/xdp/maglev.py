"""Maglev consistent hashing (Eisenbud et al., NSDI 2016): a lookup table of prime size M in
which every backend owns about M/N slots, and removing a backend moves little besides its
own slots, so flows of the other backends keep their backend.

Each backend has a preference order over the slots, a permutation given by two hashes of
its name: ``offset + j * skip (mod M)``. Backends take turns claiming their next preferred
free slot until the table is full. Weights: per turn a backend earns its weight in credit
and claims one slot per ``max weight`` of credit, so slots are shared in proportion to the
weights and equal weights give the classic algorithm.

The table depends only on the set of (name, weight) pairs, never on the order they were
given in: backends are sorted by name first.
"""

from __future__ import annotations

import hashlib

DEFAULT_SIZE = 65537


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _offset_skip(name: str, size: int) -> tuple[int, int]:
    digest = hashlib.blake2b(name.encode(), digest_size=16).digest()
    h1, h2 = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")
    return h1 % size, h2 % (size - 1) + 1  # skip in 1..M-1: with M prime, visits every slot


def build_table(backends, size: int = DEFAULT_SIZE) -> list[str]:
    """The table: for each of ``size`` slots, the name of the backend that owns it.

    ``backends``: names, or (name, weight) pairs (weight 0: drained, owns nothing).
    """
    if not is_prime(size):
        raise ValueError(f"the Maglev table size must be prime, not {size}")
    pairs = sorted((b, 1) if isinstance(b, str) else (str(b[0]), int(b[1])) for b in backends)
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError("backend names must be unique")
    if any(w < 0 for _, w in pairs):
        raise ValueError("weights must be >= 0")
    pairs = [(n, w) for n, w in pairs if w > 0]
    if not pairs:
        raise ValueError("no backend with a positive weight")
    if len(pairs) > size:
        raise ValueError(f"{len(pairs)} backends do not fit a table of {size} slots")

    owner = [-1] * size
    pos, skip = [], []
    for name, _ in pairs:
        o, s = _offset_skip(name, size)
        pos.append(o)
        skip.append(s)
    weights = [w for _, w in pairs]
    top = max(weights)
    credit = [0] * len(pairs)
    filled = 0
    while True:
        for i, w in enumerate(weights):
            credit[i] += w
            while credit[i] >= top:
                credit[i] -= top
                c, s = pos[i], skip[i]
                while owner[c] >= 0:  # next preferred slot that is still free
                    c += s
                    if c >= size:
                        c -= size
                owner[c] = i
                nxt = c + s
                pos[i] = nxt - size if nxt >= size else nxt
                filled += 1
                if filled == size:
                    return [pairs[k][0] for k in owner]


def shares(table: list[str]) -> dict[str, int]:
    """Slots owned per backend."""
    out: dict[str, int] = {}
    for name in table:
        out[name] = out.get(name, 0) + 1
    return out


def remapped(old: list[str], new: list[str]) -> float:
    """The fraction of slots whose backend differs between two tables of one size."""
    if len(old) != len(new):
        raise ValueError("tables of different sizes")
    return sum(a != b for a, b in zip(old, new)) / len(old)
