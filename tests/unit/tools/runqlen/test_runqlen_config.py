"""runqlen's Config rules and occupancy, without a kernel."""

from __future__ import annotations

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.histogram import LinearHistogram
from ebpfkit.tools.runqlen.session import Config, occupancy
from helpers import same_config_error


def test_defaults_sample_at_99_hz_for_all_cpus():
    assert Config() == Config(per_cpu=False, frequency=99)


@pytest.mark.parametrize("frequency, message", [(0, "must be greater than 0"), (-5, "must be greater than 0"),
                                                (20000, "at most 10000 samples a second")])
def test_a_bad_frequency_is_one_error_everywhere(capsys, frequency, message):
    same_config_error(capsys, Config, {"frequency": frequency}, ["runqlen", "-F", frequency, "1", "1"],
                      "'-F' / '--frequency'", message)


def test_types_are_checked():
    with pytest.raises(ConfigError, match="per_cpu: expected bool, got str 'yes'"):
        Config.from_mapping({"per-cpu": "yes"})


def test_occupancy_is_the_share_of_samples_with_a_task_waiting():
    assert occupancy(LinearHistogram.from_counts([30, 60, 10])) == 70.0
    assert occupancy(LinearHistogram.from_counts([5])) == 0.0
    assert occupancy(LinearHistogram.from_counts([0, 4])) == 100.0
    assert occupancy(LinearHistogram.from_counts([])) is None
