"""Whole firewalls through the commands: `pfc compile --target ir` writes the Ruleset,
`pfc compile --target T1,T2` gives each block to the first target that carries it
(one artifact per block, STEM.BLOCK.EXT), `pfc check --target` says what compile would
refuse, and the commands that take one rule list say so (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pfc import backends
from pfc.backends.base import FEATURES, V2_FEATURES, needed_features
from pfc.build import build_ruleset, check_ruleset
from pfc.cli.main import main
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.pipeline import compile_text
from tests.frontend.firewalls import V2_RULES, allowed

EDGE = ("set flood = file \"blocks.txt\"\ningress {\n    drop src $flood\n    drop udp dport "
        "12345\n}\n\ninput {\n    default drop\n    pass tcp dport 22\n"
        "    pass ct state established,related\n}\n")


@pytest.fixture
def edge(tmp_path: Path) -> Path:
    (tmp_path / "blocks.txt").write_text("10.0.0.0/8\n192.0.2.7\n")
    path = tmp_path / "edge.pf"
    path.write_text(EDGE)
    return path


def test_ir_of_a_whole_firewall(capsys) -> None:
    text = ("interface eth0 address 192.0.2.10/24 gateway 192.0.2.1\nchain c {\n    pass\n}\n"
            "output {\n    pass\n}\ninput {\n    jump c\n    reject tcp with tcp-reset\n}\n")
    compiled = compile_text(text, "fw.pf")
    [artifact], diags = build_ruleset(compiled.ruleset, ["ir"])
    assert diags == [] and list(artifact.files) == ["fw.ir.json"]
    doc = json.loads(artifact.text)
    assert doc["kind"] == "Ruleset" and doc["source"] == "fw.pf"
    assert [p["hook"]["name"] for p in doc["lists"]] == ["input", "output"]
    # as every target that takes a whole ruleset reads it: the chains written out
    assert all("chains" not in p for p in doc["lists"]) and "chains" not in doc
    assert doc["lists"][0]["rules"][0]["action"]["kind"] == "Pass"
    assert doc["interfaces"][0]["addresses"] == ["192.0.2.10/24"]
    action = doc["lists"][0]["rules"][-1]["action"]
    assert (action["kind"], action["reply"]) == ("Reject", "tcp-reset")  # not overwritten


def test_blocks_go_to_the_first_target_that_carries_them(edge: Path, capsys) -> None:
    out = edge.parent / "out"
    assert main(["compile", str(edge), "--target", "xdp,nft", "-o", f"{out}/"]) == 0
    names = sorted(p.name for p in out.iterdir())
    # xdp: one artifact per block (STEM.BLOCK.EXT); nft: one of all its blocks
    assert "edge.ingress.c" in names and "edge.ingress.o" in names
    assert "edge.nft.nft" in names and not any(".xdp." in n for n in names)
    assert "hook input" in (out / "edge.nft.nft").read_text()


def test_several_artifacts_need_a_directory(edge: Path, capsys) -> None:
    assert main(["compile", str(edge), "--target", "xdp,nft"]) == 2
    err = capsys.readouterr().err
    assert "compiles to 2 artifacts" in err and "-o DIR/" in err
    assert not list(Path.cwd().glob("edge.*"))
    assert main(["compile", str(edge), "--target", "nft", "--hook", "input"]) == 2
    assert "each block names its hook" in capsys.readouterr().err


def test_a_block_no_target_carries(edge: Path, capsys) -> None:
    assert main(["compile", str(edge), "--target", "iptables"]) == 1
    err = capsys.readouterr().err
    assert "no target of iptables carries the `ingress` block" in err
    assert "targets that do:" in err


def test_check_target_of_a_whole_firewall(edge: Path, capsys) -> None:
    assert main(["check", str(edge), "--target", "xdp,nft"]) == 0
    assert main(["check", str(edge), "--target", "cbpf", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    messages = [d["message"] for d in report["files"][0]["diagnostics"]]
    assert messages == ["no target of cbpf carries the `input` block"]


def test_every_v2_feature_fails_closed_on_targets_without_it() -> None:
    """A target of one list per block that lacks a v2 feature refuses the rule, never
    drops it (a target with ``emit_ruleset`` refuses what it cannot print itself)."""
    for text, fields, action, where in V2_RULES:
        block = next(b for b in BLOCKS if allowed(b, fields, action, where))
        source = f"define wan = eth0\n{block} {{\n    {text.format(iface='eth0')}\n}}\n"
        compiled = compile_text(source)
        assert compiled.ok, (source, compiled.diagnostics)
        rule = compiled.ruleset.rules[0]
        for target in ("nft", "iptables", "xdp", "tc", "socket", "cbpf"):
            missing = needed_features(rule, backends.get(target)) - \
                backends.get(target).supports
            if not missing:
                continue
            diags = check_ruleset(compiled.ruleset, [target])
            assert diags and diags[0].severity == "error", (source, target)
    assert {"reject", "nat", "iface"} <= V2_FEATURES


@pytest.mark.parametrize("command,args", [
    ("frames", ["-n", "3", "-o", "{tmp}/f.pcap"]),
])  # run, verify, load: tests/tools/test_{run,verify,load}_v2.py; diff and prove:
# tests/prove/test_prove_firewall*.py
def test_commands_that_take_one_list_say_so(capsys, tmp_path: Path, command, args) -> None:
    """Exit 1 with one diagnostic (no internal error, nothing half done)."""
    path = tmp_path / "fw.pf"
    path.write_text("input {\n    pass\n}\n")
    args = [a.format(tmp=tmp_path, file=path) for a in args]
    assert main([command, str(path), *args]) == 1
    err = capsys.readouterr().err
    assert f"`{path}` is a whole firewall (hook blocks); `pfc {command}` takes one rule " \
           "list" in err and "1:1" in err and "internal error" not in err


def test_v1_compile_is_unchanged(capsys) -> None:
    from tests.paths import ROOT
    edge = str(ROOT / "examples" / "edge-drop.pf")
    assert main(["compile", edge, "--target", "ir"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "Policy" and "hook" not in doc and "chains" not in doc
    assert main(["compile", edge, "--target", "xdp,nft"]) == 2
    assert "a list of targets is for whole firewalls" in capsys.readouterr().err


def test_the_v2_features_are_those_rules_can_need() -> None:
    from pfc.backends import base

    needed = set(base.FIELD_FEATURES.values()) | set(base._ACTION_FEATURES.values())
    by_place = {"pass-limit", "iif-post"}  # a limit on a pass rule; iif after routing
    assert base.V2_FEATURES == needed | by_place and base.V2_FEATURES <= set(FEATURES)


def test_a_blocks_file_names_in_meta_follow_the_rename() -> None:
    """An eBPF block's files are renamed STEM.BLOCK.EXT; the names its metadata gives
    (the maps file `pfc load` fills the maps from) are renamed with them."""
    from pfc.frontend.pipeline import compile_path
    from tests.paths import ROOT

    ruleset = compile_path(ROOT / "examples" / "ddos-edge.pf").require_ruleset()
    artifacts, diags = build_ruleset(ruleset, ["xdp", "nft"])
    assert not diags
    (xdp,) = [a for a in artifacts if a.target == "xdp"]
    assert xdp.meta["maps_file"] in xdp.files and ".ingress-eth0." in xdp.meta["maps_file"]


@pytest.mark.parametrize("text", ["interface e", "interface eth0 address 192.0.2.10/24\n"])
def test_a_firewall_without_blocks_is_refused_by_compile_and_check(text) -> None:
    """Only `interface` lines (found by the fuzzer: a truncated file): every target says
    there is nothing to carry, an error with the file's first line, never an empty
    success (`pfc compile` printed "compiles to 0 artifacts")."""
    compiled = compile_text(text, "blockless.pf")
    assert compiled.ok and compiled.ruleset is not None and not compiled.ruleset.lists
    for target in (t for t in backends.registry() if t != "ir"):
        made, diags = build_ruleset(compiled.ruleset, [target])
        assert not made and [d.code for d in diags] == ["no-rules"], target
        assert "no hook blocks" in diags[0].message
        assert [d.code for d in check_ruleset(compiled.ruleset, [target])] == ["no-rules"]
