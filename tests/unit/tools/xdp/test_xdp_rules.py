"""Filter rules without a kernel: parsing (flags, strings, YAML), validation, map entries;
and the load balancer's VIP/backend parsing and flow hash."""

from __future__ import annotations

import ipaddress

import pytest

from ebpfkit.tools.xdp.rules import (PORT_PROTOCOLS, Rule, RuleError, check_rules, decode_entries, entries,
                               load_rule_file, parse_cidr, parse_rule, rules_from_flags)


def test_rule_strings_and_flags_say_the_same():
    assert parse_rule("src 10.0.0.0/8 proto tcp dport 22") == \
        parse_rule("src=10.0.0.0/8,proto=tcp,dport=22") == \
        Rule(src=ipaddress.ip_network("10.0.0.0/8"), proto=6, dport=22)
    assert parse_rule("udp sport 53") == Rule(proto=17, sport=53)
    assert rules_from_flags(src=["192.0.2.0/24"], dst=["2001:db8::1"], proto=["icmp"],
                            dport=["tcp:22", "53"], sport=["udp/123"]) == [
        Rule(src=ipaddress.ip_network("192.0.2.0/24")), Rule(dst=ipaddress.ip_network("2001:db8::1/128")),
        Rule(proto=1), Rule(proto=6, dport=22), Rule(dport=53), Rule(proto=17, sport=123)]
    assert str(parse_rule("dst 2001:db8::/32 udp dport 5353")) == "dst 2001:db8::/32 proto udp dport 5353"
    assert parse_rule("proto 47").proto == 47


@pytest.mark.parametrize("text, message", [
    ("src 10.0.0.1/8", "host bits set"),
    ("src 10.0.0.0/33", "bad source CIDR"),
    ("dst 300.1.1.1", "bad destination CIDR"),
    ("src 10.0.0.0/8 dst 10.1.0.0/16", "not both"),
    ("dport 1 sport 2", "not both"),
    ("proto icmp dport 5", "has no ports"),
    ("proto bogus", "unknown protocol"),
    ("proto 256", "0-255"),
    ("dport 0", "1-65535"),
    ("dport 65536", "1-65535"),
    ("dport http", "a number"),
    ("src", "needs a value"),
    ("src 10.0.0.0/8 src 10.1.0.0/16", "given twice"),
    ("source 10.0.0.0/8", "unexpected"),
    ("", "empty rule"),
])
def test_bad_rules_say_why(text, message):
    with pytest.raises(RuleError, match=message) as err:
        parse_rule(text)
    assert err.value.exit_code == 2


def test_host_bits_error_suggests_the_network():
    with pytest.raises(RuleError, match=r"did you mean 192\.0\.2\.0/24"):
        parse_cidr("192.0.2.7/24")


def test_rule_file(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("default: deny\ndry_run: true\nrules:\n  - src: 192.0.2.0/24\n"
                 "  - {dst: '2001:db8::/32', proto: tcp, dport: 22, comment: ssh}\n  - proto: icmp\n")
    got = load_rule_file(str(f))
    assert got.default == "deny" and got.dry_run is True
    assert [str(r) for r in got.rules] == ["src 192.0.2.0/24", "dst 2001:db8::/32 proto tcp dport 22",
                                           "proto icmp"]
    assert got.rules[1].comment == "ssh"
    f.write_text("- src: 10.0.0.0/8\n")  # a bare list is fine
    assert len(load_rule_file(str(f)).rules) == 1


@pytest.mark.parametrize("text, message", [
    ("rules:\n  - srcc: 10.0.0.0/8\n", "unknown rule field"),
    ("rules:\n  - src: 10.0.0.1/8\n", "rule 1: bad source CIDR"),
    ("rules: 5\n", "must be a list"),
    ("default: maybe\n", "allow or deny"),
    ("bogus: 1\n", "unknown key"),
    ("rules:\n  - 10.0.0.0/8\n", "must be a mapping"),
    ("rules: [\n", "not valid YAML"),
])
def test_bad_rule_files(tmp_path, text, message):
    f = tmp_path / "r.yaml"
    f.write_text(text)
    with pytest.raises(RuleError, match=message):
        load_rule_file(str(f))


def test_missing_rule_file():
    with pytest.raises(RuleError, match="cannot read"):
        load_rule_file("/nonexistent/rules.yaml")


def rules(*texts):
    return [parse_rule(t) for t in texts]


def test_nesting_cidrs_of_one_direction_are_refused():
    for pair in (("src 10.0.0.0/8", "src 10.20.0.0/16"), ("src 10.20.0.0/16", "src 10.0.0.0/8"),
                 ("dst 2001:db8::/32", "dst 2001:db8:0:1::1"),
                 ("src 10.0.0.0/8 dport 22", "src 10.0.0.0/8 dport 80")):
        with pytest.raises(RuleError, match="overlaps"):
            check_rules(rules(*pair))
    # adjacent blocks, the other direction, the other family: fine
    check_rules(rules("src 10.0.0.0/9", "src 10.128.0.0/9", "dst 10.0.0.0/8", "src ::a00:0/104",
                      "dst ::/0"))


def test_overlap_is_checked_against_existing_rules_too():
    existing = {4: parse_rule("src 192.0.2.0/24")}
    with pytest.raises(RuleError, match="overlaps rule 4"):
        check_rules(rules("src 192.0.2.128/25"), existing)
    with pytest.raises(RuleError, match="same as rule 4"):
        check_rules(rules("src 192.0.2.0/24"), existing)
    check_rules(rules("src 192.0.3.0/24"), existing)


def test_port_rules_collide_on_the_same_key():
    with pytest.raises(RuleError, match="overlaps"):
        check_rules(rules("dport 53", "udp dport 53"))
    with pytest.raises(RuleError, match="duplicate"):
        check_rules(rules("tcp dport 22", "proto tcp dport 22"))
    check_rules(rules("tcp dport 22", "tcp sport 22", "udp dport 22", "proto tcp"))


@pytest.mark.parametrize("text", [
    "src 10.0.0.0/8", "dst 192.0.2.1", "src 2001:db8::/32 proto udp dport 53", "dst ::/0 sport 7",
    "proto icmp", "tcp dport 22", "dport 443", "sport 53", "proto udp", "src 0.0.0.0/0 proto 47",
    "src 2001:db8::1", "dst 10.1.2.3 proto tcp dport 22", "src 2001:db8::ffff udp sport 53",
])
def test_entries_decode_back_to_the_rule(text):
    rule = parse_rule(text)
    got = decode_entries(entries(rule, 9))
    assert got == {9: rule}


def test_single_addresses_go_to_the_tries_like_other_cidrs():
    assert {t for t, _, _ in entries(parse_rule("src 10.1.2.3"), 1)} == {"src4"}
    assert {t for t, _, _ in entries(parse_rule("dst 2001:db8::1/128"), 1)} == {"dst6"}
    assert {t for t, _, _ in entries(parse_rule("src 10.1.2.2/31"), 1)} == {"src4"}
    with pytest.raises(RuleError, match="overlaps"):  # a host inside a CIDR still nests
        check_rules(rules("src 10.0.0.0/8", "src 10.1.2.3"))


def test_a_port_without_protocol_covers_every_protocol_with_ports():
    e = entries(parse_rule("dport 80"), 1)
    assert sorted(k["proto"] for _, k, _ in e) == sorted(PORT_PROTOCOLS)
    assert {t for t, _, _ in e} == {"ports"}


# --- load balancer parsing ----------------------------------------------------------------------

def test_vip_and_backend_parsing():
    from ebpfkit.tools.xdp.lb import LbError, parse_backend, parse_vip

    assert str(parse_vip("10.0.0.100:80")) == "10.0.0.100:80/tcp"
    assert str(parse_vip("[2001:db8::100]:53/udp")) == "[2001:db8::100]:53/udp"
    for bad in ("10.0.0.100", "10.0.0.300:80", "10.0.0.1:0", "10.0.0.1:80/icmp", "[::1]:99999", "x:80"):
        with pytest.raises(LbError):
            parse_vip(bad)
    b = parse_backend("10.0.0.11,weight=3,mac=02:00:00:00:00:0A")
    assert (str(b.addr), b.weight, b.mac) == ("10.0.0.11", 3, "02:00:00:00:00:0a")
    for bad in ("10.0.0.256", "10.0.0.1,weight=0", "10.0.0.1,mac=zz", "10.0.0.1,speed=3"):
        with pytest.raises(LbError) as err:
            parse_backend(bad)
        assert err.value.exit_code == 2


def test_flow_hash_is_a_function_of_the_5_tuple():
    from ebpfkit.tools.xdp.lb import flow_hash

    a = flow_hash("10.0.0.2", "10.0.0.100", 40000, 80)
    assert a == flow_hash("10.0.0.2", "10.0.0.100", 40000, 80)
    assert 0 <= a < 2 ** 32
    others = {flow_hash("10.0.0.2", "10.0.0.100", p, 80) for p in range(40000, 41000)}
    assert len(others) > 990  # well spread
    assert flow_hash("2001:db8::2", "2001:db8::100", 1, 80) != flow_hash("2001:db8::2", "2001:db8::100", 1, 81)
