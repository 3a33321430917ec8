"""A field given twice is merged into one match that means the same: the interpreter
gives every generated frame the same verdict, deciding rule and counters before and
after (before = the checker with the merge turned off)."""

from __future__ import annotations

import ipaddress
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc.frontend import check as check_module
from pfc.frontend import ir
from pfc.frontend.pipeline import Compiled, compile_text
from pfc.oracle import gen
from pfc.oracle.interp import run
from tests.frontend.fuzzing import dup_rule


def _unmerged(text: str) -> Compiled:
    keep = mock.patch.object(check_module, "merge_fields",
                             lambda matches, family: (tuple(matches), []))
    with keep:
        return compile_text(text, "p.pf")


@st.composite
def _policy(draw) -> str:
    lines = [f"default {draw(st.sampled_from(['pass', 'drop']))}"]
    lines += draw(st.lists(dup_rule(), min_size=1, max_size=4))
    return "\n".join(lines) + "\n"


def _same_verdicts(text: str, frames: int = 300) -> ir.Policy | None:
    merged = compile_text(text, "p.pf")
    before = _unmerged(text)
    if not before.ok:
        return None
    if not merged.ok:  # refused: only where one `flags`/`frag` match cannot say it
        assert {d.code for d in merged.diagnostics if d.severity == "error"} == {"flags-merge"}
        return None
    policy, unmerged = merged.require(), before.require()
    sample = gen.sample(unmerged, frames, seed=len(text))
    out_before, count_before = run(unmerged, sample)
    out_after, count_after = run(policy, sample)
    assert [(o.verdict, o.rule) for o in out_before] == [(o.verdict, o.rule) for o in out_after]
    assert count_before == count_after
    return policy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_policy())
def test_merging_keeps_the_interpreters_verdicts(text: str) -> None:
    policy = _same_verdicts(text)
    if policy is not None:
        for rule in policy.rules:
            fields = [m.field for m in rule.matches if m.field != "payload"]
            assert len(fields) == len(set(fields)), rule


def _rule(text: str) -> ir.Rule:
    compiled = compile_text(text, "p.pf")
    return compiled.require().rules[0]


def test_positives_intersect_negatives_unite_and_mixed_subtract() -> None:
    (m,) = _rule("drop src 10.0.0.0/8 src { 10.1.0.0/16, 11.0.0.0/8 }").matches
    assert [str(p) for p in m.prefixes] == ["10.1.0.0/16"] and not m.negated
    (m,) = _rule("drop udp !dport 53 !dport 80-90").matches
    assert m.negated and m.ranges == ((53, 53), (80, 90))
    (m,) = _rule("drop src 10.0.0.0/8 !src 10.1.0.0/16").matches
    assert not m.negated and [str(p) for p in m.prefixes] == [
        "10.0.0.0/16", "10.2.0.0/15", "10.4.0.0/14", "10.8.0.0/13", "10.16.0.0/12",
        "10.32.0.0/11", "10.64.0.0/10", "10.128.0.0/9"]
    (m,) = _rule("drop udp dport 1-1000 dport 500-2000").matches
    assert m.ranges == ((500, 1000),)
    (m,) = _rule("drop tcp flags syn !flags ack").matches
    assert (m.set, m.clear, m.negated) == (ir.TCP_FLAGS["syn"], ir.TCP_FLAGS["ack"], False)


def test_an_empty_result_warns_and_never_matches() -> None:
    compiled = compile_text("drop udp src 10.0.0.0/8 src 11.0.0.0/8\n", "p.pf")
    (d,) = compiled.diagnostics
    assert d.code == "never-matches" and d.severity == "warning"
    assert "can never match" in d.message
    (m,) = compiled.require().rules[0].matches
    assert m.prefixes == () and not m.negated  # nothing is in it: never "anything"
    (m,) = _rule("pass udp dport 1-100 dport 200-300").matches
    assert m.ranges == () and not m.negated
    assert _same_verdicts("default drop\npass udp !dport 0-100 !dport 50-65535\n")


def test_a_set_minus_an_address_keeps_the_rest() -> None:
    text = "define big = { " + ", ".join(f"10.{i}.0.0/16" for i in range(200)) + " }\n" \
           "drop udp src $big !src 10.7.1.1\n"
    (m,) = _rule(text).matches
    host = ipaddress.ip_address("10.7.1.1")
    assert not any(host in p for p in m.prefixes)
    assert sum(p.num_addresses for p in m.prefixes) == 200 * 65536 - 1
    assert _same_verdicts(text)


def test_what_one_flags_match_cannot_say_is_an_error_with_a_hint() -> None:
    for text in ("drop tcp flags syn !flags ack,psh", "drop tcp flags syn flags !syn",
                 "drop tcp !flags syn,ack !flags fin,psh", "drop ip frag !frag"):
        compiled = compile_text(text + "\n", "p.pf")
        (d,) = [d for d in compiled.diagnostics if d.severity == "error"]
        assert d.code == "flags-merge" and d.hint, text


def test_iptables_gets_one_source_flag() -> None:
    from pfc.build import build_artifact

    compiled = compile_text("drop src 10.0.0.0/8 src 10.1.0.0/16\n", "d1.pf")
    artifact, diags = build_artifact(compiled, "iptables")
    assert artifact is not None, diags
    text = b"".join(artifact.files.values()).decode()
    rules = [line for line in text.splitlines() if line.startswith("-A") and "DROP" in line]
    assert rules and all(line.count(" -s ") == 1 for line in rules), rules


NEVER = """default drop
count udp src 10.0.0.0/8 src 11.0.0.0/8
drop udp dport 1-100 dport 200-300
pass tcp src 10.0.0.0/8 !src 10.0.0.0/7
pass udp !dport 0-100 !dport 50-65535
drop src 10.0.0.0/8 !src 10.1.0.0/16
drop udp dport 1-1000 dport 500-2000
pass tcp flags syn !flags ack
pass ip proto 6 !proto { 6, 17 }
"""


@pytest.mark.kernel
@pytest.mark.parametrize("target", ["cbpf", "socket", "tc", "xdp", "nft", "iptables"])
def test_merged_and_never_matching_rules_agree_in_the_kernel(target: str) -> None:
    """Every backend copes with a merged match and with an empty one (the rule never
    matches; nothing turns it into "match anything"): same verdicts and counters as the
    interpreter on generated frames, in the kernel. cbpf gets the policy without its
    `count` rule (it cannot count)."""
    from pfc import backends
    from pfc.build import build_artifact
    from pfc.verifier.equiv import compare

    text = NEVER if target != "cbpf" else NEVER.replace("count udp", "drop udp")
    compiled = compile_text(text, "never.pf")
    artifact, diags = build_artifact(compiled, target, dev="dut")
    assert artifact is not None, diags
    frames = gen.sample(compiled.require(), 1500, seed=7)
    report = compare(artifact, backends.get(target), frames)
    assert report.ok, report.summary()
