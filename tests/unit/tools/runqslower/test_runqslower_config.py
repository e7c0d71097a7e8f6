"""runqslower's Config rules and its event record, without a kernel."""

from __future__ import annotations

import os

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools.runqslower.session import Config, Wakeup
from helpers import same_config_error


def test_defaults_report_waits_of_10_ms_from_everyone():
    assert Config() == Config(min_us=10000, pid=None, tid=None)


def test_a_negative_threshold_is_refused():
    with pytest.raises(ConfigError, match="min_us: must be 0 or more, got -1"):
        Config(min_us=-1)


def test_a_missing_thread_is_one_error_everywhere(capsys):
    same_config_error(capsys, Config, {"tid": 4_000_000_000}, ["runqslower", "-t", "4000000000"],
                      "'-t' / '--tid'", "no thread with TID 4000000000")


def test_an_existing_thread_is_accepted():
    assert Config(tid=os.getpid(), pid=os.getpid()).tid == os.getpid()


def test_unknown_settings_are_named():
    with pytest.raises(ConfigError, match="unknown setting; known ones: min_us, pid, tid"):
        Config.from_mapping({"previous": True})


def test_a_wakeup_is_plain_data():
    w = Wakeup(time=1.5, comm="a", pid=2, tid=3, delay_us=4, cpu=0, prev_comm="b", prev_tid=5,
               waker_comm="c", waker_pid=6)
    assert w.to_dict()["delay_us"] == 4 and list(w.to_dict())[:3] == ["time", "comm", "pid"]
