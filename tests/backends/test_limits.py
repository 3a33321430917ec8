"""What ``pfc check --target T`` accepts, ``pfc compile --target T`` compiles: a limit a
backend's emitter enforces is reported by ``capability_errors`` too (``Backend.limits``,
run on the policy after the backend's passes), with the same diagnostic.

- iptables: a rule that needs more than 64 iptables rules (fuzz-and-faults.md, defect 4
  "related"); a field given twice (``src A src B``, defect 4) is merged by the checker,
  and an IR that still has two is refused by the emitter, never two ``-s`` flags;
- nft: an IPv4 ``redirect`` whose packets may be UDP-Lite or ICMPv6.
"""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from pfc import api, backends
from pfc.backends.base import Options, capability_errors
from pfc.build import build_artifact
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import compile_text
from tests.paths import ROOT

PORTS = ", ".join(str(p) for p in range(1000, 1400, 2))
TOO_COMPLEX = f"drop udp dport {{ {PORTS} }} sport {{ {PORTS} }}\n"
TWICE = {"src": "drop src 10.0.0.0/8 src 10.1.0.0/16\n",
         "dst6": "pass ip6 dst 2001:db8::/32 !dst 2001:db8::1\n"}
REDIRECT = "redirect ip dst 10.0.0.1 to 10.0.0.2\n"


def diagnostics(text: str, target: str) -> tuple[list, list]:
    """(what ``check --target`` says, what ``compile`` says) about a policy."""
    compiled = compile_text(text, "t.pf")
    checked = [d for d in api.check(compiled, targets=[target]) if d.severity == "error"]
    artifact, refused = build_artifact(compiled, target, dev="eth0")
    assert artifact is None
    return checked, refused


def test_iptables_rule_too_complex_is_refused_by_check():
    checked, refused = diagnostics(TOO_COMPLEX, "iptables")
    assert checked == refused
    assert checked[0].code == "too-complex" and "(more than 64)" in checked[0].message


@pytest.mark.parametrize("case", TWICE)
def test_iptables_field_given_twice_is_merged_into_one_flag(case):
    """The checker merges a field given twice (tests/frontend/test_merge.py), so
    iptables gets one ``-s``/``-d`` and check says nothing."""
    compiled = compile_text(TWICE[case], "t.pf")
    assert api.check(compiled, targets=["iptables"]) == []
    artifact, diags = build_artifact(compiled, "iptables")
    assert artifact is not None, diags
    for name in (artifact.meta["files"]["ipv4"], artifact.meta["files"]["ipv6"]):
        for line in artifact.files[name].decode().splitlines():
            assert line.split().count("-s") <= 1 and line.split().count("-d") <= 1


def test_iptables_refuses_an_ir_rule_with_two_matches_on_one_field():
    """A policy built in-process (not through the checker) may still carry two ``src``
    matches: the emitter refuses it rather than write two ``-s``."""
    policy = compile_text("drop src 10.0.0.0/8\n", "t.pf").require()
    rule = policy.rules[0]
    twice = dataclasses.replace(rule, matches=rule.matches * 2)
    policy = dataclasses.replace(policy, rules=(twice,))
    with pytest.raises(CompileError, match="given twice in one rule") as caught:
        iptables = backends.get("iptables")
        iptables.emit(iptables.lower(policy), Options("iptables", hook="raw-prerouting"))
    assert "one `-s` per rule" in caught.value.diagnostics[0].message


def test_iptables_field_given_twice_as_lists_is_one_match():
    """Two lists are merged into one match (their intersection): no error."""
    text = "drop src { 10.0.0.1, 10.0.0.2 } src { 10.0.0.2, 10.0.0.3 }\n"
    artifact, diags = build_artifact(compile_text(text, "t.pf"), "iptables")
    assert artifact is not None, diags
    for name in (artifact.meta["files"]["ipv4"], artifact.meta["files"]["ipv6"]):
        for line in artifact.files[name].decode().splitlines():
            assert line.split().count("-s") <= 1 and line.split().count("-d") <= 1


def test_nft_redirect_refusal_is_reported_by_check():
    checked, refused = diagnostics(REDIRECT, "nft")
    assert checked == refused and "UDP-Lite" in checked[0].message


def test_limits_are_checked_on_the_lowered_policy_and_can_be_skipped():
    """``build_artifact`` skips them (the emitter enforces the same), others do not."""
    policy = compile_text(TOO_COMPLEX, "t.pf").require()
    iptables, registry = backends.get("iptables"), backends.registry()
    assert capability_errors(policy, iptables, registry, limits=False) == []
    assert capability_errors(policy, iptables, registry)[0].code == "too-complex"
    for target in ("nft", "xdp", "tc", "socket"):  # lists and sets: no limit here
        assert capability_errors(policy, backends.get(target), registry) == []


def test_pfc_check_target_iptables_exits_1_with_the_error(tmp_path):
    path = tmp_path / "complex.pf"
    path.write_text(TOO_COMPLEX)
    pfc = str(ROOT / ".venv" / "bin" / "pfc")
    done = subprocess.run([pfc, "check", str(path), "--target", "iptables"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "(more than 64)" in done.stderr
    assert subprocess.run([pfc, "check", str(path)], capture_output=True).returncode == 0
