"""Whole firewalls (v2), meaning: the IR of every new match and action, the rule's
family, what each block allows (against the hook catalogue, exhaustively), chains,
interfaces, rule indexes, the Ruleset, and the Compiled front door."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pfc.backends.base import check_dev
from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.firewall.chains import MAX_DEPTH
from pfc.frontend.firewall.hooks import BLOCKS, allows_field
from pfc.frontend.firewall.names import valid_device
from pfc.frontend.pipeline import COMMAND, compile_text


def ruleset(text: str):
    compiled = compile_text(text, "t.pf")
    assert compiled.ok, [d.message for d in compiled.diagnostics]
    return compiled.ruleset


def rule(block: str, text: str, pre: str = "") -> ir.Rule:
    return ruleset(f"{pre}{block} {{\n    {text}\n}}\n").rules[0]


def errors(text: str) -> list[str]:
    return [d.message for d in compile_text(text).diagnostics if d.severity == "error"]


# ----------------------------------------------------------------------- matches

def test_interface_matches() -> None:
    r = rule("forward", 'pass !iif { eth*, "eth0.100", $wan } oif lo', "define wan = eth0\n")
    iif, oif = r.matches
    assert iif == ir.IfaceMatch("iif", ("eth*", "eth0.100", "eth0"), True, iif.span)
    assert oif.names == ("lo",) and r.family is ir.Family.ANY


def test_named_interface_list_keeps_its_name() -> None:
    r = rule("input", "pass iif $lan", "define lan = { eth1, eth2 }\n")
    assert r.matches[0].set_name == "lan"


def test_mac_matches() -> None:
    r = rule("ingress", "drop ether-src { AA:BB:cc:dd:ee:ff, $m }",
             "define m = 01:00:5e:00:00:01\n")
    assert r.matches[0].macs == (bytes.fromhex("aabbccddeeff"), bytes.fromhex("01005e000001"))
    assert r.family is ir.Family.ANY


@pytest.mark.parametrize("text,ranges,family", [
    ("drop ether-type arp", ((0x806, 0x806),), ir.Family.ANY),
    ("drop ether-type { arp, 0x88cc }", ((0x806, 0x806), (0x88cc, 0x88cc)), ir.Family.ANY),
    ("drop !ether-type ip", ((0x800, 0x800),), ir.Family.ANY),
    ("drop ether-type ip", None, ir.Family.IP4),
    ("drop ether-type ip6", None, ir.Family.IP6),
    ("drop ether-type { ip, ip6 }", None, ir.Family.IP),
])
def test_ether_type_says_the_family(text: str, ranges, family) -> None:
    """`ether-type ip` is the rule's family and leaves the IR, as `ip` would."""
    r = rule("ingress", text)
    assert r.family is family
    assert (r.matches[0].ranges if r.matches else None) == ranges


@pytest.mark.parametrize("text,field,ranges", [
    ("count icmp icmp-code 3", "icmp-code", ((3, 3),)),
    ("drop vlan-id { 10, 20-30 }", "vlan-id", ((10, 10), (20, 30))),
    ("drop mark 0xffffffff", "mark", ((0xFFFFFFFF, 0xFFFFFFFF),)),
    ("drop ct mark 1-2", "ct-mark", ((1, 2),)),
])
def test_integer_matches(text: str, field: str, ranges) -> None:
    block = "ingress" if "vlan" in text else "input"
    [m] = rule(block, text).matches
    assert (type(m), m.field, m.ranges) == (ir.IntMatch, field, ranges)


def test_names_of_tables_in_table_order() -> None:
    r = rule("forward", "pass ct status { dnat, confirmed } dst-type { multicast, local }")
    status, types_ = r.matches
    assert status == ir.CtStatusMatch(("confirmed", "dnat"), False, status.span)
    assert types_ == ir.AddrTypeMatch("dst-type", ("local", "multicast"), False, types_.span)


@pytest.mark.parametrize("text,family", [
    ("pass iif eth0", ir.Family.ANY), ("pass mark 1", ir.Family.ANY),
    ("pass ether-dst ff:ff:ff:ff:ff:ff", ir.Family.ANY), ("pass dst-type local", ir.Family.IP),
    ("pass ct status dnat", ir.Family.IP), ("pass ct mark 1", ir.Family.IP),
    ("pass iif eth0 src 10.0.0.1", ir.Family.IP4),
])
def test_only_ip_matches_make_a_rule_ip(text: str, family) -> None:
    block = "input" if "ether" not in text else "prerouting"
    assert rule(block, text).family is family


def test_merged_v2_integer_fields_and_refused_repeats() -> None:
    assert rule("input", "pass mark 1-10 mark 5-20").matches[0].ranges == ((5, 10),)
    assert errors("input {\n    pass iif eth0 iif eth1\n}\n") == ["`iif` is given twice"]


# ----------------------------------------------------------------------- actions

@pytest.mark.parametrize("text,action", [
    ("reject", ir.Reject("port-unreachable")),
    ("reject tcp with tcp-reset", ir.Reject("tcp-reset")),
    ("reject with no-route", ir.Reject("no-route")),
    ("reject ip with host-prohibited", ir.Reject("host-prohibited")),
    ("reject tcp src 10.0.0.0/8 with net-prohibited", ir.Reject("net-prohibited")),
    ("reject ip6 with policy-fail", ir.Reject("policy-fail")),
    ("mark tcp dport 22 to 0x10", ir.Mark(16)),
    ("notrack udp", ir.Notrack()),
])
def test_filter_actions(text: str, action) -> None:
    block = "raw prerouting" if text.startswith("notrack") else "input"
    if text.startswith("mark"):
        block = "prerouting"
    got = rule(block, text).action
    assert type(got) is type(action) and {k: v for k, v in vars(got).items() if k != "span"} \
        == {k: v for k, v in vars(action).items() if k != "span"}


def test_a_reply_of_one_family_needs_a_rule_of_that_family() -> None:
    assert rule("input", "reject udp dst 192.0.2.1 with proto-unreachable").family \
        is ir.Family.IP4
    for text in ("reject with host-prohibited", "reject tcp with net-prohibited",
                 "reject ip with reject-route", "reject src 10.0.0.0/8 with policy-fail"):
        [message] = errors(f"input {{\n    {text}\n}}\n")
        assert "needs a rule for IPv" in message, text
    [message] = errors("input {\n    reject ip with icmp-host-prohibited\n}\n")
    assert message.startswith("`icmp-host-prohibited` is not a reject reply")


@pytest.mark.parametrize("block,text,kind,address,port,family", [
    ("nat prerouting", "dnat tcp dport 8080 to 10.0.0.2:80", "dnat", "10.0.0.2", 80,
     ir.Family.IP4),
    ("nat prerouting", "dnat udp to [2001:db8::53]:53", "dnat", "2001:db8::53", 53,
     ir.Family.IP6),
    ("nat postrouting", "snat src 10.0.0.0/8 to 203.0.113.2", "snat", "203.0.113.2", None,
     ir.Family.IP4),
    ("nat postrouting", "masquerade oif eth0", "masquerade", None, None, ir.Family.ANY),
    ("nat output", "redirect tcp dport 80 to :8080", "redirect", None, 8080, ir.Family.IP),
])
def test_nat_actions(block, text, kind, address, port, family) -> None:
    r = rule(block, text)
    assert (r.action.kind, r.action.port, r.family) == (kind, port, family)
    assert r.action.address == (ipaddress.ip_address(address) if address else None)


def test_limit_on_pass_and_reject_in_blocks_only() -> None:
    r = rule("input", "pass icmp limit rate 10/second burst 10")
    assert r.limit == ir.Limit(ir.Rate(10, "second", 10), None, r.limit.span)
    assert rule("input", "reject udp limit rate 5/minute").limit.rate.count == 5
    assert errors("pass icmp limit rate 10/second\n") == [
        "`limit` belongs to a `drop` rule, not `pass`"]


def test_v2_words_in_a_v1_file_say_where_they_belong() -> None:
    assert errors("reject tcp\ndrop ct status dnat\nredirect tcp to :80\n") == [
        "`reject` is written in a hook block of a whole firewall; this file is one rule "
        "list (v1)",
        "`ct status` is written in a hook block of a whole firewall; this file is one rule "
        "list (v1)",
        "`redirect ... to :PORT` is written in a nat block of a whole firewall; this file "
        "is one rule list (v1)"]


# ---------------------------------------------------------- what each block allows

FIELD_TEXT = {"src": "src 10.0.0.1", "dst": "dst 10.0.0.1", "sport": "tcp sport 1",
              "dport": "tcp dport 1", "proto": "proto 6", "ttl": "ttl 1", "len": "len 40",
              "frag": "frag", "flags": "tcp flags syn", "icmp-type": "icmp icmp-type 8",
              "payload": "tcp payload[0] == 1", "ct": "ct state new",
              "icmp-code": "icmp icmp-code 3", "iif": "iif eth0", "oif": "oif eth0",
              "mark": "mark 1", "dst-type": "dst-type local", "src-type": "src-type local",
              "ether-src": "ether-src aa:bb:cc:dd:ee:ff",
              "ether-dst": "ether-dst aa:bb:cc:dd:ee:ff", "ether-type": "ether-type arp",
              "vlan-id": "vlan-id 1", "ct-mark": "ct mark 1", "ct-status": "ct status dnat"}
ACTION_TEXT = {"drop": "drop", "pass": "pass", "count": "count", "log": "log",
               "reject": "reject", "notrack": "notrack", "mark": "mark to 1",
               "dnat": "dnat to 10.0.0.2", "snat": "snat to 10.0.0.2",
               "masquerade": "masquerade", "jump": "jump c", "goto": "goto c",
               "redirect": None}


@pytest.mark.parametrize("block", list(BLOCKS))
def test_every_field_is_allowed_exactly_where_the_catalogue_says(block: str) -> None:
    assert set(FIELD_TEXT) == set(ir.FIELDS)
    for field, text in FIELD_TEXT.items():
        ok = compile_text(f"{block} {{\n    pass {text}\n}}\n").ok
        assert ok == allows_field(BLOCKS[block], field), (block, field)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_every_action_is_allowed_exactly_where_the_catalogue_says(block: str) -> None:
    spec = BLOCKS[block]
    for action, text in ACTION_TEXT.items():
        if text is None:  # redirect: its form depends on the block
            text = "redirect tcp to :80" if spec.kind == "nat" else "redirect to 10.0.0.2"
        ok = compile_text(f"chain c {{\n    pass\n}}\n{block} {{\n    {text}\n}}\n").ok
        assert ok == (action in spec.actions), (block, action)


def test_a_chain_rule_is_checked_in_every_block_that_reaches_it() -> None:
    text = ("chain out {\n    pass oif eth0\n}\n\nchain mid {\n    jump out\n}\n\n"
            "output {\n    jump mid\n}\n\ninput {\n    goto mid tcp\n}\n")
    compiled = compile_text(text)
    [d] = compiled.diagnostics
    assert d.message.startswith("`oif` is not allowed in block `input`")
    assert compiled.source.position(d.span.start)[0] == 2
    assert compiled.source.position(d.notes[0].span.start)[0] == 14


def test_chain_depth_limit() -> None:
    def nested(n: int) -> str:
        chains = [f"chain c{i} {{\n    {f'jump c{i - 1}' if i else 'pass'}\n}}\n"
                  for i in range(n)]
        return "".join(chains) + f"input {{\n    jump c{n - 1}\n}}\n"
    assert compile_text(nested(MAX_DEPTH)).ok
    assert errors(nested(MAX_DEPTH + 1)) == ["jumps nest deeper than 16 chains here"]


# ------------------------------------------------------------ ruleset, indexes, host

def test_lists_in_path_order_with_unique_indexes_in_source_order() -> None:
    rs = ruleset("output {\n    pass\n}\nchain c {\n    pass udp\n}\n"
                 "ingress eth1 {\n    drop\n}\ninput {\n    jump c\n    pass\n}\n"
                 "ingress {\n    drop udp\n}\n")
    assert [(p.hook.name, p.hook.devices) for p in rs.lists] == [
        ("ingress", ("eth1",)), ("ingress", ()), ("input", ()), ("output", ())]
    assert [r.index for r in rs.rules] == list(range(6))
    assert [r.line for r in rs.rules] == [2, 5, 8, 11, 12, 15]
    assert all(p.chains == rs.chains for p in rs.lists)
    assert rs.block("ingress", "eth1").rules[0].line == 8
    assert rs.block("ingress", "eth9").rules[0].line == 15


def test_defaults_per_block() -> None:
    rs = ruleset("input {\n    default drop\n}\noutput {\n    pass\n}\n")
    assert [p.default for p in rs.lists] == [ir.Verdict.DROP, ir.Verdict.PASS]
    assert rs.lists[1].default_span == rs.lists[1].hook.span


def test_interfaces() -> None:
    rs = ruleset("interface eth0 address 203.0.113.2/24 gateway 203.0.113.1\n"
                 "interface eth1 address { 10.0.0.1, fd00::1/64 }\n"
                 "interface lo address 192.0.2.53/32\ninput {\n}\n")
    eth0, eth1, lo = rs.interfaces
    assert str(eth0.addresses[0]) == "203.0.113.2/24"  # the host bits are the address
    assert eth0.gateway == ipaddress.ip_address("203.0.113.1")
    assert [str(a) for a in eth1.addresses] == ["10.0.0.1/32", "fd00::1/64"]
    assert [str(a) for a in lo.addresses] == ["127.0.0.1/8", "::1/128", "192.0.2.53/32"]
    assert rs.forwards is False


@given(st.text(alphabet="ab0._@-*: /\"é\n", min_size=0, max_size=17))
def test_interface_names_are_the_backends_allow_list(name: str) -> None:
    try:
        check_dev(name)
        backend_ok = True
    except ValueError:
        backend_ok = False
    assert valid_device(name) == backend_ok
    if name.endswith("*") and valid_device(name, wildcard=True):
        assert len(name) <= 15 and valid_device(name[:-1])


# ---------------------------------------------------------------- the front door

def test_compiled_of_a_whole_firewall() -> None:
    compiled = compile_text("input {\n    pass\n}\n", "fw.pf")
    assert compiled.ok and compiled.policy is None
    assert compiled.require_ruleset() is compiled.ruleset
    token = COMMAND.set("run")
    try:
        with pytest.raises(CompileError) as caught:
            compiled.require()
    finally:
        COMMAND.reset(token)
    [d] = caught.value.diagnostics
    assert re.match(r"`fw.pf` is a whole firewall \(hook blocks\); `pfc run` takes one "
                    r"rule list: `pfc check`, `pfc fmt`, `pfc compile`", d.message)
    with pytest.raises(CompileError, match="is one rule list"):
        compile_text("drop\n").require_ruleset()


def test_warnings_per_list_and_per_file() -> None:
    compiled = compile_text("input {\n    pass tcp\n    pass tcp dport 22\n}\n"
                            "output {\n    pass tcp dport 22\n}\n")
    assert [(d.code, compiled.source.position(d.span.start)[0])
            for d in compiled.diagnostics] == [("shadowed", 3)]
    empty = compile_text("input {\n    default drop\n}\noutput {\n}\n").diagnostics
    assert [(d.code, d.message) for d in empty] == [
        ("no-rules", "no rules: every packet gets each block's default verdict")]
    hosts = compile_text("interface eth0 address 192.0.2.1/24\n").diagnostics
    assert [(d.code, d.message) for d in hosts] == [
        ("no-rules", "no hook blocks: this file filters nothing")]


def test_an_interface_no_line_declares_is_a_warning() -> None:
    compiled = compile_text("interface eth0\ningress eht0 {\n}\ninput {\n    pass iif eht0\n"
                            "    pass iif eth*\n    pass iif lo\n}\n")
    assert [(d.severity, d.message) for d in compiled.diagnostics][:1] == [
        ("warning", "`eht0` is not an interface of this file")]
    assert sum(d.code == "unknown-interface" for d in compiled.diagnostics) == 1


def test_iif_after_routing() -> None:
    """A forwarded packet's input device in postrouting (nft's iifname there)."""
    assert rule("postrouting", "drop !iif eth1").matches[0].field == "iif"
    assert rule("nat postrouting", "masquerade iif eth1 oif eth0").action.kind == "masquerade"
    [message] = errors("output {\n    pass iif lo\n}\n")
    assert message.startswith("`iif` is not allowed in block `output`")
