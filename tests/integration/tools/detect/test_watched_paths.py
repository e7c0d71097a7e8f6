"""Files and directories rules name (fd.name, fd.directory) are watched by the kernel like the
baits, without the kill: a write, create, truncate, rename or unlink there raises the rule's
alert, with the file's path; reads and other files raise nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import alerts_within
from ebpfkit.tools import detect

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

RULE_NAMES = ("Secret changed", "Job planted")
RULES = """
- rule: Secret changed
  condition: >
    evt.type in (open, openat, openat2, creat, truncate, ftruncate, rename, renameat, renameat2, unlink, unlinkat)
    and fd.name in ({secret})
  output: "%fd.name: %evt.type by %proc.name"
  priority: WARNING
  tags: [T1098]
- rule: Job planted
  condition: evt.type in (open, openat, openat2, creat) and fd.directory = {jobs}
  output: "%fd.name: %evt.type by %proc.name"
  priority: WARNING
  tags: [T1053.003]
  exceptions:
    - name: the scheduler
      fields: proc.name
      values: [crontab]
"""


def python(code: str) -> int:
    return subprocess.run([sys.executable, "-c", code], timeout=30).returncode


def test_a_named_file_and_a_named_directory(tmp_path):
    secret, jobs = tmp_path / "secret", tmp_path / "jobs"
    secret.write_text("s3cret")
    jobs.mkdir()
    (jobs / "old").write_text("x")
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(secret=secret, jobs=jobs))
    with detect.open(rules=(str(rules),)) as session:
        assert {str(jobs), str(secret)} <= {e.path for e in session.watching}
        assert python(f"open({str(secret)!r}).read(); open({str(jobs / 'old')!r}).read()") == 0   # reads
        assert python(f"open({str(tmp_path / 'other')!r}, 'w').write('x')") == 0                   # elsewhere
        quiet = alerts_within(session, 0.5, *RULE_NAMES)
        assert python(f"open({str(secret)!r}, 'a').write('more')") == 0
        assert python(f"open({str(jobs / 'evil')!r}, 'w').write('* * * * * root sh')") == 0      # created
        assert python(f"open({str(jobs / 'old')!r}, 'w')") == 0                                     # truncated
        assert python(f"import os; os.rename({str(secret)!r}, {str(tmp_path / 'moved')!r})") == 0
        alerts = alerts_within(session, 1.0, *RULE_NAMES)
    assert quiet == []
    seen = [(a.rule, a.event["evt.type"], a.event["fd.name"], a.action, a.event["evt.killed"]) for a in alerts]
    rename = next(t for _, t, name, _, _ in seen if name == str(secret) and t.startswith("rename"))
    assert seen == [("Secret changed", "openat", str(secret), "alert", "false"),
                    ("Job planted", "openat", str(jobs / "evil"), "alert", "false"),
                    ("Job planted", "openat", str(jobs / "old"), "alert", "false"),
                    ("Secret changed", rename, str(secret), "alert", "false")]
    assert alerts[1].event["fd.directory"] == str(jobs) and alerts[1].event["fd.filename"] == "evil"


def test_a_path_that_does_not_exist_is_not_watched_and_said_so(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES.format(secret=tmp_path / "none", jobs=tmp_path / "nodir"))
    with detect.open(rules=(str(rules),)) as session:
        assert {str(tmp_path / "none"), str(tmp_path / "nodir")} <= set(session.unwatched)


def test_the_builtin_file_rules_are_off_until_switched_on(tmp_path):
    with detect.open() as session:
        assert session.watching == [] and "watched files" not in session.hook
    on = tmp_path / "on.yaml"
    on.write_text("- rule: Account or sudo file changed\n  enabled: true\n")
    with detect.open(rules=(str(on),)) as session:
        assert "/etc/shadow" in [e.path for e in session.watching]


def test_an_account_file_opened_for_writing_by_a_stranger(tmp_path):
    """/etc/shadow opened for appending and closed, nothing written: the built-in rule's call."""
    on = tmp_path / "on.yaml"
    on.write_text("- rule: Account or sudo file changed\n  enabled: true\n")
    with detect.open(rules=(str(on),)) as session:
        assert "/etc/shadow" in [e.path for e in session.watching]
        assert python("open('/etc/shadow', 'ab').close()") == 0
        alerts = alerts_within(session, 1.0, "Account or sudo file changed")
    assert [(a.event["fd.name"], a.event["evt.type"], a.event["proc.name"]) for a in alerts] == [
        ("/etc/shadow", "openat", "python")]


RENAME_RULE = """
- rule: Moved into jobs
  condition: evt.type in (rename, renameat, renameat2) and fd.directory = {jobs}
  output: "%fd.name: %evt.type by %proc.name"
  priority: WARNING
"""


def test_a_file_renamed_into_a_watched_directory_however_its_new_path_is_written(tmp_path):
    """The kernel sees only the new path's text: a bare name is matched by its directory's
    inode (the working directory or newdirfd), a path by its parent's name and then by inode in
    user space, a parent written "." or ".." only in user space. Renames elsewhere, into a
    directory that only shares the watched one's name too, raise nothing."""
    jobs, other, decoy = tmp_path / "jobs", tmp_path / "other", tmp_path / "decoy" / "jobs"
    for d in (jobs, other, decoy):
        d.mkdir(parents=True)
    for n in range(1, 6):
        (tmp_path / f"staged{n}").write_text("* * * * * root sh")
    (tmp_path / "plain").write_text("x")
    rules = tmp_path / "rules.yaml"
    rules.write_text(RENAME_RULE.format(jobs=jobs))
    moves = [
        f"os.rename({str(tmp_path / 'staged1')!r}, {str(jobs / 'evil1')!r})",            # absolute
        f"os.chdir({str(jobs)!r}); os.rename('../staged2', 'evil2')",                    # a name, in the cwd
        f"d = os.open({str(jobs)!r}, os.O_RDONLY); s = os.open({str(tmp_path)!r}, os.O_RDONLY); "
        f"os.rename('staged3', 'evil3', src_dir_fd=s, dst_dir_fd=d)",                   # a name, at newdirfd
        f"os.chdir({str(other)!r}); os.rename('../staged4', '../jobs/evil4')",           # relative, parent named
        f"os.chdir({str(tmp_path)!r}); os.rename('staged5', 'jobs/./evil5')",            # parent "."
    ]
    elsewhere = [
        f"os.rename({str(tmp_path / 'plain')!r}, {str(other / 'plain')!r})",             # another directory
        f"os.rename({str(other / 'plain')!r}, {str(decoy / 'plain')!r})",                # same name, not it
        f"os.chdir({str(decoy)!r}); os.rename('plain', 'plain2')",                       # a name, not in it
    ]
    with detect.open(rules=(str(rules),)) as session:
        assert str(jobs) in {e.path for e in session.watching}
        for code in elsewhere:
            assert python(f"import os; {code}") == 0
        quiet = alerts_within(session, 0.5, "Moved into jobs")
        for code in moves:
            assert python(f"import os; {code}") == 0
        alerts = alerts_within(session, 1.0, "Moved into jobs")
    assert quiet == []
    assert sorted(a.event["fd.name"] for a in alerts) == [str(jobs / f"evil{n}") for n in range(1, 6)]
    assert all(a.event["evt.type"].startswith("rename") and a.event["fd.directory"] == str(jobs) for a in alerts)
