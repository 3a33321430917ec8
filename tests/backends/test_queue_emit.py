"""`queue` as nft and iptables print it (backends/*/queue.py): the verdict cache before
the queue statement only with `first`, after conntrack only; both nft forms alike."""

from __future__ import annotations

import json

import pytest

from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text

CACHED = "queue tcp dport 5201 num 3 first 8 bypass\n"
EVERY = "queue udp dport 53\n"


def build(text: str, target: str, hook: str, fmt: str | None = None):
    return build_artifact(compile_text(text, "q.pf"), target, fmt, hook=hook)


def test_iptables_cache_then_nfqueue() -> None:
    artifact, diags = build(CACHED, "iptables", "filter-input")
    assert not diags
    lines = [line for line in artifact.text.splitlines() if line.startswith("-A PFC -p tcp")]
    assert [line.split(" -j ")[-1] for line in lines] == [
        "RETURN", "DROP", "NFQUEUE --queue-num 3 --queue-bypass"]
    assert "--mark 0x80000000/0xc0000000" in lines[0]
    assert "--mark 0xc0000000/0xc0000000" in lines[1]


def test_iptables_without_first_queues_every_packet_anywhere() -> None:
    artifact, diags = build(EVERY, "iptables", "raw-prerouting")
    assert not diags and "connmark" not in artifact.text
    assert "-j NFQUEUE --queue-num 0\n" in artifact.text


@pytest.mark.parametrize("target,hook", [("iptables", "raw-prerouting"),
                                         ("nft", "prerouting")])
def test_first_before_conntrack_is_refused(target: str, hook: str) -> None:
    _, diags = build(CACHED, target, hook)
    assert [d.code for d in diags] == ["unsupported"]
    assert "before conntrack" in diags[0].message and "first K" in diags[0].message


def test_nft_text_and_json_say_the_same() -> None:
    text, diags = build(CACHED, "nft", "input")
    assert not diags
    rules = [line.strip() for line in text.text.splitlines() if "dport 5201" in line
             and not line.strip().startswith("#")]
    assert [r.split(" counter ")[-1] for r in rules[:3]] == [
        'accept comment "pfc rule 0"', 'drop comment "pfc rule 0"',
        'queue num 3 bypass comment "pfc rule 0"']
    assert "ct mark & 0xc0000000 0x80000000" in rules[0]
    js, _ = build(CACHED, "nft", "input", "json")
    exprs = [c["add"]["rule"]["expr"] for c in json.loads(js.text)["nftables"]
             if "rule" in c.get("add", {})]
    assert exprs[2][-1] == {"queue": {"num": 3, "flags": ["bypass"]}}
    assert exprs[0][-3]["match"]["right"] == 0x80000000
