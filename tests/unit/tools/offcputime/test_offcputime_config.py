"""offcputime's Config rules, without a kernel."""

from __future__ import annotations

import os

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.tools.offcputime.session import Config
from helpers import same_config_error


def test_defaults_count_every_block_of_everyone_with_both_stacks():
    config = Config()
    assert (config.pid, config.tid, config.state, config.min_block_time, config.max_block_time) == \
        (None, None, None, 1, None)
    assert config.user_stacks and config.kernel_stacks and config.stack_storage_size == 1024


@pytest.mark.parametrize("only, user, kernel", [("user_stacks_only", True, False),
                                                ("kernel_stacks_only", False, True)])
def test_one_kind_of_stack(only, user, kernel):
    config = Config(**{only: True})
    assert (config.user_stacks, config.kernel_stacks) == (user, kernel)


@pytest.mark.parametrize("settings, message", [
    ({"user_stacks_only": True, "kernel_stacks_only": True},
     "user_stacks_only: cannot be combined with kernel_stacks_only"),
    ({"min_block_time": -1}, "min_block_time: must be 0 or more, got -1"),
    ({"min_block_time": 100, "max_block_time": 99},
     "max_block_time: must be at least 1 and min_block_time (100), got 99"),
    ({"min_block_time": 0, "max_block_time": 0}, "max_block_time: must be at least 1 and min_block_time (0), got 0"),
    ({"state": -1}, "state: must be a task state from 0 to 127"),
    ({"state": 128}, "state: must be a task state from 0 to 127"),
    ({"stack_storage_size": 0}, "stack_storage_size: must be greater than 0, got 0"),
    ({"min_block_time": 1.5}, "min_block_time: expected int, got float 1.5"),
])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        Config(**settings)


def test_good_settings_are_kept():
    config = Config(pid=os.getpid(), tid=os.getpid(), state=2, min_block_time=0, max_block_time=1)
    assert (config.state, config.min_block_time, config.max_block_time) == (2, 0, 1)
    assert Config(min_block_time=10, max_block_time=10).max_block_time == 10


def test_a_missing_thread_is_one_error_everywhere(capsys):
    same_config_error(capsys, Config, {"tid": 4_000_000_000}, ["offcputime", "-t", "4000000000"],
                      "'-t' / '--tid'", "no thread with TID 4000000000")


def test_a_bad_block_time_names_its_option_on_the_command_line(capsys):
    same_config_error(capsys, Config, {"min_block_time": -5}, ["offcputime", "-m", "-5"],
                      "'-m' / '--min-block-time'", "must be 0 or more, got -5")


def test_unknown_settings_are_named():
    with pytest.raises(ConfigError, match="unknown setting; known ones: pid, tid, user_stacks_only"):
        Config.from_mapping({"folded": True})
