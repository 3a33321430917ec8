"""The front end of `log`, `limit`, `audit` and `ct state`: what the checker makes of
them, `pfc fmt`'s round trip, the IR's JSON, and the capability errors of the targets
that cannot express them yet."""

from __future__ import annotations

import json

import pytest

from pfc import backends
from pfc.backends.base import capability_errors
from pfc.build import build_artifact
from pfc.frontend import ir
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_text
from pfc.frontend.source import SourceFile
from pfc.passes.group import group_runs

POLICY = """\
log tcp dport 80 prefix "web" rate 10/second snap 64
drop udp dport 7000 limit rate 100/minute burst 10 per src
drop tcp dport 23 audit
pass tcp dport 22 ct state new
pass !ct state { established, related }
default drop
"""


def rules():
    return compile_text(POLICY, "t.pf").require().rules


def test_the_checker_builds_the_ir() -> None:
    log, limited, audited, new, est = rules()
    assert log.action == ir.Log("web", ir.Rate(10, "second", 5), 64, log.action.span)
    assert not log.terminal
    assert limited.limit.rate == ir.Rate(100, "minute", 10) and limited.limit.per == "src"
    assert limited.limit.rate.capacity == 10 and limited.limit.rate.seconds == 60
    assert audited.action.audit and audited.terminal
    assert new.matches[-1] == ir.CtMatch(("new",), False, new.matches[-1].span)
    assert est.matches[0].states == ("established", "related") and est.matches[0].negated
    assert est.family is ir.Family.IP  # ct state needs IP
    assert compile_text(POLICY).require().stateful


def test_fmt_round_trips_every_new_form() -> None:
    messy = POLICY.replace("{ established, related }", "established , related") \
        .replace("rate 10/second", "rate  0xa/second")
    text, diags = format_source(SourceFile("t.pf", messy))
    assert not diags
    again, _ = format_source(SourceFile("t.pf", text))
    assert again == text
    assert "pass !ct state established,related" in text and "rate 0xa/second" in text
    first = compile_text(POLICY).require().rules
    assert [r.limit and r.limit.rate for r in compile_text(text).require().rules] == \
        [r.limit and r.limit.rate for r in first]


def test_ir_json_carries_the_new_fields() -> None:
    artifact, diags = build_artifact(compile_text(POLICY), "ir")
    assert not diags
    data = json.loads(artifact.text)
    log, limited, audited, new, _ = data["rules"]
    assert log["action"]["kind"] == "Log" and log["action"]["rate"]["count"] == 10
    assert limited["limit"]["per"] == "src" and audited["action"]["audit"]
    assert new["matches"][-1] == {"kind": "CtMatch", "states": ["new"], "negated": False,
                                  "span": new["matches"][-1]["span"], "field": "ct"}


@pytest.mark.parametrize("target", [t for t in backends.registry() if t != "ir"])
def test_targets_that_cannot_express_a_feature_say_so(target: str) -> None:
    backend = backends.registry()[target]
    policy = compile_text(POLICY, "t.pf").require()
    errors = capability_errors(policy, backend, backends.registry(), limits=False)
    needs = {0: "log", 1: "limit", 2: "audit", 3: "ct", 4: "ct"}
    for index, feature in needs.items():
        said = [e for e in errors if f"line {index + 1})" in e.message]
        assert bool(said) == (feature not in backend.supports), (target, feature)
        for e in said:
            assert f"target `{target}`" in e.message and e.code == "unsupported"


def test_audit_mode_reaches_the_default_and_is_refused_where_unsupported() -> None:
    compiled = compile_text("drop udp\ndefault drop\n", "t.pf")
    for name, backend in backends.registry().items():
        artifact, diags = build_artifact(compiled, name, audit=True) if name in (
            "ir", "cbpf") else (None, [])
        if name == "ir":
            assert json.loads(artifact.text)["default_audit"] is True
        elif name == "cbpf":
            assert any("the default drop" in d.message for d in diags)
            assert "audit" not in backend.supports


def test_group_runs_keeps_limits_and_audits_apart() -> None:
    text = ("drop udp dport 1 limit rate 1/second\ndrop udp dport 2 limit rate 1/second\n"
            "drop udp dport 3 audit\ndrop udp dport 4\n")
    assert len(group_runs(compile_text(text).require()).rules) == 4


@pytest.mark.parametrize("text, caret", [
    ('log udp prefix "   "', '"   "'),  # only spaces: the whole string
    ('log udp prefix " web"', " "),
    ('log udp prefix "web  "', "  "),
    ('log udp prefix "/=:+,.-_ "', " "),  # fuzz-and-faults: cut silently before
    ('log udp prefix "\\x20web"', '"\\x20web"'),  # an escaped space: the whole string
])
def test_a_log_prefix_with_outer_spaces_is_an_error_with_a_caret(text: str,
                                                                 caret: str) -> None:
    """NFLOG and nft trim a prefix's outer spaces: pfc refuses them rather than
    emit something else than the policy says (docs/language.md)."""
    (d,) = compile_text(text + "\n", "t.pf").diagnostics
    assert d.code == "bad-prefix" and "space" in d.message
    assert text[d.span.start:d.span.end] == caret


def test_spaces_inside_a_log_prefix_are_kept() -> None:
    (rule,) = compile_text('log udp prefix "a  b"\n').require().rules
    assert rule.action.prefix == "a  b"
