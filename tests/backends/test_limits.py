"""What ``pfc check --target T`` accepts, ``pfc compile --target T`` compiles: a limit a
backend's emitter enforces is reported by ``capability_errors`` too (``Backend.limits``,
run on the policy after the backend's passes), with the same diagnostic.

- iptables: a rule that needs more than 64 iptables rules (fuzz-and-faults.md, defect 4
  "related"); a field given twice as two single prefixes (``src A src B``), which would
  be two ``-s``/``-d`` flags iptables-restore refuses (defect 4);
- nft: an IPv4 ``redirect`` whose packets may be UDP-Lite or ICMPv6.
"""

from __future__ import annotations

import subprocess

import pytest

from pfc import api, backends
from pfc.backends.base import capability_errors
from pfc.build import build_artifact
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
def test_iptables_field_given_twice_is_a_capability_error(case):
    checked, refused = diagnostics(TWICE[case], "iptables")
    assert checked == refused and len(checked) == 1
    d = checked[0]
    assert d.code == "unsupported" and "given twice in one rule" in d.message
    assert ("`-s`" if case == "src" else "`-d`") in d.message


def test_iptables_field_given_twice_as_lists_is_two_sets():
    """Two lists are two ``-m set`` matches, which iptables takes: no error."""
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
    path = tmp_path / "twice.pf"
    path.write_text(TWICE["src"])
    pfc = str(ROOT / ".venv" / "bin" / "pfc")
    done = subprocess.run([pfc, "check", str(path), "--target", "iptables"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "cannot express `src` given twice in one rule" in done.stderr
    assert subprocess.run([pfc, "check", str(path)], capture_output=True).returncode == 0
