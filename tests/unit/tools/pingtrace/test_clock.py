"""The server clock estimate: exact when the two directions take as long, within its bound
when they do not, from the probe of least delay among the last few."""

from __future__ import annotations

import pytest

from ebpfkit.tools.pingtrace.clock import ClockFilter

OFFSET = 7_000_000  # the server's clock runs 7 ms ahead


def stamps(out_ns: int, back_ns: int, serve_ns: int = 5_000, t1: int = 0):
    """T1..T4 of a probe whose request takes out_ns, its reply back_ns."""
    t2 = t1 + out_ns + OFFSET
    t3 = t2 + serve_ns
    t4 = t3 - OFFSET + back_ns
    return t1, t2, t3, t4


def test_no_estimate_before_a_probe():
    assert ClockFilter().estimate is None


def test_symmetric_paths_give_the_offset_exactly():
    clock = ClockFilter()
    clock.add(*stamps(20_000, 20_000))
    assert clock.estimate == (OFFSET, 20_000)


@pytest.mark.parametrize("out_ns, back_ns", [(10_000, 50_000), (50_000, 10_000), (0, 30_000)])
def test_asymmetric_paths_stay_within_the_bound(out_ns, back_ns):
    clock = ClockFilter()
    clock.add(*stamps(out_ns, back_ns))
    offset, bound = clock.estimate
    assert abs(offset - OFFSET) <= bound == (out_ns + back_ns) / 2


def test_the_least_delay_probe_of_the_window_is_used():
    clock = ClockFilter(window=3)
    clock.add(*stamps(10_000, 90_000))  # delay 100 us, error 40 us
    clock.add(*stamps(5_000, 5_000))    # delay 10 us, exact
    clock.add(*stamps(30_000, 70_000))
    assert clock.estimate == (OFFSET, 5_000)
    for _ in range(3):                  # the good one leaves the window
        clock.add(*stamps(30_000, 40_000))
    offset, bound = clock.estimate
    assert bound == 35_000 and abs(offset - OFFSET) <= bound


def test_a_probe_whose_stamps_cannot_be_one_round_trip_is_ignored():
    clock = ClockFilter()
    t1, t2, t3, t4 = stamps(10_000, 10_000)
    clock.add(t1, t2, t3 + 100_000, t4)  # the server took longer than the whole round trip
    assert clock.estimate is None
