"""The front end of `queue` (docs/queue.md): what the checker makes of the action and its
options, the diagnostics of every mistake, `pfc fmt`'s round trip, and the capability
errors of the targets that cannot hand a packet to user space."""

from __future__ import annotations

import pytest

from pfc import backends
from pfc.backends.base import capability_errors
from pfc.frontend import ir
from pfc.frontend.fmt import format_source
from pfc.frontend.pipeline import compile_text
from pfc.frontend.source import SourceFile

POLICY = """\
queue tcp dport 5201 num 3 first 8 bypass
queue udp dport 53
default drop
"""
QUEUE_TARGETS = {"nft", "iptables", "ir"}


def test_the_action_and_its_options() -> None:
    first, plain = compile_text(POLICY).require().rules
    assert first.action == ir.Queue(3, 8, True, first.action.span)
    assert plain.action == ir.Queue(0, None, False, plain.action.span)
    assert first.terminal and ir.rule_stateful(first)


@pytest.mark.parametrize("text,message,column", [
    ("queue dport 80\n", "`queue` needs `tcp` or `udp`", 1),
    ("queue all\n", "`queue` needs `tcp` or `udp`", 7),
    ("drop tcp num 3\n", "`num` belongs to `queue`, not `drop`", 10),
    ("log tcp bypass\n", "`bypass` belongs to `queue`, not `log`", 9),
    ("queue udp num 65536\n", "`num` is 0 to 65535; not 65536", 15),
    ("queue udp first 0\n", "`first` is 1 to 1000; not 0", 17),
    ("queue tcp first 2 first 3\n", "`first` is given twice", 19),
    ("queue tcp prefix \"x\"\n", "`prefix` belongs to `log`, not `queue`", 11),
])
def test_mistakes_are_one_diagnostic_on_their_text(text: str, message: str,
                                                   column: int) -> None:
    result = compile_text(text, "t.pf")
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert errors and message in errors[0].message
    assert SourceFile("t.pf", text).position(errors[0].span.start)[1] == column


def test_fmt_round_trip_keeps_the_options() -> None:
    text, diags = format_source(SourceFile("t.pf", POLICY))
    assert not diags and "queue tcp dport 5201 num 3 first 8 bypass" in text
    again = compile_text(text).require().rules
    assert [r.action for r in again] == [r.action for r in compile_text(POLICY).require().rules]


@pytest.mark.parametrize("target", sorted(backends.registry()))
def test_targets_that_cannot_queue_say_so(target: str) -> None:
    backend = backends.registry()[target]
    policy = compile_text(POLICY, "t.pf").require()
    errors = capability_errors(policy, backend, backends.registry(), limits=False)
    said = [e for e in errors if "`queue` rules" in e.message]
    assert bool(said) == (target not in QUEUE_TARGETS), target
    for e in said:
        assert f"target `{target}`" in e.message and e.code == "unsupported"


def test_v2_blocks_after_conntrack_take_it() -> None:
    ok = compile_text("input {\n  queue tcp dport 80 first 4\n}\n", "t.pf")
    assert not [d for d in ok.diagnostics if d.severity == "error"]
    bad = compile_text("ingress {\n  queue tcp dport 80\n}\n", "t.pf")
    assert any("`queue` is not allowed in block `ingress`" in d.message
               for d in bad.diagnostics)
