"""Target u32: the tc batch (keys on aligned words, one filter per rule, abort nodes for
negations, matchall for the default) and what it refuses, with the reason. Its kernel
runs are the kernel matrix's `pfc verify` in 5.10, 6.1 and 6.12
(tests/kernel/test_matrix.py)."""

from __future__ import annotations

from pfc import backends
from pfc.backends.u32 import backend as u32
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_source
from pfc.frontend.source import SourceFile


def _artifact(text: str):
    return build_artifact(compile_source(SourceFile("t.pf", text)), "u32", dev="dut")


def test_registered_at_ingress_carrying_the_ingress_block() -> None:
    b = backends.get("u32")
    assert b.hooks == ("ingress",) and dict(b.carries) == {"ingress": "ingress"}


def test_seed_000_rule_without_its_port() -> None:
    artifact, diags = _artifact("drop udp dst 192.168.0.77/24\n")
    assert artifact is not None, diags
    lines = artifact.text.splitlines()
    assert ("filter add dev dut ingress pref 16385 protocol all u32 match u32 0x00000800 "
            "0x0000ffff at -4 match u32 0x00110000 0x00ff0000 at 8 match u32 0xc0a80000 "
            "0xffffff00 at 16 action gact drop") in lines
    assert lines[-1] == ("filter add dev dut ingress pref 16386 protocol all matchall "
                         "action gact pass")
    assert artifact.meta["prefs"] == {0: [16385], "default": [16386]}


def test_lists_are_nodes_and_negations_abort_first() -> None:
    artifact, _ = _artifact("drop dst { 10.0.0.0/8, 2001:db8::/32 } !src 10.1.0.0/16\n")
    text = artifact.text
    assert text.count("0x00000800 0x0000ffff at -4") == 2  # abort node, then the 10/8 node
    assert "at 2147483632 action gact drop" in text.splitlines()[4]
    both, _ = _artifact("drop dst { 10.0.0.0/8, 2001:db8::/32 }\n")
    assert ("protocol all u32 match u32 0x000086dd 0x0000ffff at -4 match u32 0x20010db8 "
            "0xffffffff at 24") in both.text
    assert both.meta["prefs"][0] == [16385, 16386]  # one filter per IP version


def test_ranges_become_masked_prefixes() -> None:
    assert u32._range_masks(1, 6, 8) == [(1, 0xFF), (2, 0xFE), (4, 0xFE), (6, 0xFF)]
    assert u32._range_masks(0, 255, 8) == [(0, 0)]


def test_transport_fields_are_refused_with_the_reason() -> None:
    artifact, diags = _artifact("drop udp dst 10.0.0.1 dport 53\n")
    assert artifact is None
    assert "transport field" in diags[0].message and "IHL" in diags[0].message
    assert "nfmod" in diags[0].hint


def test_a_lone_protocol_byte_is_refused() -> None:
    artifact, diags = _artifact("drop udp\n")
    assert artifact is None and "4-byte words" in diags[0].message


def test_count_continues_and_drop_all_is_matchall() -> None:
    artifact, _ = _artifact("count ip src 10.0.0.0/8\ndrop\n")
    assert "at 12 action gact continue" in artifact.text
    assert "pref 16386 protocol all matchall action gact drop" in artifact.text
