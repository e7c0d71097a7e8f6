"""The folded stacks offcputime prints for flame graph tools, from entries made here."""

from __future__ import annotations

from ebpfkit.tools.offcputime.folded import folded_lines
from ebpfkit.tools.offcputime.session import OffCpu

KERNEL = ("__schedule", "schedule", "do_nanosleep")  # innermost first, as a session has them
USER = ("nanosleep_syscall", "block_here", "main")


def entry(total_us, comm="blocker", tid=7, user=USER, kernel=KERNEL) -> OffCpu:
    return OffCpu(pid=7, tid=tid, comm=comm, count=1, total_us=total_us, user_stack=user, kernel_stack=kernel)


def test_frames_outermost_first_user_then_kernel_after_a_dash():
    assert folded_lines([entry(1500)]) == [
        "blocker;main;block_here;nanosleep_syscall;-;do_nanosleep;schedule;__schedule 1500"]


def test_one_kind_of_stack_has_no_dash():
    assert folded_lines([entry(3, user=())]) == ["blocker;do_nanosleep;schedule;__schedule 3"]
    assert folded_lines([entry(4, kernel=())]) == ["blocker;main;block_here;nanosleep_syscall 4"]
    assert folded_lines([entry(5, user=(), kernel=())]) == ["blocker 5"]


def test_the_same_stacks_of_several_threads_add_up_most_first():
    lines = folded_lines([entry(10, tid=1), entry(30, tid=2, kernel=("__schedule",)), entry(25, tid=3)])
    assert lines == ["blocker;main;block_here;nanosleep_syscall;-;do_nanosleep;schedule;__schedule 35",
                     "blocker;main;block_here;nanosleep_syscall;-;__schedule 30"]


def test_names_cannot_break_the_syntax_and_nothing_is_left_out_but_zeros():
    lines = folded_lines([entry(2, comm="a;b", user=("x;y", "[unknown]"), kernel=()),
                          entry(0, comm="idle"), entry(1, comm="")])
    assert lines == ["a:b;[unknown];x:y 2", "[unknown];main;block_here;nanosleep_syscall;-;"
                                            "do_nanosleep;schedule;__schedule 1"]
    for line in lines:  # what flamegraph.pl reads: frames, one space, an integer
        frames, _, value = line.rpartition(" ")
        assert value.isdigit() and "\n" not in frames
