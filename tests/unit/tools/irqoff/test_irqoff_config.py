"""irqoff's Config rules, its mode choice (over fake sysfs/tracefs trees), and the rotating
-f LOGFILE, without a kernel."""

from __future__ import annotations

import pytest

from ebpfkit.errors import ConfigError
from ebpfkit.output import RotatingLines
from ebpfkit.tools.irqoff.session import Config, Section, choose_mode
from helpers import same_config_error


def test_defaults_report_sections_over_10_ms_in_the_best_mode():
    assert Config() == Config(threshold_ms=10.0, mode="auto")


@pytest.mark.parametrize("threshold_ms, period_ns", [(10, 1_000_000), (20, 2_000_000), (0.5, 100_000),
                                                      (1000, 10_000_000)])
def test_the_tick_is_a_tenth_of_the_threshold_within_limits(threshold_ms, period_ns):
    assert Config(threshold_ms=threshold_ms).period_ns == period_ns


def test_a_threshold_that_is_not_positive_is_one_error_everywhere(capsys):
    same_config_error(capsys, Config, {"threshold_ms": 0.0}, ["irqoff", "-t", "0"], "'-t' / '--threshold'",
                      "must be greater than 0")


def test_an_unknown_mode_is_named():
    with pytest.raises(ConfigError, match="mode: unknown mode 'fast': use auto, software, nmi, exact"):
        Config(mode="fast")


def test_unknown_settings_are_named():
    with pytest.raises(ConfigError, match="unknown setting; known ones: threshold_ms, mode"):
        Config.from_mapping({"duration": 3})


def test_a_section_is_plain_data():
    s = Section(time=1.5, kind="hardirq", cpu=1, comm="sh", pid=2, tid=2, lat_us=30000, stack=["f+0x1"])
    assert s.to_dict()["stack"] == ["f+0x1"] and s.to_dict()["stack_note"] == ""


# --- the mode: exact where preemptirq tracepoints exist, NMI where a PMU does, else software ---

def fake_tree(root, *dirs):
    for d in dirs:
        (root / d).mkdir(parents=True)
    return str(root)


def test_without_pmu_or_tracepoints_it_samples_in_software(tmp_path):
    devices = fake_tree(tmp_path / "devices", "software", "tracepoint", "breakpoint", "msr")
    tracing = fake_tree(tmp_path / "tracing", "events/sched/sched_switch", "events/irq/irq_handler_entry")
    assert choose_mode(devices, tracing) == "software"


def test_a_hardware_pmu_means_nmi_sampling(tmp_path):
    devices = fake_tree(tmp_path / "devices", "software", "cpu")
    assert choose_mode(devices, fake_tree(tmp_path / "tracing", "events/sched")) == "nmi"


def test_an_arm64_pmu_counts_too(tmp_path):
    assert choose_mode(fake_tree(tmp_path / "devices", "software", "armv8_pmuv3_0"), None) == "nmi"


def test_preemptirq_tracepoints_mean_exact_even_with_a_pmu(tmp_path):
    devices = fake_tree(tmp_path / "devices", "cpu")
    tracing = fake_tree(tmp_path / "tracing", "events/preemptirq/irq_disable", "events/preemptirq/irq_enable")
    assert choose_mode(devices, tracing) == "exact"


def test_half_of_the_tracepoint_pair_is_not_enough(tmp_path):
    tracing = fake_tree(tmp_path / "tracing", "events/preemptirq/irq_disable")
    assert choose_mode(fake_tree(tmp_path / "devices", "software"), tracing) == "software"


def test_unmounted_tracefs_and_missing_sysfs_mean_software(tmp_path):
    assert choose_mode(str(tmp_path / "nowhere"), None) == "software"


# --- -f LOGFILE ------------------------------------------------------------------------------

def test_the_log_file_rotates_whole_lines_and_keeps_n_old_files(tmp_path):
    path = tmp_path / "irqoff.log"
    lines = [f"line {i:03d} " + "x" * 80 for i in range(40)]
    stream = RotatingLines(str(path), max_bytes=400, backups=3)
    for line in lines:
        stream.write(line[:30])
        stream.write(line[30:] + "\n")  # a line written in pieces stays one line
    stream.close()
    kept = [path.with_name(f"irqoff.log.{n}") for n in (3, 2, 1)] + [path]
    assert not path.with_name("irqoff.log.4").exists()
    assert all(p.stat().st_size <= 400 for p in kept)
    text = [line for p in kept for line in p.read_text().splitlines()]
    assert text == lines[-len(text):] and len(text) >= 9  # the newest, in order, none cut
