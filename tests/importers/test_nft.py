"""nft rulesets (text and JSON) as pfc policies: matches, statements, sets, maps,
base chains and their hooks, several chains on one hook (docs/import.md "nft")."""

from __future__ import annotations

import json

import pytest

from tests.importers.helpers import body, imported, reasons


def nft(text: str):
    return imported(text, fmt="nft", names=("rules.nft",))


def chain(*rules: str, hook: str = "input", family: str = "inet", policy: str = "drop",
          kind: str = "filter", prio: str = "0") -> str:
    lines = "\n".join(f"    {r}" for r in rules)
    return (f"table {family} t {{\n  chain c {{\n    type {kind} hook {hook} priority {prio};"
            f" policy {policy};\n{lines}\n  }}\n}}\n")


def test_a_host_firewall():
    r = nft(chain("iif lo accept", "ct state established,related accept",
                  "ct state invalid drop", "tcp dport { 22, 443 } ct state new accept",
                  "ip6 nexthdr icmpv6 accept", 'iifname "eth*" udp dport 53 accept',
                  "reject with icmpx type admin-prohibited"))
    assert r.complete, reasons(r)
    assert body(r) == ["input {", "default drop", "pass iif lo",
                       "pass ct state established,related", "drop ct state invalid",
                       "pass tcp dport { 22, 443 } ct state new", "pass icmp6",
                       "pass udp iif eth* dport 53", "reject with admin-prohibited", "}"]


@pytest.mark.parametrize("rule, pfc", [
    ("tcp flags syn accept", ["pass tcp flags syn"]),
    ("tcp flags syn,ack accept", ["pass tcp flags syn", "pass tcp flags !syn,ack"]),
    ("tcp flags == syn accept", ["pass tcp flags !fin,syn,!rst,!psh,!ack,!urg,!ece,!cwr"]),
    ("tcp flags syn / syn,ack accept", ["pass tcp flags syn,!ack"]),
    ("tcp flags & (syn|rst) == syn accept", ["pass tcp flags syn,!rst"]),
    ("tcp flags ! fin,rst accept", ["pass tcp flags !fin,!rst"]),
    ("ct status dnat,snat accept", ["pass ct status snat", "pass ct status dnat"]),
    ("tcp dport < 1024 accept", ["pass tcp dport 0-1023"]),
    ("ip saddr 10.0.0.1-10.0.0.6 accept",
     ["pass src { 10.0.0.1, 10.0.0.2/31, 10.0.0.4/31, 10.0.0.6 }"]),
    ("meta l4proto { tcp, udp } th dport 53 accept", ["pass tcp dport 53", "pass udp dport 53"]),
    ("fib daddr type local accept", ["pass dst-type local"]),
    ("meta mark 0x10 meta mark set 0x20", ["mark mark 16 to 32"]),
])
def test_matches(rule, pfc):
    r = nft(chain(rule))
    assert r.complete, reasons(r)
    got = body(r)[2:-1]
    assert sorted(got) == sorted(pfc)


def test_statements_in_order_and_counters():
    r = nft(chain('tcp dport 23 log prefix "telnet " counter drop',
                  "udp dport 69 counter", "ip saddr 10.0.0.0/8 counter tcp dport 80 accept"))
    assert r.complete, reasons(r)
    assert body(r)[2:-1] == ['log tcp dport 23 prefix "telnet"', "drop tcp dport 23",
                             "count udp dport 69", "count src 10.0.0.0/8",
                             "pass tcp src 10.0.0.0/8 dport 80"]


def test_verdict_maps_and_named_sets_and_defines():
    r = nft("define lan = { 10.0.0.0/8, 192.168.0.0/16 }\n" + chain(
        "ct state vmap { established : accept, invalid : drop }",
        "ip saddr $lan tcp dport vmap { 22 : accept, 80 : jump web }").replace(
        "  chain c {", "  set bad { type ipv4_addr; elements = { 1.2.3.4 } }\n"
        "  chain web { tcp dport 80 accept }\n  chain c {").replace(
        "policy drop;", "policy drop;\n    ip saddr @bad drop"))
    assert r.complete, reasons(r)
    lines = body(r)
    assert "define bad = { 1.2.3.4 }" in lines and "drop src $bad" in lines
    assert "pass ct state established" in lines and "drop ct state invalid" in lines
    assert "pass tcp src { 10.0.0.0/8, 192.168.0.0/16 } dport 22" in lines
    assert "jump web tcp src { 10.0.0.0/8, 192.168.0.0/16 } dport 80" in lines


def test_nat_and_families():
    text = ("table ip nat {\n chain pre { type nat hook prerouting priority dstnat;\n"
            '  iifname "wan" tcp dport 2222 dnat to 10.0.0.5:22\n }\n'
            " chain post { type nat hook postrouting priority srcnat;\n"
            '  oifname "wan" masquerade\n }\n}\n')
    r = nft(text)
    assert r.complete, reasons(r)
    assert body(r) == ["nat prerouting {", "pass ip6", "dnat tcp iif wan dport 2222 to "
                       "10.0.0.5:22", "}", "nat postrouting {", "pass ip6",
                       "masquerade oif wan", "}"]


def test_base_chains_name_their_blocks():
    for hook, prio, block in (("prerouting", "raw", "raw prerouting"),
                              ("prerouting", "mangle", "prerouting"),
                              ("output", "-300", "raw output"),
                              ("forward", "0", "forward")):
        r = nft(chain("tcp dport 1 drop", hook=hook, prio=prio, policy="accept"))
        assert body(r)[0] == block + " {", (hook, prio)


def test_two_chains_on_a_hook_run_in_priority_order():
    text = ("table inet a {\n chain one { type filter hook input priority 10; policy accept;\n"
            "  tcp dport 22 accept\n  tcp dport 23 drop\n }\n}\n"
            "table inet b {\n chain two { type filter hook input priority -10; policy drop;\n"
            "  ct state established accept\n }\n}\n")
    r = nft(text)
    assert r.complete, reasons(r)
    lines = body(r)
    assert lines[:5] == ["chain one-then {", "pass tcp dport 22", "drop tcp dport 23", "}",
                         "input {"]
    assert lines[5:9] == ["default pass", "goto one-then ct state established", "drop", "}"]


def test_chain_bindings_and_unreachable_chains():
    r = nft(chain("tcp dport 22 jump { ip saddr 10.0.0.0/8 accept; drop }").replace(
        "  chain c {", "  chain orphan { queue }\n  chain c {"))
    assert r.complete, reasons(r)
    assert "jump c-1 tcp dport 22" in body(r)
    assert any("orphan" in d.message for d in r.remarks)


@pytest.mark.parametrize("rule, reason", [
    ("meta skuid 1000 accept", "`meta skuid`: a match pfc has no word for"),
    ("tcp dport 22 queue", "`queue`: pfc does not queue packets to user space"),
    ("ct status == dnat accept", "ct status compared whole"),
    ("ct status dnat,snat counter", "`count` on parts that may hold together"),
    ("ip saddr 10.0.0.1 ct mark set 1", "`ct mark set`: pfc sets only the packet's mark"),
    ("reject with icmp type 7", "reject with icmp type 7"),
    ("meta mark set (meta mark | 0x10) accept", "expected `)`"),
])
def test_refusals_say_why(rule, reason):
    r = nft(chain(rule))
    assert not r.complete
    assert reasons(r)[0].startswith(reason), reasons(r)


def test_a_rule_nft_itself_cannot_read_does_not_lose_the_rest():
    r = nft(chain("ip saddr { $nothing } accept", "tcp dport 22 accept"))
    assert reasons(r) == ["`$nothing` is not defined"]
    assert "pass tcp dport 22" in body(r)


def test_json_reads_as_the_text_does():
    text = chain("tcp dport { 22, 80 } accept", "ct state vmap { invalid : drop }")
    doc = {"nftables": [
        {"table": {"family": "inet", "name": "t"}},
        {"chain": {"family": "inet", "table": "t", "name": "c", "type": "filter",
                   "hook": "input", "prio": 0, "policy": "drop"}},
        {"rule": {"family": "inet", "table": "t", "chain": "c", "expr": [
            {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                       "right": {"set": [22, 80]}}}, {"accept": None}]}},
        {"rule": {"family": "inet", "table": "t", "chain": "c", "expr": [
            {"vmap": {"key": {"ct": {"key": "state"}},
                      "data": {"set": [["invalid", {"drop": None}]]}}}]}}]}
    from_json = imported(json.dumps(doc, indent=1), fmt="nft-json", names=("r.json",))
    assert from_json.complete, reasons(from_json)
    assert body(from_json) == body(nft(text))


def test_json_nat_map_reads_as_the_text_does():
    """``dnat ip to ip saddr . tcp dport map { ... }`` in JSON: a rule per element, as
    in text (it was an IndexError: the JSON lookup carried no map)."""
    text = ("table ip t {\n  chain c {\n    type nat hook prerouting priority dstnat;\n"
            "    dnat ip to ip saddr . tcp dport map { 1.1.1.1 . 20 : 2.2.2.2 . 30 }\n"
            "  }\n}\n")
    key = {"concat": [{"payload": {"protocol": "ip", "field": "saddr"}},
                      {"payload": {"protocol": "tcp", "field": "dport"}}]}
    doc = {"nftables": [
        {"table": {"family": "ip", "name": "t"}},
        {"chain": {"family": "ip", "table": "t", "name": "c", "type": "nat",
                   "hook": "prerouting", "prio": -100, "policy": "accept"}},
        {"rule": {"family": "ip", "table": "t", "chain": "c", "expr": [
            {"dnat": {"family": "ip", "addr": {"map": {"key": key, "data": {"set": [
                [{"concat": ["1.1.1.1", 20]}, {"concat": ["2.2.2.2", 30]}]]}}}}}]}}]}
    from_json = imported(json.dumps(doc, indent=1), fmt="nft-json", names=("r.json",))
    from_text = nft(text)
    assert from_json.complete and from_text.complete, reasons(from_json) + reasons(from_text)
    assert body(from_json) == body(from_text)
    assert "dnat tcp src 1.1.1.1 dport 20 to 2.2.2.2:30" in body(from_json)


def test_named_sets_keep_their_names():
    """`@name` is `$name` with one define per distinct contents (another table's set
    of the same name is `$name-2`); a define only rules that were imported use."""
    text = ("table ip a {\n  set ok { type ipv4_addr; elements = { 10.0.0.1, 10.0.0.2 } }\n"
            "  set gone { type inet_service; elements = { 1, 2 } }\n"
            "  chain c {\n    type filter hook input priority 0; policy drop;\n"
            "    ip saddr != @ok drop\n    tcp dport @gone meter m { ip saddr } accept\n"
            "  }\n}\n"
            "table ip b {\n  set ok { type ipv4_addr; elements = { 10.0.0.3 } }\n"
            "  chain c {\n    type filter hook input priority 10; policy accept;\n"
            "    ip saddr @ok accept\n  }\n}\n")
    lines = body(nft(text))
    assert lines[:2] == ["define ok = { 10.0.0.1, 10.0.0.2 }", "define ok-2 = { 10.0.0.3 }"]
    assert "drop ip !src $ok" in lines and "pass src $ok-2" in lines
    assert not any("gone" in line for line in lines if not line.startswith("#"))


def test_a_device_the_hook_has_none_of():
    """nft reads `iif` as 0 in output and `oif` as 0 in input and prerouting: a rule
    that asks for one never matches (left out, said so), one that asks for its absence
    matches without asking (pfc's checker refused both)."""
    text = ("table inet f {\n  chain o {\n    type filter hook output priority 0; "
            'policy drop;\n    iif lo accept\n    iifname != "eth0" oif lo accept\n  }\n'
            "  chain i {\n    type filter hook input priority 0; policy drop;\n"
            '    oifname "x" accept\n  }\n}\n')
    r = nft(text)
    assert r.complete, reasons(r)
    lines = body(r)
    assert "pass oif lo" in lines
    assert not any(line.startswith("pass") and "iif" in line for line in lines)
    assert not any(line.startswith("pass oif x") for line in lines)


def test_icmp_replies_of_one_family_are_that_family_rules():
    r = nft(chain("tcp dport 22 reject with icmp type host-prohibited",
                  "reject with icmpv6 type policy-fail", "reject with icmp 9"))
    assert r.complete, reasons(r)
    assert body(r)[2:5] == ["reject tcp src 0.0.0.0/0 dport 22 with host-prohibited",
                            "reject ip6 with policy-fail", "reject ip with net-prohibited"]


def test_a_large_named_set_is_a_set_file_beside_the_policy():
    from pfc.importers.nft import LARGE_SET
    elements = ", ".join(f"10.{i // 256}.{i % 256}.0/24" for i in range(LARGE_SET + 1))
    text = chain("ip saddr @blocked drop", "tcp dport 22 accept").replace(
        "  chain c {", f"  set blocked {{ type ipv4_addr; flags interval; elements = "
        f"{{ {elements} }} }}\n  chain c {{")
    to_file = imported(text, fmt="nft", names=("rules.nft",), set_files=True,
                       output_name="out.pf")
    assert to_file.complete, reasons(to_file)
    assert 'set blocked = file "out.blocked.set"' in to_file.text
    lines = to_file.set_files["out.blocked.set"].splitlines()
    assert lines[0] == "# nft set @blocked of rules.nft" and len(lines) == LARGE_SET + 2
    assert "drop src $blocked" in body(to_file)
    to_stdout = nft(text)  # no file beside it: a define
    assert to_stdout.set_files == {} and "define blocked = { 10.0.0.0/24," in to_stdout.text
