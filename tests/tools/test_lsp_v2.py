"""The language server on whole firewalls (v2): completion by the enclosing block (its
actions and fields exactly as the checker allows them, chain names, reject replies, ct
status names, interfaces), hover on the new words, folding, chain definitions and
references, diagnostics and configured targets."""

from __future__ import annotations

import pytest
from lsprotocol import types

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.pipeline import compile_text
from pfc.frontend.source import SourceFile
from pfc.lsp.analysis import analyse, lsp_diagnostics
from pfc.lsp.complete import context, fields_for, items
from pfc.lsp.firewall import chain_at, chain_definitions, chain_uses, enclosing, folding_ranges
from pfc.lsp.hover import hover
from pfc.lsp.tokens import decode, encode
from tests.paths import FIREWALLS
from tests.tools.test_lsp_features import PROTOCOL_VALUES, WRITTEN

FW = ("interface eth0 address 192.0.2.10/24\ninterface eth1\n\nchain web {\n    pass\n}\n\n"
      "input {\n    default drop\n    jump web tcp dport 80\n}\n\n"
      "nat postrouting {\n    masquerade oif eth0\n}\n")


def labels(text: str) -> list[str]:
    return [i.label for i in items(context(text, len(text)), {})]


def inside(block: str, line: str) -> str:
    return f"{FW}\n{block} {{\n    {line}"


def test_top_level_offers_blocks_and_declarations() -> None:
    got = labels(FW + "\n")
    assert {"input", "nat prerouting", "raw output", "ingress", "chain", "interface",
            "define", "set"} <= set(got)
    assert not {"drop", "reject", "default"} & set(got)  # rules go inside blocks
    assert labels("nat ") == ["prerouting", "input", "output", "postrouting"]
    assert labels("raw ") == ["prerouting", "output"]


@pytest.mark.parametrize("block", list(BLOCKS))
def test_a_block_offers_its_actions_and_default(block: str) -> None:
    spec = BLOCKS[block]
    got = set(labels(inside(block, "")))
    expected = spec.actions | ({"accept"} if "pass" in spec.actions else set())
    assert got - {"default"} == expected
    assert ("default" in got) == spec.has_default


@pytest.mark.parametrize("block", list(BLOCKS))
@pytest.mark.parametrize("protocol", list(ir.PROTOCOLS))
def test_offered_fields_in_a_block_are_those_the_checker_accepts(block, protocol) -> None:
    offered = fields_for(protocol, block=block, v2=True)
    for name in ir.FIELDS:
        value = PROTOCOL_VALUES[name]
        text = (f"define both = {{ 10.0.0.1, ::1 }}\n{block} {{\n    pass {protocol} "
                f"{WRITTEN.get(name, name)}{'' if name == 'payload' else ' '}{value}\n}}\n")
        ok = compile_text(text).ok
        assert (name in offered) == ok, (block, protocol, name, compile_text(text).diagnostics)


@pytest.mark.parametrize("line,has,lacks", [
    ("jump ", ["web"], []),
    ("goto w", ["web"], []),
    ("reject tcp with ", ["tcp-reset", "admin-prohibited", "port-unreachable"], []),
    ("reject tcp dport 22 ", ["limit", "with", "sport"], ["audit", "dport"]),
    ("pass udp ", ["limit", "iif", "ct"], ["oif", "audit", "ether-type"]),
    ("pass ct ", ["state", "status", "mark"], []),
    ("pass ct status dnat,", ["snat", "confirmed"], ["dnat"]),
    ("pass iif ", ["lo", "eth0", "eth1"], []),
    ("drop dst-type ", ["local", "broadcast", "multicast", "unicast"], []),
])
def test_v2_completions_in_input(line: str, has: list[str], lacks: list[str]) -> None:
    got = labels(inside("input", line))
    assert set(has) <= set(got), got
    assert not set(lacks) & set(got), got


def test_completions_in_other_blocks() -> None:
    assert "ether-type" in labels(inside("ingress", "drop "))
    assert set(labels(inside("ingress", "drop ether-type "))) == set(ir.ETHER_TYPES)
    assert labels(inside("ingress", "pass ct ")) == ["state"]  # before conntrack
    assert "oif" in labels(inside("output", "pass "))
    assert labels("interface eth2 ") == ["address", "gateway"]
    assert "web" not in labels("chain later {\n    jump ")  # only chains above


def test_enclosing_block_from_text_that_does_not_parse() -> None:
    text = "input {\n    drop tcp dport {\n    pass iif \n}\nnat output {\n  redirect "
    assert enclosing(text, text.index("pass")) == "input"
    assert enclosing(text, len(text)) == "nat output"
    assert enclosing("output { }\n", 11) is None


def test_hover_on_v2_words() -> None:
    analysis = analyse(SourceFile("/tmp/fw.pf", FW + "forward {\n    pass ct status dnat "
                                  "ct mark 1\n    reject tcp with tcp-reset\n}\n"))
    text = analysis.source.text

    def at(word: str, nth: int = 0) -> str:
        offset = -1
        for _ in range(nth + 1):
            offset = text.index(word, offset + 1)
        return hover(analysis, offset) or ""

    assert at("input {").startswith("**input** block — packets for this host")
    assert "No `default`" in at("postrouting")
    assert at("chain").startswith("**chain**")
    assert at("web", 1).startswith("**chain web** (line 4)")
    assert "**rule at line 10**" in at("jump") and "In block `input`" in at("jump")
    assert "the interface the packet leaves by" in at("oif")
    assert "status bits" in at("status")
    assert "connection's mark" in at("mark 1")
    assert "reject reply **tcp-reset** (a TCP RST)" in at("tcp-reset")
    assert "connection status **dnat**" in at("dnat")
    assert "rejects TCP packets, answering with tcp-reset" in at("reject")


@pytest.mark.parametrize("example", FIREWALLS, ids=[e.stem for e in FIREWALLS])
def test_hover_and_completion_everywhere_in_every_firewall(example) -> None:
    analysis = analyse(SourceFile(str(example), example.read_text()))
    assert not [d for d in analysis.diagnostics if d.severity == "error"]
    for offset in range(0, len(analysis.source.text), 2):
        hover(analysis, offset)
        items(context(analysis.source.text, offset), {})


def test_folding_and_chain_navigation() -> None:
    module = compile_text(FW).module
    assert folding_ranges(module) == [(3, 5), (7, 10), (12, 14)]
    use = FW.index("web tcp")
    assert chain_at(module, use + 1) == "web"
    assert [s.start for s in chain_definitions(module)["web"]] == [FW.index("web {")]
    assert [s.start for n, s in chain_uses(module) if n == "web"] == [use]


def test_diagnostics_and_targets_of_a_firewall() -> None:
    text = "# pfc: targets xdp, cbpf\n" + FW
    analysis = analyse(SourceFile("/tmp/fw.pf", text))
    messages = [d.message for d in lsp_diagnostics(analysis, "file:///tmp/fw.pf")]
    assert [m for m in messages if "nat postrouting" in m] == [
        "no target of xdp, cbpf carries the `nat postrouting` block\n"
        "hint: targets that do: nft, iptables, ir"]
    broken = analyse(SourceFile("/tmp/b.pf", "input {\n    pass oif eth0\n"))
    codes = {d.code for d in lsp_diagnostics(broken, "file:///tmp/b.pf")}
    assert codes == {"not-in-block", "unclosed"}
    assert broken.policy.rules == ()  # the rule has an error; nothing raised


def test_semantic_tokens_of_v2_words() -> None:
    kinds = [k for _, _, _, k, _ in decode(encode("nat prerouting {\n    dnat tcp iif eth* "
                                                  "to :80\n}\n"))]
    assert kinds == ["keyword", "keyword", "action", "protocol", "field", "enumMember",
                     "keyword", "number"]
    assert [k for _, _, _, k, _ in decode(encode("mark to 1\npass mark 1\n"))] == [
        "action", "keyword", "number", "action", "field", "number"]
    assert types.SemanticTokenTypes.Keyword.value == "keyword"
