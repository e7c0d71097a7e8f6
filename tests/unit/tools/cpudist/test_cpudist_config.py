"""cpudist's Config rules and how its map's entries become histograms, without a kernel."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools.cpudist.session import Config
from ebpfkit.tools.task_times import drain_histograms
from helpers import same_config_error


def test_defaults_are_on_cpu_in_microseconds_for_everyone():
    config = Config()
    assert config == Config(offcpu=False, milliseconds=False, per_process=False, per_thread=False, pid=None)
    assert (config.unit, config.unit_ns, config.keyed_by) == ("usecs", 1000, None)


def test_the_settings_reach_the_program():
    config = Config(offcpu=True, milliseconds=True, per_thread=True, pid=os.getpid())
    assert (config.unit, config.unit_ns, config.keyed_by) == ("msecs", 1_000_000, "tid")
    assert config.rodata() == {"targ_ms": True, "targ_per_process": False, "targ_tgid": os.getpid()}
    assert Config(per_process=True).keyed_by == "pid"


def test_per_process_and_per_thread_are_one_error_everywhere(capsys):
    same_config_error(capsys, Config, {"per_thread": True, "per_process": True}, ["cpudist", "-P", "-L"],
                      "'-L' / '--per-thread'", "cannot be combined with per_process")


def test_a_missing_process_is_one_error_everywhere(capsys):
    same_config_error(capsys, Config, {"pid": 4_000_000_000}, ["cpudist", "-p", "4000000000"],
                      "'-p' / '--pid'", "no process with PID 4000000000")


def test_types_and_unknown_settings_are_named():
    with pytest.raises(ConfigError, match="offcpu: expected bool, got str 'yes'"):
        Config.from_mapping({"offcpu": "yes"})
    with pytest.raises(ConfigError, match="unknown setting; known ones: milliseconds, per_process, pid, offcpu, "
                                          "per_thread"):
        Config.from_mapping({"interval": 1})


class DrainedMap:
    """A ``hists`` map's pop_all(): (key, value) pairs, as the engine decodes them."""

    def __init__(self, entries):
        self.entries = entries

    def pop_all(self):
        entries, self.entries = self.entries, []
        return entries


def entry(key, slots, sum_ns, comm=""):
    return key, SimpleNamespace(slots=slots, sum_ns=sum_ns, comm=comm)


def test_each_key_is_a_labelled_histogram_in_the_configs_unit():
    hists = DrainedMap([entry(20, [0, 2], 3_000_000, "b"), entry(7, [1], 500_000, "a")])
    (a, b) = drain_histograms(hists, Config(milliseconds=True, per_thread=True), "tid")
    assert (a.label, a.unit, a.counts, a.sum) == ("tid = 7 a", "msecs", [1], 0.5)
    assert (b.label, b.counts, b.sum) == ("tid = 20 b", [0, 2], 3.0)
    (empty,) = drain_histograms(hists, Config(), None)  # drained: one empty histogram, not none
    assert (empty.label, empty.unit, empty.total) == (None, "usecs", 0)
