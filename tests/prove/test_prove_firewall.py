"""``pfc diff`` of whole firewalls (issue 25): each hook list's formula against the
interpreter on frames where each rule decides, and diffs of the examples against edited
copies (docs/prove.md "Whole firewalls")."""

from __future__ import annotations

import json
import random

import pytest

from pfc.cli.main import main
from pfc.frontend.pipeline import compile_path, compile_text
from pfc.oracle import gen
from pfc.oracle.packets import read_frame
from pfc.prove.firewall.diff import diff
from pfc.prove.firewall.inputs import name_classes, patterns_of
from tests.paths import ROOT
from tests.prove.firewall.gen import ANY, random_rule
from tests.prove.firewall.judge import (
    Formula,
    deciding_witnesses,
    interpreted,
    random_values,
)

SHAPES = ROOT / "tests/prove/firewall/shapes.pf"
ROUTER = ROOT / "examples/home-router.pf"
HOST = ROOT / "examples/host-firewall.pf"
FILES = [SHAPES, ROUTER, HOST, ROOT / "examples/docker-host.pf"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_list_is_the_interpreter_where_each_rule_decides(path) -> None:
    """For every rule (and default) that can decide, set a mark or `notrack`: the
    solver's frame and inputs, judged by the interpreter and the formula alike; then
    generated frames with random inputs."""
    rng = random.Random(5)
    for policy in compile_path(path).ruleset.lists:
        names = name_classes(patterns_of([policy]) | {"lo", "eth0"})
        f = Formula(policy, names)
        found = deciding_witnesses(f)
        every = [r for r in _reachable(policy)
                 if r.terminal or type(r.action).__name__ in ("Mark", "Notrack")]
        assert {r.index for r in every} <= set(found), policy.hook
        samples = [(fr, random_values(rng, names)) for fr in gen.sample(policy, 40, seed=3)
                   if policy.hook.name in ("ingress", "egress")
                   or read_frame(fr, False).version is not None]
        for frame, values in list(found.values()) + samples:
            assert interpreted(policy, frame, values) == f.evaluate(frame, values), (
                policy.hook.name, frame.hex(), values)


def _reachable(policy) -> list:
    """The list's rules and those of the chains it reaches."""
    out, todo = [], list(policy.rules)
    while todo:
        rule = todo.pop(0)
        out.append(rule)
        if type(rule.action).__name__ == "Jump":
            todo += list(policy.chain(rule.action.chain).rules)
    return out


def _edit(tmp_path, path, old: str, new: str, name: str = "edited.pf"):
    text = path.read_text()
    assert old in text
    out = tmp_path / name
    out.write_text(text.replace(old, new))
    return compile_path(out).ruleset


def _regions(result):
    return [(h.hook, r) for h in result.hooks for r in h.regions]


def _confirm(result, old, new) -> None:
    """The interpreter gives each region's witness the outcomes the region says."""
    lists = [{" ".join((p.hook.name, *p.hook.devices)): p for p in rs.lists}
             for rs in (old, new)]
    for hook, region in _regions(result):
        values = {k: (int(v, 16) if v.startswith("0x") else v)
                  for k, v in region.inputs.items() if not k.startswith("limit_")}
        for side, policies in ((region.old, lists[0]), (region.new, lists[1])):
            policy = policies.get(hook)
            if policy is None:
                assert side.verdict == "pass" and side.rule is None
                continue
            word, rule, _, _ = interpreted(policy, region.witness, values)
            if not any(k.startswith("limit_") for k in region.inputs):
                assert (word, rule) == (side.verdict, side.rule), (hook, region)


def test_a_reordered_disjoint_pair_is_the_same_meaning(tmp_path) -> None:
    old = compile_path(ROUTER).ruleset
    udp, tcp = "    pass udp iif eth1 dport 53\n", "    pass tcp iif eth1 dport 53\n"
    new = _edit(tmp_path, ROUTER, udp + tcp, tcp + udp)
    assert diff(old, new).same


def test_a_changed_port_is_a_region_with_a_witness(tmp_path) -> None:
    old = compile_path(ROUTER).ruleset
    new = _edit(tmp_path, ROUTER, "pass tcp iif eth1 dport 22", "pass tcp iif eth1 dport 2222")
    result = diff(old, new)
    found = _regions(result)
    assert {h for h, _ in found} == {"input"}
    assert sorted(r.change for _, r in found) == ["drop → pass", "pass → drop"]
    assert all(r.inputs["iif"] == "eth1" for _, r in found)
    _confirm(result, old, new)


def test_a_change_in_a_jumped_to_chain_is_found(tmp_path) -> None:
    old = compile_path(SHAPES).ruleset
    new = _edit(tmp_path, SHAPES, "    pass tcp dport 22\n", "    pass tcp dport 23\n")
    result = diff(old, new)
    found = _regions(result)
    assert {h for h, _ in found} == {"input"}
    assert {r.old.line for _, r in found} | {r.new.line for _, r in found} >= {6}
    assert all(r.inputs["iif"].startswith("eth") for _, r in found)  # the jump's iif eth*
    _confirm(result, old, new)


def test_a_wildcard_narrowed_is_found_on_another_name(tmp_path) -> None:
    old = compile_path(SHAPES).ruleset
    new = _edit(tmp_path, SHAPES, "jump lan iif eth*", "jump lan iif eth0")
    found = _regions(diff(old, new))
    assert found and {r.inputs["iif"] for _, r in found} <= {"eth1", "eth~"}


def test_nat_reject_mark_and_limit_changes(tmp_path) -> None:
    old = compile_path(SHAPES).ruleset
    edits = [("to 10.0.0.2:80", "to 10.0.0.3:80", "nat prerouting",
              "dnat to 10.0.0.2:80 → dnat to 10.0.0.3:80"),
             ("with admin-prohibited", "with host-unreachable", "input",
              "reject with admin-prohibited → reject with host-unreachable"),
             ("8000-8999 to 7", "8000-8999 to 8", "prerouting", "mark 0x7 → 0x8"),
             ("limit rate 10/second burst 10", "limit rate 20/second burst 10", "input", None),
             ("notrack udp dport 53", "notrack udp dport 54", "raw prerouting", None),
             ("masquerade oif eth0", "masquerade oif eth1", "nat postrouting", None)]
    for i, (a, b, hook, change) in enumerate(edits):
        new = _edit(tmp_path, SHAPES, a, b, f"e{i}.pf")
        result = diff(old, new)
        found = _regions(result)
        assert found and {h for h, _ in found} == {hook}, (a, found)
        if change is not None:
            assert change in {r.change for _, r in found}
        _confirm(result, old, new)


def test_what_each_hook_covers_is_said() -> None:
    rs = compile_path(SHAPES).ruleset
    notes = {h.hook: " ".join(h.notes) for h in diff(rs, rs).hooks}
    assert "ct state (and ct status, ct mark) treated as an input" in notes["input"]
    assert "NAT: the first packet's translation" in notes["nat prerouting"]
    assert "conntrack's application of it" in notes["nat postrouting"]
    assert "limit: whether a packet is within the rate is an input" in notes["input"]
    assert "address type treated as an input" in notes["input"]
    assert "mark: every value" in notes["prerouting"]


def test_a_block_added_is_compared_with_no_block(tmp_path) -> None:
    old = compile_path(HOST).ruleset
    new = _edit(tmp_path, HOST, "output {\n    default pass\n}",
                "output {\n    default pass\n}\n\nforward {\n    default drop\n}")
    found = _regions(diff(old, new))
    assert [(h, r.change) for h, r in found] == [("forward", "pass → drop")]


def test_pfc_diff_of_firewalls_on_the_command_line(tmp_path, capsys) -> None:
    edited = tmp_path / "router.pf"
    edited.write_text(ROUTER.read_text().replace("dport 22", "dport 2222"))
    assert main(["diff", str(ROUTER), str(ROUTER)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("same meaning:") and "covers: NAT: the first packet" in out
    assert main(["diff", str(ROUTER), str(edited), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["same"] is False and report["firewall"] is True
    assert {r["hook"] for r in report["regions"]} == {"input"}
    assert all(r["witness"] and r["inputs"]["iif"] == "eth1" for r in report["regions"])
    assert [h["hook"] for h in report["hooks"]][:2] == ["nat prerouting", "input"]
    v1 = tmp_path / "v1.pf"
    v1.write_text("drop udp dport 53\n")
    assert main(["diff", str(v1), str(ROUTER)]) == 2
    assert "compares a whole firewall with a whole firewall" in capsys.readouterr().err


def test_compile_text_firewall_lists_have_chains() -> None:
    rs = compile_text("chain c {\n    drop udp\n}\ninput {\n    jump c\n}\n").ruleset
    assert rs.lists[0].chains and not diff(rs, rs).hooks[0].regions


def test_the_editor_says_what_an_edit_of_a_firewall_changes() -> None:
    from pfc.prove.lsp import edit_summary
    text = ROUTER.read_text()
    assert edit_summary(text, text + "\n", "r.pf") == (
        "this edit changes no hook's verdict, mark, translation or rewrite")
    summary = edit_summary(text, text.replace("masquerade oif eth0", "masquerade oif eth1"),
                           "r.pf")
    assert summary.startswith("this edit changes: nat postrouting: ")
    assert "masquerade → pass" in summary


def test_generated_lists_are_the_interpreter_where_each_rule_decides() -> None:
    rng = random.Random(11)
    for n in range(12):
        rules = "\n".join("    " + random_rule(rng) for _ in range(5))
        rules += "\n    jump side " + rng.choice([m for ms in ANY.values() for m in ms])
        side = "\n".join("    " + random_rule(rng).replace("jump side", "pass")
                         for _ in range(2))
        text = (f"chain side {{\n{side}\n}}\n\ninput {{\n    default "
                f"{rng.choice(['pass', 'drop'])}\n{rules}\n}}\n")
        compiled = compile_text(text, f"gen{n}.pf")
        assert compiled.ok, (text, [d.message for d in compiled.diagnostics])
        [policy] = compiled.ruleset.lists
        f = Formula(policy, name_classes(patterns_of([policy]) | {"lo", "eth0"}))
        for frame, values in deciding_witnesses(f).values():
            assert interpreted(policy, frame, values) == f.evaluate(frame, values), (
                text, frame.hex(), values)
