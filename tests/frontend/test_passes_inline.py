"""``inline_chains`` keeps the meaning: the interpreter, which runs ``jump``/``goto``
itself, gives the same verdicts, deciding rules and counters before and after."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pfc.frontend import ir
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen
from pfc.oracle.interp import run
from pfc.passes.inline_chains import inline_chains
from tests.strategies import rule_text


def _renumber(rules, start: int):
    return tuple(replace(r, index=start + i) for i, r in enumerate(rules))


def _policy(main: str, chain: str, jump: str, goto: bool, at: int,
            default: ir.Verdict) -> ir.Policy:
    """``main``'s rules with a jump (the matches of the one-rule ``jump`` text) to a
    chain holding ``chain``'s rules inserted at position ``at``."""
    head = compile_text(main).require().rules
    body = _renumber(compile_text(chain).require().rules, 100)
    carrier = compile_text(jump).require().rules[0]
    jumper = replace(carrier, index=99, action=ir.Jump("c", goto))
    rules = head[:at] + (jumper,) + _renumber(head[at:], 50)
    return ir.Policy(rules, default, chains=(ir.Chain("c", body),))


def _same_meaning(policy: ir.Policy, frames: int = 300) -> None:
    try:
        flat = inline_chains(policy)
    except CompileError as exc:  # a join one match per field cannot say: refused
        assert exc.diagnostics[0].code == "inline"
        return
    assert not flat.chains and not any(isinstance(r.action, ir.Jump) for r in flat.rules)
    sample = gen.sample(replace(flat, default=flat.default), frames, seed=3)
    before, counted_before = run(policy, sample)
    after, counted_after = run(flat, sample)
    assert [(o.verdict, o.rule) for o in before] == [(o.verdict, o.rule) for o in after]
    assert [o.frame for o in before] == [o.frame for o in after]
    # a count rule left out (it can never hold once joined) has no counter after
    assert {k: v for k, v in counted_before.items() if v != (0, 0)} == \
        {k: v for k, v in counted_after.items() if v != (0, 0)}


def test_jump_falls_through_goto_takes_the_default() -> None:
    for goto in (False, True):
        for default in ir.Verdict:
            _same_meaning(_policy("pass udp dport 53\ndrop tcp\n",
                                  "pass tcp src 10.0.0.0/8\ncount tcp dport 22\n",
                                  "pass tcp dport 20-30", goto, 1, default))


def test_a_join_that_can_never_hold_is_left_out() -> None:
    policy = _policy("drop\n", "pass udp dport 1\npass ip6 dst 2001:db8::1\n",
                     "pass tcp src 10.0.0.1", False, 0, ir.Verdict.PASS)
    flat = inline_chains(policy)
    assert [r.index for r in flat.rules] == [50]  # udp vs tcp, IPv6 vs an IPv4 source
    _same_meaning(policy)


def test_a_join_one_flags_match_cannot_say_is_refused() -> None:
    policy = _policy("drop\n", "pass tcp !flags ack,psh\n", "pass tcp flags syn", False, 0,
                     ir.Verdict.PASS)
    try:
        inline_chains(policy)
    except CompileError as exc:
        assert "cannot be joined" in exc.diagnostics[0].message
    else:
        raise AssertionError("the join was not refused")


@settings(max_examples=40, deadline=None)
@given(st.lists(rule_text(redirect=False), min_size=1, max_size=4),
       st.lists(rule_text(redirect=False), min_size=1, max_size=4),
       rule_text(count=False, redirect=False), st.booleans(), st.integers(0, 4),
       st.sampled_from(list(ir.Verdict)))
def test_generated_chains_keep_their_meaning(main, chain, jump, goto, at, default) -> None:
    at = min(at, len(main))
    _same_meaning(_policy("\n".join(main) + "\n", "\n".join(chain) + "\n", jump, goto, at,
                          default), frames=150)
