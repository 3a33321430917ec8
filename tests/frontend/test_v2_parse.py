"""Whole firewalls (v2), syntax: every new form parses to its AST, the block structure
is paired (errors with carets in tests/bad/v2-*), and v1 files read as they always did:
the v2 words are keywords only where a v2 form can start."""

from __future__ import annotations

import pytest

from pfc.frontend.diagnostics import render_text
from pfc.frontend.firewall.blocks import Block, layout
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.words import V2_KEYWORDS
from pfc.frontend.hints import KEYWORDS
from pfc.frontend.parse import parse
from pfc.frontend.pipeline import compile_text
from pfc.frontend.source import SourceFile
from pfc.frontend.syntax import BlockClose, BlockOpen, InterfaceDecl, MatchNode, RuleNode


def statements(text: str):
    module, diags = parse(SourceFile("t.pf", text))
    assert diags == [], [d.message for d in diags]
    return module.statements


@pytest.mark.parametrize("name", list(BLOCKS))
def test_every_hook_block_opens_and_closes(name: str) -> None:
    opener, rule, closer = statements(f"{name} {{\n    pass\n}}\n")
    assert isinstance(opener, BlockOpen) and (opener.kind, opener.name) == ("hook", name)
    assert not opener.closed and opener.devices == ()
    assert isinstance(rule, RuleNode) and isinstance(closer, BlockClose)


def test_devices_chains_empty_blocks_and_interfaces() -> None:
    ingress, _, chain, _, empty, iface = statements(
        'ingress eth0, "eth0.100" {\n}\nchain ssh-ok {\n}\noutput { }\n'
        "interface eth1 address { 10.0.0.1/24, fd00::1/64 } gateway 10.0.0.254\n")
    assert [d.text for d in ingress.devices] == ["eth0", '"eth0.100"']
    assert (chain.kind, chain.name) == ("chain", "ssh-ok")
    assert empty.closed and empty.name == "output"
    assert isinstance(iface, InterfaceDecl) and iface.name.text == "eth1"
    assert [a.text for a in iface.addresses.items] == ["10.0.0.1/24", "fd00::1/64"]
    assert iface.gateway.text == "10.0.0.254"


def test_v2_rule_forms() -> None:
    mark, jump, goto, reject, redirect, dnat = statements(
        "mark tcp dport 22 to 0x10\njump web tcp dport 80\ngoto web\n"
        "reject tcp with tcp-reset\nredirect tcp dport 80 to :$alt\n"
        "dnat udp dport 53 to [2001:db8::53]:5353\n")
    assert (mark.action, mark.target.address.text, mark.target.port) == ("mark", "0x10", None)
    assert (jump.action, jump.chain.text, jump.protocol) == ("jump", "web", "tcp")
    assert (goto.action, goto.chain.text, goto.matches) == ("goto", "web", ())
    assert [w.value.text for w in reject.reject_with] == ["tcp-reset"] and not reject.options
    assert redirect.target.address is None
    assert (redirect.target.port.kind, redirect.target.port.text) == ("var", "alt")
    assert dnat.target.bracketed and dnat.target.port.text == "5353"


def test_v2_matches() -> None:
    [rule] = statements("drop !iif { eth*, \"x.1\" } oif $wan ether-src AA:bb:cc:dd:ee:ff "
                        "ct status dnat,snat ct mark 5 ct state untracked mark 1-2 "
                        "vlan-id 10 icmp-code 3 dst-type local src-type { unicast }\n")
    fields = [(m.field, m.negated) for m in rule.matches]
    assert fields == [("iif", True), ("oif", False), ("ether-src", False),
                      ("ct-status", False), ("ct-mark", False), ("ct", False),
                      ("mark", False), ("vlan-id", False), ("icmp-code", False),
                      ("dst-type", False), ("src-type", False)]
    iif, _, mac, status = rule.matches[:4]
    assert [(v.kind, v.text) for v in iif.value.items] == [("name", "eth*"),
                                                           ("string", '"x.1"')]
    assert (mac.value.kind, mac.value.text) == ("mac", "AA:bb:cc:dd:ee:ff")
    assert [v.text for v in status.value.items] == ["dnat", "snat"]


@pytest.mark.parametrize("word", sorted(set(V2_KEYWORDS) - set(KEYWORDS)))
def test_v2_words_are_still_names_in_v1_files(word: str) -> None:
    """`define input = 10.0.0.1`, `define chain = 22`, `define mark = 1` ... define names
    (the lexer makes a word a keyword only where a v2 form can start)."""
    compiled = compile_text(f"define {word} = 22\ndrop tcp dport ${word}\n")
    assert compiled.ok and compiled.ruleset is None, compiled.diagnostics
    assert compiled.policy.rules[0].matches[0].ranges == ((22, 22),)


def test_v1_defines_from_the_brief() -> None:
    compiled = compile_text("define input = 10.0.0.1\ndefine chain = 22\ndefine mark = 1\n"
                            "drop tcp src $input dport { $chain, $mark }\n")
    assert compiled.ok and compiled.policy is not None


def test_syntax_errors_of_v1_files_do_not_name_v2_words() -> None:
    """The expected-token lists of a v1 file are those of v1; a v2 file's name v2."""
    v1 = compile_text("drop tcp dprot 22\n").diagnostics[0].message
    v2 = compile_text("input {\n    drop tcp dprot 22\n}\n").diagnostics[0].message
    assert "iif" not in v1 and "with" not in v1
    assert "iif" in v2 and "`with`" in v2
    assert "gateway" not in v2 and "address" not in v2  # `interface` has its own values
    start = compile_text("dorp udp\n").diagnostics[0].message
    assert start.endswith("expected `default`, `define`, `set`, an action or end of line")


def test_one_diagnostic_per_bad_line_in_a_v2_file() -> None:
    text = "input {\n    drop tcp dprot 22\n    pass udp sport\n    reject with\n}\n"
    compiled = compile_text(text)
    lines = [compiled.source.position(d.span.start)[0] for d in compiled.diagnostics]
    assert lines == [2, 3, 4]


def test_a_broken_opener_does_not_make_its_rules_and_brace_errors() -> None:
    compiled = compile_text("inptu {\n    drop tcp dport 23\n}\n\noutput {\n    pass\n}\n")
    assert [d.message.split(";")[0] for d in compiled.diagnostics] == ["unexpected `inptu`"]
    assert "did you mean `input`?" in render_text(compiled.diagnostics[0], compiled.sources)


def test_layout_never_fails_on_broken_structure() -> None:
    module, diags = parse(SourceFile("t.pf", "}\ninput {\n    pass\nchain x {\n    drop\n"))
    assert [d.code for d in diags] == ["stray-close", "nested-block", "unclosed"]
    items = layout(module.statements)
    assert [(i.open.name, len(i.body), i.close) for i in items if isinstance(i, Block)] == \
        [("input", 1, None), ("x", 1, None)]


def test_match_node_of_ct_state_keeps_its_field_name() -> None:
    [rule] = statements("pass ct state new,established\n")
    assert isinstance(rule.matches[0], MatchNode) and rule.matches[0].field == "ct"
