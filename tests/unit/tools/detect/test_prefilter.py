"""What the kernel may drop, worked out from the rules: a sound over-approximation per kind."""

from __future__ import annotations

from ebpfkit.policy.rules import parse_rules
from ebpfkit.tools.detect import prefilter
from ebpfkit.tools.detect.fields import FIELDS
from ebpfkit.tools.detect.session import Config, load_ruleset


def rules(*conditions: str):
    text = "".join(f"- rule: r{i}\n  condition: {c}\n  output: x\n  priority: INFO\n" for i, c in enumerate(conditions))
    return parse_rules(text, fields=FIELDS).rules.values()


def test_the_builtin_rules_want_connects_on_stdio_or_by_shells_only():
    need = prefilter.for_kind(load_ruleset(Config()).rules.values(), "connect")
    assert not need.never and not need.anything
    assert need.fd_max == 2 and {"bash", "sh", "dash"} <= need.comms and "python3" not in need.comms


def test_kinds_no_rule_names_are_never_built():
    need = prefilter.for_kind(rules("evt.type = execve and proc.name = bash"), "connect")
    assert need.never


def test_and_keeps_one_part_or_joins_and_not_keeps_anything():
    assert prefilter.for_kind(rules("evt.type = connect and fd.num < 3 and user.uid = 0"), "connect").fd_max == 2
    joined = prefilter.for_kind(rules("evt.type = connect and (fd.num = 1 or proc.name in (nc, averyveryverylongname))"),
                                "connect")
    assert joined.fd_max == 1 and joined.comms == {"nc", "averyveryveryl" + "o"}   # comm: 15 characters
    assert prefilter.for_kind(rules("evt.type = connect and not fd.num > 2"), "connect").anything
    assert prefilter.for_kind(rules("fd.num = 0", "evt.type = connect"), "connect").anything
    assert prefilter.for_kind(rules("evt.type in (dup2, execve)"), "dup").anything


def test_a_disabled_rule_wants_nothing():
    text = "- rule: r\n  condition: evt.type = connect\n  output: x\n  priority: INFO\n  enabled: false\n"
    assert prefilter.for_kind(parse_rules(text, fields=FIELDS).rules.values(), "connect").never


def test_every_call_the_kernel_reports_is_in_one_kind():
    from ebpfkit.tools.detect.fields import DUP_CALLS, FILE_CALLS, SOCKET_CALLS, SYS_CALLS

    reported = {"execve", *SOCKET_CALLS.values(), *DUP_CALLS.values(), *FILE_CALLS.values(), *SYS_CALLS.values()}
    kinds = list(prefilter.KINDS.values())
    assert set().union(*kinds) == reported
    assert sum(len(k) for k in kinds) == len(reported), "each call in one kind only"


def test_a_kill_holds_only_where_the_kernel_can_decide_it():
    every_bait = rules("evt.type in (openat, unlink) and bait.name exists")
    assert prefilter.killing_calls(every_bait) == set()  # their action is alert
    text = ("- rule: k\n  condition: evt.type in (openat, unlink) and bait.name exists\n  output: x\n"
            "  priority: INFO\n  action: kill\n")
    kill = parse_rules(text, fields=FIELDS).rules.values()
    assert prefilter.killing_calls(kill) == {"openat", "unlink"}
    assert prefilter.killing_calls(kill, action="alert") == set()
    assert prefilter.killing_calls(every_bait, action="kill") == {"openat", "unlink"}
    narrowed = rules("evt.type = openat and proc.name != backup", "evt.type = unlink and not bait.name exists")
    assert prefilter.killing_calls(narrowed, action="kill") == set()
