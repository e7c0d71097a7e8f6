"""Detection rules (the Falco-compatible subset): conditions, lists, macros, exceptions, append,
and errors that name the line; fuzzed input never escapes as anything but PolicyError."""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ebpfkit.policy import PolicyError
from ebpfkit.policy.condition import ConditionError, FieldSpec, Parser
from ebpfkit.policy.rules import parse_rules

FIELDS = {
    "evt.type": FieldSpec(), "proc.name": FieldSpec(), "proc.pid": FieldSpec("int"),
    "proc.cmdline": FieldSpec(), "proc.aname": FieldSpec(indexed=True), "proc.anames": FieldSpec("strs"),
    "fd.num": FieldSpec("int"), "fd.name": FieldSpec(), "fd.sport": FieldSpec("int"),
}
EXEC = {"evt.type": "execve", "proc.name": "bash", "proc.pid": 42, "proc.cmdline": "bash -i",
        "proc.aname[1]": "nginx", "proc.anames": ["nginx", "systemd"], "fd.num": 1}


def cond(text: str, lists=None):
    return Parser(lists or {}, None, FIELDS).parse(text)


def rules(text: str, **kw):
    return parse_rules(textwrap.dedent(text), source="test.yaml", fields=FIELDS, **kw)


@pytest.mark.parametrize("text, expected", [
    ("proc.name = bash", True),
    ("proc.name == bash", True),
    ("proc.name != bash", False),
    ("proc.pid = 42", True),
    ("proc.pid > 41 and proc.pid <= 42", True),
    ("proc.pid < 42", False),
    ("proc.cmdline contains '-i'", True),
    ("proc.cmdline icontains 'BASH'", True),
    ("proc.cmdline startswith bash", True),
    ("proc.cmdline endswith '-x'", False),
    ("proc.name glob 'b?s*'", True),
    ("proc.name in (sh, bash)", True),
    ("proc.name in (sh, dash)", False),
    ("proc.anames intersects (nginx, httpd)", True),
    ("proc.anames contains systemd", True),
    ("fd.name pmatch (/etc, /var/lib)", False),
    ("proc.aname[1] = nginx", True),
    ("fd.num exists", True),
    ("fd.name exists", False),
    ("fd.name = x", False),             # a field the event lacks: false, whatever the operator
    ("fd.name != x", False),
    ("not fd.name = x", True),
    ("proc.name = sh or proc.name = bash and proc.pid = 1", False),   # and binds tighter than or
    ("(proc.name = sh or proc.name = bash) and proc.pid = 42", True),
    ("not not proc.name = bash", True),
    ('proc.cmdline = "bash -i"', True),
])
def test_conditions(text, expected):
    assert cond(text).match(EXEC) is expected


def test_pmatch_is_a_path_prefix_not_a_string_prefix():
    node = cond("fd.name pmatch (/etc, /srv/data/)")
    assert node.match({"fd.name": "/etc/shadow"}) and node.match({"fd.name": "/etc"})
    assert node.match({"fd.name": "/srv/data/x"})
    assert not node.match({"fd.name": "/etcetera"})


def test_a_list_item_naming_a_list_stands_for_its_items():
    assert cond("proc.name in (shells, zsh)", {"shells": ("sh", "bash")}).match(EXEC)


@pytest.mark.parametrize("text, message, column", [
    ("proc.name =", "where a value after = was expected", None),
    ("proc.name = bash and", "the condition ends", None),
    ("proc.nam = bash", "unknown field 'proc.nam'", 1),
    ("proc.name ~ bash", "unknown operator '~'", 11),
    ("proc.name is bash", "unknown operator 'is'", 11),
    ("proc.pid = many", "proc.pid is a number", 12),
    ("proc.name > a", "compares numbers", 11),
    ("proc.name in bash", "takes a list in parentheses", 14),
    ("(proc.name = bash", "where ) was expected", None),
    ("proc.name = bash)", "unexpected ')'", 17),
    ("proc.aname = x", "takes an index", 1),
    ("proc.name[2] = x", "takes no index", 1),
    ("shells_macro", "unknown macro 'shells_macro'", 1),
    ("", "empty", None),
])
def test_condition_errors_say_what_and_where(text, message, column):
    with pytest.raises(ConditionError) as err:
        cond(text)
    assert message in str(err.value)
    assert err.value.column == column


def test_a_rule_file_with_lists_macros_and_forward_references():
    rs = rules("""
        - rule: Shell under a web server
          desc: a shell whose parent is a web server
          condition: spawned_shell and proc.aname[1] in (web_servers)
          output: "shell %proc.name (pid %proc.pid) under %proc.aname[1], fd %fd.name"
          priority: warning
          tags: [process, mitre_execution, T1059.004]
        - macro: spawned_shell
          condition: evt.type = execve and proc.name in (shells)
        - list: shells
          items: [sh, bash]
        - list: web_servers
          items: [nginx, httpd]
    """)
    rule = rs.rules["Shell under a web server"]
    assert rule.priority == "WARNING" and rule.techniques == ("T1059.004",) and rule.line == 2
    assert rule.matches(EXEC)
    assert not rule.matches(dict(EXEC, **{"proc.aname[1]": "cron"}))
    assert rule.render(EXEC) == "shell bash (pid 42) under nginx, fd <NA>"
    assert rule.fields == {"evt.type", "proc.name", "proc.pid", "proc.aname[1]", "fd.name"}


def test_exceptions_rows_and_the_single_field_form():
    rs = rules("""
        - rule: r
          condition: evt.type = execve
          output: x
          priority: NOTICE
          exceptions:
            - name: pairs
              fields: [proc.name, proc.pid]
              values: [[bash, 42], [sh, 7]]
            - name: prefixes
              fields: [proc.cmdline]
              comps: [startswith]
              values: [[/opt/]]
            - name: names
              fields: proc.name
              values: [cron, atd]
    """)
    rule = rs.rules["r"]
    assert not rule.matches(EXEC)                                          # bash, 42
    assert rule.matches(dict(EXEC, **{"proc.pid": 43}))
    assert not rule.matches(dict(EXEC, **{"proc.pid": 43, "proc.cmdline": "/opt/x"}))
    assert not rule.matches(dict(EXEC, **{"proc.name": "atd", "proc.pid": 1}))


def test_append_extends_lists_macros_and_rules_and_enabled_switches_a_rule():
    base = rules("""
        - list: shells
          items: [sh]
        - macro: m
          condition: proc.name in (shells)
        - rule: r
          condition: m
          output: x
          priority: INFO
    """)
    rs = rules("""
        - list: shells
          items: [bash]
          append: true
        - rule: r
          condition: and proc.pid = 42
          append: true
        - rule: r2
          condition: proc.pid = 1
          output: y
          priority: DEBUG
        - rule: r2
          enabled: false
    """, ruleset=base)
    assert rs.lists["shells"] == ("sh", "bash")
    assert rs.rules["r"].priority == "INFORMATIONAL"
    assert rs.rules["r"].matches(EXEC) and not rs.rules["r"].matches(dict(EXEC, **{"proc.pid": 1}))
    assert not rs.rules["r2"].enabled and [r.name for r in rs.enabled()] == ["r"]


def test_baits_are_declared_extended_and_kept_apart_from_rules():
    ruleset = rules("- bait: shares\n  paths: [/srv/a/!0.docx, /srv/b/!0.docx]\n"
                    "- bait: home\n  paths: [/home/u/!0.xlsx]\n  plant: false\n"
                    "- bait: shares\n  paths: [/srv/c/!0.docx, /srv/a/!0.docx]\n  append: true\n")
    assert ruleset.rules == {}
    shares, home = ruleset.baits["shares"], ruleset.baits["home"]
    assert shares.paths == ("/srv/a/!0.docx", "/srv/b/!0.docx", "/srv/c/!0.docx") and shares.plant
    assert (shares.source, shares.line) == ("test.yaml", 1)
    assert home.paths == ("/home/u/!0.xlsx",) and not home.plant


def test_falco_engine_version_items_are_accepted():
    assert rules("- required_engine_version: 0.31.0\n").rules == {}


@pytest.mark.parametrize("text, message, line", [
    ("- rule: r\n  condition: proc.nam = a\n  output: o\n  priority: INFO\n", "unknown field 'proc.nam'", 2),
    ("- rule: r\n  condition: proc.name = a\n  priority: INFO\n", "has no output", 1),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: LOUD\n", "priority 'LOUD'", 4),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: INFO\n  colour: red\n",
     "unknown key 'colour'", 5),
    ("- rule: r\n  condition: proc.name = a\n  output: o %proc.nope\n  priority: INFO\n",
     "unknown field %proc.nope", 3),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: INFO\n  action: shout\n",
     "action must be alert or kill", 5),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: INFO\n  fuse: proc.nope\n",
     "fuse names 'proc.nope'", 5),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: INFO\n  rate_limit: 0\n",
     "rate_limit is alerts a second", 5),
    ("- macro: a\n  condition: b\n- macro: b\n  condition: a\n", "cycle: a -> b -> a", 2),
    ("- rule: r\n  condition: nope\n  output: o\n  priority: INFO\n", "unknown macro 'nope'", 2),
    ("- list: l\n  items: [a]\n  append: true\n", "no list 'l' comes before it", 1),
    ("- rule: r\n  enabled: false\n", "no rule 'r' comes before it", 1),
    ("- lst: x\n", "must be a rule, a macro, a list or a bait", 1),
    ("- bait: b\n  plant: true\n", "bait 'b' has no paths", 1),
    ("- bait: b\n  paths: [relative/f.docx]\n", "is not an absolute path of a file", 2),
    ("- bait: b\n  paths: [/srv/]\n", "is not an absolute path of a file", 2),
    ("- bait: b\n  paths: []\n", "bait 'b' has no paths", 2),
    ("- bait: b\n  paths: [/srv/f]\n  plant: maybe\n", "plant must be true or false", 3),
    ("- bait: b\n  paths: [/srv/f]\n  append: true\n", "no bait 'b' comes before it", 1),
    ("rule: x\n", "a rules file is a list", 1),
    ("- rule: r\n  condition: [a\n", "invalid YAML", 3),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: INFO\n  exceptions:\n"
     "    - name: e\n      fields: [proc.name, proc.pid]\n      values: [[a]]\n",
     "a row of values has 1 items for 2 fields", 8),
    ("- rule: r\n  condition: proc.name = a\n  output: o\n  priority: INFO\n  exceptions:\n"
     "    - name: e\n      fields: [proc.pid]\n      values: [[x]]\n", "proc.pid is a number", 8),
])
def test_rule_file_errors_name_the_line(text, message, line):
    with pytest.raises(PolicyError) as err:
        parse_rules(text, source="test.yaml", fields=FIELDS)
    assert message in err.value.message, err.value.message
    assert err.value.line == line
    assert str(err.value).startswith(f"test.yaml:{line}: ")


WORDS = st.sampled_from(["proc.name", "proc.pid", "fd.num", "and", "or", "not", "(", ")", ",", "=", "!=", "<",
                         "in", "exists", "contains", "bash", "42", "'q'", "\"", "shells", "proc.aname[1]",
                         "pmatch", "x.y", "[", "]"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(WORDS, max_size=12))
def test_fuzzed_conditions_parse_or_raise_condition_error(words):
    try:
        cond(" ".join(words), {"shells": ("sh",)})
    except ConditionError:
        pass


ITEM_KEYS = st.sampled_from(["rule", "macro", "list", "bait", "paths", "plant", "condition", "output", "priority", "items", "append",
                             "enabled", "exceptions", "tags", "action", "fields", "values", "name", "comps"])
SCALARS = st.one_of(st.sampled_from(["r", "proc.name = a", "INFO", "true", "[a, b]", "x %proc.pid", "kill", ""]),
                    st.text(max_size=12))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(ITEM_KEYS, SCALARS, max_size=5), max_size=4))
def test_fuzzed_rule_files_load_or_raise_policy_error(items):
    import yaml

    text = yaml.safe_dump(items)
    try:
        parse_rules(text, fields=FIELDS)
    except PolicyError as err:
        assert err.source == "<rules>"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_fuzzed_text_loads_or_raises_policy_error(text):
    try:
        parse_rules(text, fields=FIELDS)
    except PolicyError:
        pass
