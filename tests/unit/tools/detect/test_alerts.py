"""detect's matcher: fused alerts gather a window's events into one, later matches of the same
value are counted and not raised, and each rule keeps to its rate limit for each process."""

from __future__ import annotations

from ebpfkit.policy.rules import parse_rules
from ebpfkit.tools.detect.alerts import Matcher
from ebpfkit.tools.detect.fields import FIELDS

RULES = """
- rule: fused
  condition: evt.type in (dup2, execve) and proc.stdin.type = ipv4
  output: "%proc.name %evt.type"
  priority: CRITICAL
  fuse: socket.ino
  tags: [T1059.004]
- rule: limited
  condition: evt.type = connect
  output: connect by %proc.pid
  priority: NOTICE
  rate_limit: 2
"""


def event(kind: str, pid: int, sock: int = 7, name: str = "bash") -> dict:
    return {"evt.type": kind, "proc.pid": pid, "proc.name": name, "proc.stdin.type": "ipv4", "socket.ino": sock,
            "evt.time": 1, "proc.apid[1]": 1, "proc.aname[1]": "init"}


def matcher() -> Matcher:
    return Matcher(parse_rules(RULES, fields=FIELDS).rules.values(), window=0.2)


def test_a_fused_group_is_one_alert_with_every_signal_and_process():
    m = matcher()
    assert m.feed(event("dup2", 10), 0.0) == []
    assert m.feed(event("execve", 10), 0.05) == []
    assert m.feed(event("execve", 11), 0.1) == []          # a child, the same socket
    assert m.due(0.15) == []
    [alert] = m.due(0.2)
    assert alert.rule == "fused" and alert.pid == 10 and alert.output == "bash dup2"
    assert alert.signals == ("dup2", "execve", "execve") and alert.pids == (10, 11)
    assert alert.techniques == ("T1059.004",) and alert.process_tree == ((10, "bash"), (1, "init"))
    assert m.feed(event("execve", 12), 5.0) == [] and m.due(6.0) == []   # the socket was raised once
    assert m.suppressed == {"fused": 1}
    m.feed(event("dup2", 20, sock=8), 6.0)                  # another socket: another alert
    assert [a.pid for a in m.due(6.2)] == [20]


def test_the_rate_limit_holds_back_and_counts():
    m = matcher()
    raised = [a for t in range(10) for a in m.feed(event("connect", 5), t * 0.01)]
    assert len(raised) == 2 and m.suppressed == {"limited": 8}
    assert len(m.feed(event("connect", 5), 1.0)) == 1      # a second later, tokens again


def test_a_process_flooding_a_rule_does_not_use_up_anothers_alerts():
    m = matcher()
    flood = [a for t in range(100) for a in m.feed(event("connect", 66), t * 0.001)]
    assert len(flood) == 2 and m.suppressed == {"limited": 98}
    assert [a.pid for a in m.feed(event("connect", 77), 0.1)] == [77]   # the attack beside the decoys


def test_everything_flushes_open_groups():
    m = matcher()
    m.feed(event("dup2", 10), 0.0)
    assert m.next_deadline() == 0.2
    assert [a.pid for a in m.due(0.0, everything=True)] == [10]
