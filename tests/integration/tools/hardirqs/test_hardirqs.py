"""hardirqs against the real kernel: synchronous O_DIRECT writes (each fsync'd) to a file on
the disk under the test's temporary directory make its virtio queue raise a completion IRQ,
and the kernel's own count of that IRQ (/proc/interrupts, summed over CPUs, read around the
same interval) is the ground truth for the tool's count, in the session, in each output
format and per CPU. Bad options exit 2; SIGINT, SIGTERM and SIGKILL leave nothing attached."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from helpers import bcc_dialect_through_ebpfkit, same_config_error, signalled_run_leaves_nothing
from irqs import WRITES, direct_writes, disk_irqs, interrupts

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]



def by_irq(stats) -> dict[int, int]:
    """{irq: count} from session rows or parsed output rows (dicts), summed over CPUs."""
    counts: dict[int, int] = {}
    for s in stats:
        s = s if isinstance(s, dict) else vars(s)
        counts[int(s["irq"])] = counts.get(int(s["irq"]), 0) + int(s["count"])
    return counts


def close_to(tool: int, truth: int) -> bool:
    """The tool drains its map a few ms from where /proc/interrupts is read (others' IO may
    land in between), and a drain can lose an increment racing with it: within 10%."""
    return abs(tool - truth) <= max(5, truth // 10)


@pytest.mark.parametrize("settings", [{}, {"counts_only": True}, {"per_cpu": True}, {"dist": True},
                                      {"engine": "bcc", "dist": True, "per_cpu": True}])
def test_session_counts_the_disk_irqs_proc_interrupts_counts(tmp_path, settings, monkeypatch):
    """engine="bcc": its BCC-dialect program, here through ebpfkit's translation of it."""
    from ebpfkit.tools import hardirqs

    irqs = disk_irqs(tmp_path)
    if settings.get("engine") == "bcc":
        bcc_dialect_through_ebpfkit(monkeypatch, hardirqs.session.Session)
    with hardirqs.open(**settings) as session:
        assert session.hook in ((hardirqs.session.BCC_HOOK,) if settings.get("engine") else
                                (hardirqs.session.TYPED_HOOK, hardirqs.session.RAW_HOOK))
        session.sample()  # from here on
        before = interrupts()
        direct_writes(tmp_path / "data")
        after = interrupts()
        stats = session.sample()
    truth = {irq: after[irq][1] - before[irq][1] for irq in irqs}
    assert sum(truth.values()) >= WRITES // 4, f"the writes raised few IRQs: {truth}"
    counted = by_irq(stats)
    for irq, name in irqs.items():
        assert close_to(counted.get(irq, 0), truth[irq]), (name, counted.get(irq), truth[irq])
    for s in stats:
        if s.irq in irqs:
            assert s.name == irqs[s.irq]  # the handler's name, as /proc/interrupts shows it
            assert (s.cpu is not None) == bool(settings.get("per_cpu"))
            if settings.get("counts_only"):
                assert s.total_ns == 0 and s.histogram is None
            else:
                assert 0 < s.total_ns < s.count * 10_000_000  # under 10 ms a run
            if settings.get("dist"):
                assert s.histogram.total == s.count and s.histogram.label.startswith(f"hardirq = {s.name}")


# --- the command, in each format ----------------------------------------------------------------

def parse_json(text: str) -> list[dict]:
    return [row for line in text.splitlines() for row in json.loads(line)["rows"]]


def parse_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


TABLE_ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)$")  # HARDIRQ IRQ COUNT TOTAL_usecs


def parse_table(text: str) -> list[dict]:
    return [{"name": m[1], "irq": m[2], "count": m[3]} for line in text.splitlines()
            if (m := TABLE_ROW.match(line.strip()))]


@pytest.mark.parametrize("fmt, parse", [("json", parse_json), ("csv", parse_csv), ("table", parse_table)])
def test_command_counts_the_disk_irqs(tmp_path, fmt, parse):
    """The command's intervals, in each format, cover less than the run does: their sum for
    the disk's IRQs lies between what our writes caused and what /proc/interrupts counted
    over the whole run."""
    irqs = disk_irqs(tmp_path)
    before = interrupts()
    proc = subprocess.Popen([sys.executable, "-m", "ebpfkit", "--format", fmt, "hardirqs", "0.5", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, NO_COLOR="1", COLUMNS="120"))
    for line in proc.stderr:
        if "Hit Ctrl-C" in line:
            break
    direct_writes(tmp_path / "data", 100)
    stdout, stderr = proc.communicate(timeout=60)
    after = interrupts()
    assert proc.returncode == 0, stderr
    counted = sum(c for irq, c in by_irq(parse(stdout)).items() if irq in irqs)
    truth = sum(after[irq][1] - before[irq][1] for irq in irqs)
    assert 100 // 4 <= counted <= truth, (counted, truth, stdout)


def test_bad_options_exit_2_with_the_reason(capsys):
    from ebpfkit.tools import hardirqs

    same_config_error(capsys, hardirqs.Config, {"counts_only": True, "dist": True},
                      ["hardirqs", "-c", "-d", "1", "1"], "'-c' / '--count'", "cannot be combined with dist")
    same_config_error(capsys, hardirqs.Config, {"counts_only": True, "nanoseconds": True},
                      ["hardirqs", "--count", "-N", "1", "1"], "'-c' / '--count'",
                      "cannot be combined with nanoseconds")
    for args in (["-1"], ["0"], ["1", "0"], ["--per-cpu=2"]):
        cli = subprocess.run([sys.executable, "-m", "ebpfkit", "hardirqs", *args], capture_output=True,
                             text=True, timeout=60)
        assert cli.returncode == 2, (args, cli.stderr)
        assert "Error:" in cli.stderr and "Traceback" not in cli.stderr, cli.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_leaves_nothing_attached(sig):
    signalled_run_leaves_nothing(["hardirqs", "1"], sig)
