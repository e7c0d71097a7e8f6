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


def test_page_counts_each_tools_tests_and_names_its_hook(tmp_path):
    km = load()
    run = tmp_path / "5.10"
    run.mkdir()
    (run / "release").write_text("5.10.0-32-amd64\n")
    (run / "junit.xml").write_text(JUNIT)
    (run / "doctor.json").write_text(json.dumps({"tools": {
        "runqlat": {"runs": True, "hook": "raw tracepoint sched_switch"},
        "guard": {"runs": False, "hook": "needs task storage (5.11)"}}}))
    page = km.report(str(tmp_path), ["5.10"])
    assert "| 5.10 (5.10.0-32-amd64) |" in page
    assert "| runqlat | raw tracepoint sched_switch (1/2 passed, **1 failed**) |" in page
    assert "| guard | **no**: needs task storage (5.11) (0/1 passed, 1 skipped) |" in page
    assert "| (all tools) | - (1/1 passed) |" in page
    assert "- 5.10: 3 of 4 tests passed, 1 failed" in page


def test_a_kernel_whose_run_left_nothing_is_shown_empty(tmp_path):
    km = load()
    (tmp_path / "6.1").mkdir()
    page = km.report(str(tmp_path), ["6.1"])
    assert "| 6.1 (?) |" in page and "- 6.1: 0 of 0 tests passed" in page
