"""ebpfkit.sysinfo.events over fake trees: which event sources and symbols a kernel offers."""

from __future__ import annotations

from ebpfkit.sysinfo.events import hardware_pmu, kallsyms_lists, tracepoint_exists


def test_a_pmu_is_the_cpu_event_source(tmp_path):
    (tmp_path / "software").mkdir()
    assert not hardware_pmu(str(tmp_path))
    (tmp_path / "cpu").mkdir()
    assert hardware_pmu(str(tmp_path))
    assert not hardware_pmu(str(tmp_path / "missing"))


def test_a_tracepoint_exists_when_tracefs_lists_it(tmp_path):
    (tmp_path / "events" / "preemptirq" / "irq_disable").mkdir(parents=True)
    assert tracepoint_exists("preemptirq", "irq_disable", str(tmp_path))
    assert not tracepoint_exists("preemptirq", "irq_enable", str(tmp_path))


def test_kallsyms_names_are_whole_names(tmp_path):
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_text("0000000000000000 A fixed_percpu_data\n000000000002c2c0 D __preempt_count\n"
                        "ffffffff81000000 T __preempt_count_add\n")
    assert kallsyms_lists({"__preempt_count", "pcpu_hot"}, str(kallsyms)) == {"__preempt_count"}
    assert kallsyms_lists({"x"}, str(tmp_path / "missing")) == set()


def test_preempt_count_is_per_cpu_on_x86_where_kallsyms_lists_it(tmp_path, monkeypatch):
    from ebpfkit.sysinfo import events

    listed, unlisted = tmp_path / "listed", tmp_path / "unlisted"
    listed.write_text("000000000002c2c0 D pcpu_hot\n")
    unlisted.write_text("ffffffff81000000 T __preempt_count_add\n")
    monkeypatch.setattr(events.platform, "machine", lambda: "x86_64")
    assert events.preempt_count_per_cpu(str(listed)) is True
    assert events.preempt_count_per_cpu(str(unlisted)) is False  # no CONFIG_KALLSYMS_ALL
    monkeypatch.setattr(events.platform, "machine", lambda: "aarch64")
    assert events.preempt_count_per_cpu(str(listed)) is None  # in the task's thread_info
