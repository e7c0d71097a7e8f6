"""How test outcomes travel from the guest's pytest to the host's: JSON lines in a file on
a directory both share (9p, read-write), one record per event, flushed as they happen so
that what ran before a panic or a hang is kept.

Reports are pytest's own serialisation (``pytest_report_to_serializable``, as pytest-xdist
uses), so the host replays them with their outcome, longrepr, captured output and duration.
"""

from __future__ import annotations

import json
import os

import pytest


class GuestReporter:
    """In-guest plugin: writes every report of the session to ``path``."""

    def __init__(self, config, path: str):
        self.config = config
        self.file = open(path, "a", encoding="utf-8")

    def _write(self, record: dict) -> None:
        self.file.write(json.dumps(record, default=repr) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())  # the guest may die right after: get it to the host now

    def _serial(self, report) -> dict:
        return self.config.hook.pytest_report_to_serializable(config=self.config, report=report)

    def pytest_sessionstart(self, session):
        self._write({"event": "session", "kernel": os.uname().release, "lsm": active_lsms()})

    def pytest_runtest_logstart(self, nodeid, location):
        self._write({"event": "start", "nodeid": nodeid})

    def pytest_runtest_logreport(self, report):
        self._write({"event": "report", "data": self._serial(report)})

    def pytest_collectreport(self, report):
        if report.failed:
            self._write({"event": "collect", "nodeid": report.nodeid, "text": str(report.longrepr)})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self._write({"event": "finish", "exitstatus": int(exitstatus)})
        self.file.close()


def active_lsms() -> str | None:
    try:
        with open("/sys/kernel/security/lsm") as f:
            return f.read().strip()
    except OSError:
        return None


class GuestResults:
    """The host's reading of a results file."""

    def __init__(self, config, path: str):
        self.reports: dict[str, list] = {}
        self.started: list[str] = []
        self.collect_errors: list[str] = []
        self.session: dict = {}
        self.finished = False
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short by a dying guest
            event = record.get("event")
            if event == "report":
                data = record["data"]
                if isinstance(data.get("longrepr"), list):  # a skip's (path, line, reason): JSON made it a list
                    data["longrepr"] = tuple(data["longrepr"])
                report = config.hook.pytest_report_from_serializable(config=config, data=data)
                self.reports.setdefault(report.nodeid, []).append(report)
            elif event == "start":
                self.started.append(record["nodeid"])
            elif event == "collect":
                self.collect_errors.append(f"{record['nodeid']}:\n{record['text']}")
            elif event == "session":
                self.session = record
            elif event == "finish":
                self.finished = True

    def complete(self, nodeid: str) -> bool:
        return any(r.when == "teardown" for r in self.reports.get(nodeid, []))


def synthetic_reports(item, outcome: str, text: str, before=()) -> list:
    """setup/call/teardown reports for ``item``, which did not (fully) run in the guest.

    ``before`` are the reports the guest did send (e.g. a passed setup before the VM died
    during the call); the first missing phase gets ``outcome`` ("failed" or "skipped") with
    ``text``, and the phases after it pass (no call after a setup that did not pass)."""
    from _pytest.reports import TestReport

    def report(phase, result, longrepr=None):
        return TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, result, longrepr,
                          phase, sections=[], duration=0.0, user_properties=list(item.user_properties))

    if outcome == "skipped":
        fault = (outcome, (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {text}"))
    else:
        fault = (outcome, text)
    reports = list(before)
    have = {r.when: r for r in reports}
    for phase in ("setup", "call", "teardown"):
        setup = have.get("setup")
        if phase in have or (phase == "call" and setup is not None and not setup.passed):
            continue
        have[phase] = report(phase, *fault) if fault else report(phase, "passed")
        reports.append(have[phase])
        fault = None
    return reports
