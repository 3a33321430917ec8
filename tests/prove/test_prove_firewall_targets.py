"""``pfc prove`` of whole firewalls (issue 25): each hook of the nft and iptables
artifacts proved equal to its list, mutated artifacts caught with a witness the
interpreter confirms, unmodelled parts said as `not proved: REASON`."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pfc.build import build_ruleset
from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path
from pfc.prove.firewall.proof import prove_artifact, prove_firewall
from tests.paths import ROOT
from tests.prove.firewall.judge import interpreted

ROUTER = ROOT / "examples/home-router.pf"
HOST = ROOT / "examples/host-firewall.pf"
SHAPES = ROOT / "tests/prove/firewall/shapes.pf"
SHAPES_IPT = ROOT / "tests/prove/firewall/shapes-ipt.pf"


def _hooks(path) -> list[str]:
    return [" ".join((p.hook.name, *p.hook.devices)) for p in compile_path(path).ruleset.lists]


@pytest.mark.parametrize("path", [ROUTER, HOST], ids=lambda p: p.stem)
def test_the_examples_are_proved_on_nft_and_iptables(path) -> None:
    found = list(prove_firewall(compile_path(path).ruleset, ["nft", "iptables"]))
    assert [(r.target, r.hook, r.status) for r in found] == [
        (t, h, "proved") for t in ("nft", "iptables") for h in _hooks(path)]


def test_every_shape_is_proved_or_said_not_to_be() -> None:
    nft = {r.hook: r for r in prove_firewall(compile_path(SHAPES).ruleset, ["nft"])}
    assert nft.pop("ingress eth0").status == "not-modelled"
    assert {h: r.status for h, r in nft.items()} == {h: "proved" for h in nft}
    assert set(nft) == set(_hooks(SHAPES)) - {"ingress eth0"}
    ipt = list(prove_firewall(compile_path(SHAPES_IPT).ruleset, ["iptables"]))
    assert [(r.hook, r.status) for r in ipt] == [(h, "proved") for h in _hooks(SHAPES_IPT)]


def _confirm(ruleset, proof) -> None:
    """The interpreter does to the witness what the proof says the policy does."""
    policy = next(p for p in ruleset.lists if " ".join((p.hook.name, *p.hook.devices))
                  == proof.hook)
    values = {k: (int(v, 16) if v.startswith("0x") else v) for k, v in proof.inputs.items()
              if not k.startswith("limit_")}
    word, _, mark, _ = interpreted(policy, proof.witness, values)
    assert proof.expected.startswith(f"{word}, mark {mark:#x}"), (proof.expected, word)


def test_a_flipped_verdict_in_the_nft_artifact_is_caught() -> None:
    ruleset = compile_path(ROUTER).ruleset
    artifact = build_ruleset(ruleset, ["nft"])[0][0]
    text = artifact.text.replace("tcp dport 22 counter accept", "tcp dport 22 counter drop")
    assert text != artifact.text
    found = [r for r in prove_artifact(ruleset, dataclasses.replace(artifact, text=text))
             if r.status != "proved"]
    assert [(r.hook, r.status) for r in found] == [("input", "differs-not-run")]
    assert found[0].expected.startswith("pass") and found[0].modelled.startswith("drop")
    assert found[0].inputs["iif"] == "eth1" and found[0].witness
    _confirm(ruleset, found[0])


@pytest.mark.parametrize("family,old,new,hook", [
    ("ipv4", "--ctstate INVALID -j DROP", "--ctstate INVALID -j RETURN", "input"),
    ("ipv6", "icmp6-port-unreachable", "icmp6-adm-prohibited", "input"),
    ("ipv6", "-i lo -j RETURN", "-i lo+ -j RETURN", "input"),  # a name only it tells apart
])
def test_a_mutated_iptables_artifact_is_caught(family, old, new, hook) -> None:
    ruleset = compile_path(HOST).ruleset
    artifact = build_ruleset(ruleset, ["iptables"])[0][0]
    name = artifact.meta["files"][family]
    text = artifact.files[name].decode()
    assert old in text
    files = dict(artifact.files) | {name: text.replace(old, new, 1).encode()}
    found = [r for r in prove_artifact(ruleset, dataclasses.replace(artifact, files=files))
             if r.status != "proved"]
    assert [(r.hook, r.status) for r in found] == [(hook, "differs-not-run")]
    if "lo+" not in new:
        _confirm(ruleset, found[0])


def test_nat_and_marks_mutated_in_nft_are_caught() -> None:
    ruleset = compile_path(SHAPES).ruleset
    artifact = build_ruleset(ruleset, ["nft"])[0][0]
    for old, new, hook in [("dnat ip to 10.0.0.2:80", "dnat ip to 10.0.0.2:81", "nat prerouting"),
                           ("meta mark set 0x7", "meta mark set 0x8", "prerouting"),
                           ("counter masquerade", "counter snat ip to 192.0.2.10",
                            "nat postrouting"),
                           ("dport 53 notrack", "dport 54 notrack", "raw prerouting")]:
        assert old in artifact.text
        mutant = dataclasses.replace(artifact, text=artifact.text.replace(old, new, 1))
        found = [(r.hook, r.status) for r in prove_artifact(ruleset, mutant, only=hook)]
        assert found == [(hook, "differs-not-run")], (old, found)


def test_pfc_prove_of_a_firewall_on_the_command_line(tmp_path, capsys) -> None:
    assert main(["prove", str(ROUTER), "--targets", "nft,iptables"]) == 0
    out = capsys.readouterr().out
    assert f"{ROUTER}: nft/forward: proved" in out and f"{ROUTER}: iptables/input: proved" in out
    assert "covers: NAT: the first packet's translation" in out
    assert main(["prove", str(HOST), "--targets", "iptables", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    entry = report["files"][0]
    assert entry["proved"] and entry["firewall"]
    assert [(t["target"], t["hook"], t["status"]) for t in entry["targets"]] == [
        ("iptables", "input", "proved"), ("iptables", "output", "proved")]
    assert any("ct state" in c for c in entry["targets"][0]["covers"])
    assert main(["prove", str(HOST), "--targets", "tc"]) == 1
    assert "tc/*: not proved: no model of whole firewalls on `tc`" in capsys.readouterr().out
    assert main(["prove", str(HOST), "--target", "nft", "--artifact", str(HOST)]) == 2


def _keys(value, into: set[str]) -> set[str]:
    """Every key of a JSON report but those of `inputs` (named in the docs' prose)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            into.add(key)
            if key != "inputs":
                _keys(inner, into)
    elif isinstance(value, list):
        for inner in value:
            _keys(inner, into)
    return into


def test_the_firewall_json_fields_are_documented(tmp_path, capsys) -> None:
    import re
    docs = (ROOT / "docs" / "json.md").read_text()
    edited = tmp_path / "router.pf"
    edited.write_text(ROUTER.read_text().replace("dport 22", "dport 2222"))
    main(["diff", str(ROUTER), str(edited), "--format", "json"])
    diff_report = json.loads(capsys.readouterr().out)
    main(["prove", str(HOST), "--targets", "nft", "--format", "json"])
    prove_report = json.loads(capsys.readouterr().out)
    for report in (diff_report, prove_report):
        assert report["version"] == 1
        for key in _keys(report, set()):
            assert re.search(rf"[`.]{re.escape(key)}`", docs), key


def test_a_meter_is_proved_and_its_rate_flipped_is_caught(tmp_path) -> None:
    """`limit ... per src` (an nft meter, as in examples/ddos-edge.pf): its answer is
    the rule's input bit."""
    path = tmp_path / "edge.pf"
    path.write_text("ingress eth0 {\n    drop udp dport 53 limit rate 1000/second burst 100 "
                    "per src\n    drop tcp dport 23\n}\n\ninput {\n    default pass\n}\n")
    ruleset = compile_path(path).ruleset
    artifact = build_ruleset(ruleset, ["nft"])[0][0]
    assert [r.status for r in prove_artifact(ruleset, artifact)] == ["proved", "proved"]
    old = "limit rate over 1000/second burst 100 packets } counter drop"
    assert old in artifact.text
    mutant = dataclasses.replace(artifact, text=artifact.text.replace(
        old, old.replace("rate over", "rate"), 1))
    found = [r for r in prove_artifact(ruleset, mutant) if r.status != "proved"]
    assert [(r.hook, r.status) for r in found] == [("ingress eth0", "differs-not-run")]


def test_an_address_removed_from_an_iptables_ipset_is_caught(tmp_path) -> None:
    (tmp_path / "bl.txt").write_text("".join(f"198.51.0.{i}/32\n" for i in range(1, 200)))
    path = tmp_path / "fw.pf"
    path.write_text('set bl = file "bl.txt"\n\ninput {\n    default pass\n    drop src $bl\n'
                    "    drop tcp dport 23\n}\n")
    ruleset = compile_path(path).ruleset
    artifact = build_ruleset(ruleset, ["iptables"])[0][0]
    assert [r.status for r in prove_artifact(ruleset, artifact)] == ["proved"]
    name = artifact.meta["files"]["ipset"]
    lines = artifact.files[name].decode().splitlines()
    kept = [line for line in lines if not line.endswith(" 198.51.0.7/32")]
    assert len(kept) == len(lines) - 1
    mutant = dataclasses.replace(artifact, files=artifact.files | {name: "\n".join(
        kept).encode()})
    [found] = prove_artifact(ruleset, mutant)
    assert found.status == "differs-not-run" and found.witness[26:30] == bytes([198, 51, 0, 7])


def test_a_limited_rule_keeps_its_interface_and_mark_on_nft(tmp_path) -> None:
    """Found by pfc prove of generated firewalls: nft's lowering of a rule with a rate
    and no protocol (a bucket per family) left out its other matches, so `pass iif eth0
    limit rate 5/second` accepted from every interface."""
    path = tmp_path / "fw.pf"
    path.write_text("input {\n    default drop\n    pass iif eth0 limit rate 5/second\n"
                    "    drop mark 5 limit rate 5/second\n}\n")
    found = list(prove_firewall(compile_path(path).ruleset, ["nft", "iptables"]))
    assert [(r.target, r.status) for r in found] == [("nft", "proved"), ("iptables", "proved")]


def test_jumps_joined_with_their_chains_on_the_same_field_are_proved() -> None:
    """Found by pfc prove of generated firewalls: inline_chains joined two v2 matches of
    one field (`ether-src` in a jump and in its chain's rule) into a `frag` match, or
    refused the join with a message about `frag`."""
    found = list(prove_firewall(compile_path(ROOT / "tests/prove/firewall/joins.pf").ruleset,
                                ["nft", "iptables"]))
    assert [(r.target, r.status) for r in found] == [("nft", "proved"), ("iptables", "proved")]


def test_v2_matches_of_one_field_merge_as_sets() -> None:
    from pfc.frontend import ir
    from pfc.frontend.merge import merge_fields
    mac = b"\x02\x00\x00\x00\x00\x01"
    [m], _ = merge_fields([ir.MacMatch("ether-src", (mac,)),
                           ir.MacMatch("ether-src", (mac, b"\x02" * 6))], ir.Family.ANY)
    assert (type(m), m.macs, m.negated) == (ir.MacMatch, (mac,), False)
    [m], _ = merge_fields([ir.CtMatch(("invalid",), negated=True),
                           ir.CtMatch(("established", "invalid"))], ir.Family.IP)
    assert (m.states, m.negated) == (("established",), False)
    [m], _ = merge_fields([ir.CtStatusMatch(("dnat",)), ir.CtStatusMatch(("seen-reply",))],
                          ir.Family.IP)
    assert m.statuses == ("seen-reply", "dnat")
    matches, diags = merge_fields([ir.AddrTypeMatch("dst-type", ("local",)),
                                   ir.AddrTypeMatch("dst-type", ("broadcast",))], ir.Family.IP)
    assert [d.code for d in diags] == ["never-matches"] and matches[0].types == ()
    matches, diags = merge_fields([ir.IfaceMatch("iif", ("eth*",)),
                                   ir.IfaceMatch("iif", ("lo",), negated=True)], ir.Family.ANY)
    assert matches == () and "cannot be written as one" in diags[0].message


def test_a_v2_match_of_no_value_is_left_out_on_nft(tmp_path) -> None:
    """Found by pfc prove of generated firewalls: `pass mark 6 mark 3` (merged: no
    mark is both) was emitted as `meta mark { }`, which nft refuses to load."""
    path = tmp_path / "fw.pf"
    path.write_text("input {\n    default drop\n    pass mark 6 mark 3\n    pass tcp dport 22\n}\n")
    found = list(prove_firewall(compile_path(path).ruleset, ["nft"]))
    assert [(r.target, r.status) for r in found] == [("nft", "proved")]
