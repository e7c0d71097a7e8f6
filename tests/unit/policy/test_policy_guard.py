"""The guard policy parser: valid forms, errors with the line, fuzzing never crashes it."""

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from ebpfkit.policy import DEFAULT_DENY, OPERATIONS, PolicyError, parse_guard_policy

GOOD = """\
mode: audit
protect:
  - /etc/hostname
  - path: /srv/data
    deny: [write, read, exec]
trust:
  - path: /usr/sbin/backup
    inherit: true
  - /usr/bin/vim
processes:
  - /usr/sbin/sshd
"""


def test_full_policy():
    p = parse_guard_policy(GOOD)
    assert p.mode == "audit"
    assert p.protect[0].path == "/etc/hostname" and p.protect[0].deny == DEFAULT_DENY
    # deny: adds to the defaults
    assert p.protect[1].deny == DEFAULT_DENY + ("read", "exec")
    assert p.protect[1].mask == sum(OPERATIONS.values())
    assert p.protect[1].line == 4
    assert [(t.path, t.inherit) for t in p.trust] == [("/usr/sbin/backup", True), ("/usr/bin/vim", False)]
    assert [r.path for r in p.processes] == ["/usr/sbin/sshd"]


def test_baits_of_a_detect_rules_file_are_protected(tmp_path):
    rules = tmp_path / "baits.yaml"
    rules.write_text("- list: shell_binaries\n  items: [fish]\n  append: true\n"   # detect's own list
                     "- bait: shares\n  paths: [/srv/a/!0.docx, /srv/b//!0.docx]\n")
    p = parse_guard_policy(f"mode: enforce\nbaits:\n  - {rules}\n")
    assert [(r.path, r.deny, r.line) for r in p.protect] == [("/srv/a/!0.docx", DEFAULT_DENY, 3),
                                                            ("/srv/b/!0.docx", DEFAULT_DENY, 3)]


def test_a_bad_baits_file_is_an_error_naming_it(tmp_path):
    rules = tmp_path / "baits.yaml"
    rules.write_text("- bait: shares\n  paths: [relative.docx]\n")
    with pytest.raises(PolicyError) as err:
        parse_guard_policy(f"baits: [{rules}]\n")
    assert str(err.value).startswith(f"{rules}:2: ")
    with pytest.raises(PolicyError, match="cannot read"):
        parse_guard_policy(f"baits: [{tmp_path}/missing.yaml]\n")


def test_deny_adds_to_the_defaults_and_allow_takes_from_them():
    """`deny: [write, read]` used to replace the defaults, leaving unlink and rename allowed:
    now it adds, and `allow:` is the explicit way to narrow."""
    p = parse_guard_policy("protect:\n"
                           "  - path: /a\n    deny: [write, read]\n"
                           "  - path: /b\n    deny: [read]\n    allow: [write, unlink, rename, link, setattr]\n"
                           "  - path: /c\n    allow: [setattr]\n"
                           "  - path: /d\n    deny: [exec]\n")
    assert [r.deny for r in p.protect] == [DEFAULT_DENY + ("read",), ("read",),
                                           ("write", "unlink", "rename", "link"), DEFAULT_DENY + ("exec",)]
    assert p.to_dict()["protect"][1] == {"path": "/b", "deny": ["read"]}


def test_interpreters_are_paths():
    p = parse_guard_policy("protect: [/a]\ninterpreters: [/opt/py/bin/python3, /usr//bin/tcl]\n")
    assert p.interpreters == ["/opt/py/bin/python3", "/usr/bin/tcl"]
    assert p.to_dict()["interpreters"] == p.interpreters


def test_defaults_and_normalised_paths():
    p = parse_guard_policy("protect: [/etc//x/../hostname]\n")
    assert p.mode == "enforce" and p.protect[0].path == "/etc/hostname"


@pytest.mark.parametrize("text, line, words", [
    ("mode: enforce\nprotect:\n  - path: /a\n    deny: [wrte]\n", 4, "unknown operation 'wrte'"),
    ("mode: block\nprotect: [/a]\n", 1, "mode must be one of"),
    ("protect: [/a]\nextra: 1\n", 2, "unknown key 'extra'"),
    ("protect:\n  - relative/path\n", 2, "absolute path"),
    ("protect:\n  - deny: [write]\n", 2, "needs a 'path'"),
    ("protect: [/a]\ntrust:\n  - path: /b\n    inherit: maybe\n", 4, "true or false"),
    ("protect: /a\n", 1, "must be a list"),
    ("protect: [/a]\nprotect: [/b]\n", 2, "duplicate key"),
    ("protect:\n  - path: /a\n    deny: []\n", 3, "at least one"),
    ("protect:\n  - path: /a\n    deny: [read]\n    allow: [read]\n", 4, "read both denied and allowed"),
    ("protect:\n  - path: /a\n    allow: [write, unlink, rename, link, setattr]\n", 2, "denies nothing"),
    ("protect:\n  - path: /a\n    allow: [reed]\n", 3, "unknown operation 'reed' in allow"),
    ("protect: [/a]\ninterpreters: [python3]\n", 2, "absolute path"),
    ("protect: [/a\n", 2, "invalid YAML"),
    ("trust: [/a]\n", 1, "protects nothing"),
    ("- /a\n", 1, "must be a mapping"),
])
def test_errors_point_at_the_line(text, line, words):
    with pytest.raises(PolicyError) as exc:
        parse_guard_policy(text, "p.yaml")
    assert exc.value.line == line, str(exc.value)
    assert words in str(exc.value)
    assert str(exc.value).startswith(f"p.yaml:{line}: ")


def test_empty_policy():
    with pytest.raises(PolicyError, match="empty policy"):
        parse_guard_policy("")


_keys = st.sampled_from(["mode", "protect", "trust", "processes", "interpreters", "path", "deny", "allow",
                         "inherit", "x"])
_scalars = st.one_of(st.sampled_from(["/a", "/etc", "write", "enforce", "audit", "true", "", "~", "&a", "*a"]),
                     st.text(max_size=12))
_values = st.recursive(_scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                    st.dictionaries(_keys, c, max_size=4)), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=200))
def test_fuzz_text_never_crashes(text):
    try:
        parse_guard_policy(text)
    except PolicyError:
        pass


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(_keys, _values, max_size=5))
def test_fuzz_structures_never_crash(doc):
    import yaml

    try:
        parse_guard_policy(yaml.safe_dump(doc))
    except PolicyError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=120))
def test_fuzz_check_command_exits_2_or_0(tmp_path_factory, text):
    from ebpfkit.cli import cli
    from ebpfkit.output.errors import describe_error

    path = tmp_path_factory.mktemp("p") / "policy.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["guard", "check", str(path)])
    failed = result.exception is not None and not isinstance(result.exception, SystemExit)
    code = describe_error(result.exception).code if failed else result.exit_code
    assert code in (0, 2), result.exception or result.output  # a policy error, never a crash
