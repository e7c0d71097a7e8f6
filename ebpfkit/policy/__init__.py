"""Policy files (YAML) with validation errors that point at the offending line.

Shared by the guard (file/process protection) and detection rules (rules.py, conditions in
condition.py: a Falco-compatible subset): the YAML node
tree is walked directly so every error carries the line of the node that caused it.
"""

from .loader import PolicyError, construct, load_yaml, node_line, read_text
from .guard import (DEFAULT_DENY, OPERATIONS, GuardPolicy, ProcessRule, ProtectRule, TrustRule,
                    load_guard_policy, parse_guard_policy)
from .rules import Rule, RuleSet, load_rules, parse_rules

__all__ = ["PolicyError", "construct", "load_yaml", "node_line", "read_text", "DEFAULT_DENY", "OPERATIONS",
           "GuardPolicy", "ProcessRule", "ProtectRule", "TrustRule", "load_guard_policy", "parse_guard_policy",
           "Rule", "RuleSet", "load_rules", "parse_rules"]
