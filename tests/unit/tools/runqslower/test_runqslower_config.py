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


def test_a_kernel_without_sched_info_is_a_missing_feature(monkeypatch):
    """Its waits are the kernel's own account: without CONFIG_SCHED_INFO the session refuses
    to start (exit 3 from the CLI) before it compiles anything."""
    from ebpfkit.engine import features
    from ebpfkit.errors import NotSupportedError
    from ebpfkit.tools import runqslower

    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: p != "/proc/self/schedstat" and real_exists(p))
    monkeypatch.setitem(features._cache, "sched_info", features._probe_sched_info("sched_info", "sched_info"))
    with pytest.raises(NotSupportedError, match="CONFIG_SCHED_INFO") as info:
        runqslower.open(min_us=1000)
    assert info.value.feature == "sched_info" and info.value.exit_code == 3
    assert "CONFIG_SCHEDSTATS" in info.value.hint
