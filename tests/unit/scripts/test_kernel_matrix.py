"""scripts/kernel_matrix.py's page, from results laid out as a run leaves them."""

import importlib.util
import json
import os

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts", "kernel_matrix.py")


def load():
    spec = importlib.util.spec_from_file_location("kernel_matrix", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="tests.integration.tools.runqlat.test_runqlat" name="a"/>
<testcase classname="tests.integration.tools.runqlat.test_runqlat" name="b"><failure message="x"/></testcase>
<testcase classname="tests.integration.tools.guard.test_guard" name="c"><skipped/></testcase>
<testcase classname="tests.integration.tools.test_signals" name="d"/>
</testsuite></testsuites>"""


def test_a_runs_summary_counts_each_tools_tests_names_its_hook_and_its_failures(tmp_path):
    km = load()
    run = tmp_path / "5.10"
    run.mkdir()
    (run / "release").write_text("5.10.0-32-amd64\n")
    (run / "junit.xml").write_text(JUNIT)
    (run / "doctor.json").write_text(json.dumps({"tools": {
        "runqlat": {"runs": True, "hook": "raw tracepoint sched_switch"},
        "guard": {"runs": False, "hook": "needs task storage (5.11)"}}}))
    summary = km.summarize(str(run), "5.10", "abc1234", "2026-12-07")
    assert summary["tests"]["runqlat"] == {"passed": 1, "failed": 1}
    assert summary["failures"] == [{"tool": "runqlat", "test": "tests.integration.tools.runqlat.test_runqlat::b",
                                    "message": "x"}]
    # the summary is what the page is written from, kept as JSON between sessions
    page = km.report([json.loads(json.dumps(summary))])
    assert "| 5.10 (5.10.0-32-amd64) |" in page
    assert "| runqlat | raw tracepoint sched_switch (1/2 passed, **1 failed**) |" in page
    assert "| guard | **no**: needs task storage (5.11) (0/1 passed, 1 skipped) |" in page
    assert "| (all tools) | - (1/1 passed) |" in page
    assert "- 5.10: 3 of 4 tests passed, 1 failed (run 2026-12-07, commit abc1234)" in page
    assert "- 5.10, tests.integration.tools.runqlat.test_runqlat::b: x" in page


def test_a_kernel_whose_run_left_nothing_is_shown_empty(tmp_path):
    km = load()
    (tmp_path / "6.1").mkdir()
    page = km.report([km.summarize(str(tmp_path / "6.1"), "6.1", "abc1234", "2026-12-07")])
    assert "| 6.1 (?) |" in page and "- 6.1: 0 of 0 tests passed" in page


def test_summaries_are_read_the_usual_kernels_first(tmp_path):
    km = load()
    for kernel in ("6.12", "5.15", "host", "5.10"):
        (tmp_path / f"{kernel}.json").write_text(json.dumps({"kernel": kernel}))
    assert [s["kernel"] for s in km.load_summaries(str(tmp_path))] == ["host", "5.10", "6.12", "5.15"]
