"""The interval loop every tool runs: how Ctrl-C ends it, wherever it arrives."""

import os
import signal

import pytest

from ebpfkit.tools.common import intervals


def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)  # delivered before os.kill returns to Python


def test_ctrl_c_while_the_body_runs_ends_the_loop_after_that_body():
    bodies_finished = 0
    for _ in intervals(0.01, None):
        ctrl_c()
        bodies_finished += 1  # the rest of the body still runs
    assert bodies_finished == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_during_the_sleep_ends_the_loop():
    signal.setitimer(signal.ITIMER_REAL, 0.15)
    previous = signal.signal(signal.SIGALRM, lambda *_: ctrl_c())
    try:
        bodies = sum(1 for _ in intervals(0.1, 50))
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert bodies == 1  # one interval done at 0.1 s, Ctrl-C in the second sleep
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_aborts_the_body():
    reached = []
    with pytest.raises(KeyboardInterrupt):
        for _ in intervals(0.01, None):
            ctrl_c()
            reached.append("after the first")
            ctrl_c()
            reached.append("after the second")
    assert reached == ["after the first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_count_intervals_then_the_handler_is_back():
    assert sum(1 for _ in intervals(0.01, 3)) == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_tool_with_its_own_handler_keeps_it():
    def own(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, own)
    try:
        for _ in intervals(0.01, None):
            assert signal.getsignal(signal.SIGINT) is own
            break
    finally:
        signal.signal(signal.SIGINT, previous)
