"""Maglev table properties (pure Python): balance, minimal disruption, weights, determinism."""

from __future__ import annotations

import random

import pytest

from ebpfkit.tools.xdp.maglev import DEFAULT_SIZE, build_table, is_prime, remapped, shares


def _names(n: int) -> list[str]:
    return [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(n)]


def test_is_prime():
    assert [n for n in range(30) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert is_prime(65537) and is_prime(655373) and not is_prime(65536)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 10, 16, 33, 100, 1000])
def test_equal_weights_own_m_over_n_plus_minus_one(n):
    table = build_table(_names(n))
    assert len(table) == DEFAULT_SIZE
    owned = shares(table)
    assert set(owned) == set(_names(n))
    for count in owned.values():
        assert abs(count - DEFAULT_SIZE / n) <= 1


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 10, 16])
def test_removing_one_backend_remaps_at_most_1_1_over_n(n):
    names = _names(n)
    table = build_table(names)
    for gone in names:
        after = build_table([b for b in names if b != gone])
        assert gone not in after
        share = remapped(table, after)
        assert share <= 1.1 / n, f"removing {gone} of {n} remapped {share:.4f} > {1.1 / n:.4f}"
        # at least its own slots moved
        assert share >= table.count(gone) / len(table)


def test_disruption_grows_with_backends_per_slot():
    """The bound above needs M >> N: with 100 backends, a 10x larger table brings the remap
    share back near 1/N (this is what the benchmark reports for 1000 backends)."""
    names = _names(100)
    small = [remapped(build_table(names, 65537), build_table(names[:k] + names[k + 1:], 65537)) for k in (0, 50)]
    large = [remapped(build_table(names, 655373), build_table(names[:k] + names[k + 1:], 655373)) for k in (0, 50)]
    assert max(large) < max(small)
    assert max(large) <= 1.2 / 100


@pytest.mark.parametrize("weights", [(1, 2, 3), (5, 1), (1, 1, 10, 3), (7, 7, 7, 1)])
def test_weights_share_the_table_in_proportion(weights):
    backends = [(f"b{i}", w) for i, w in enumerate(weights)]
    owned = shares(build_table(backends))
    total = sum(weights)
    for name, w in backends:
        assert abs(owned[name] - DEFAULT_SIZE * w / total) <= len(weights), (name, owned)


def test_zero_weight_drains_a_backend():
    owned = shares(build_table([("a", 1), ("b", 0), ("c", 1)]))
    assert set(owned) == {"a", "c"}


def test_the_table_depends_on_the_set_not_the_order():
    names = _names(20)
    shuffled = names[:]
    random.Random(7).shuffle(shuffled)
    assert build_table(names, 251) == build_table(shuffled, 251)


def test_adding_a_backend_takes_only_about_its_share():
    names = _names(8)
    before = build_table(names)
    after = build_table(names + ["10.9.9.9"])
    assert remapped(before, after) <= 1.1 / 9
    assert after.count("10.9.9.9") / len(after) <= remapped(before, after)


@pytest.mark.parametrize("bad, message", [
    (dict(backends=["a"], size=65536), "prime"),
    (dict(backends=["a", "a"]), "unique"),
    (dict(backends=[]), "no backend"),
    (dict(backends=[("a", 0)]), "no backend"),
    (dict(backends=[("a", -1)]), ">= 0"),
    (dict(backends=[str(i) for i in range(12)], size=11), "do not fit"),
])
def test_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        build_table(**bad)


def test_remapped_needs_tables_of_one_size():
    with pytest.raises(ValueError):
        remapped(["a"] * 3, ["a"] * 5)
