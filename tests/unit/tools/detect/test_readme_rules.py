"""The README's example rules file is valid after the built-in rules, and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

from ebpfkit.policy.rules import parse_rules
from ebpfkit.tools.detect.fields import FIELDS
from ebpfkit.tools.detect.session import BUILTIN_RULES

README = Path(__file__).resolve().parents[4] / "README.md"


def test_the_readme_rules_example_extends_the_builtin_rules():
    section = README.read_text().split("### detect: rules", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    builtin = parse_rules(Path(BUILTIN_RULES).read_text(), source=BUILTIN_RULES, fields=FIELDS)
    rules = parse_rules(example, source="README.md", fields=FIELDS, ruleset=builtin)
    assert "rbash" in rules.lists["shell_binaries"]
    assert not rules.rules["Shell under a web server"].enabled
    ssh = rules.rules["Outbound SSH from a web server"]
    event = {"evt.type": "connect", "fd.rport": 22, "proc.aname[1]": "nginx", "fd.rip": "198.51.100.7"}
    assert ssh.matches(event) and not ssh.matches(dict(event, **{"fd.rip": "192.0.2.10"}))
