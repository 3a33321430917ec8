"""The policy formula is the interpreter: formula(frame) == interpreter(frame), on
generated policies (tests/strategies.py) and generated frames (pfc.oracle.gen), for
the raw frame (XDP, ``pfc run``) and the frame with the outer tag already removed."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pfc.frontend import ir
from pfc.frontend.pipeline import compile_text
from pfc.oracle import gen, interp
from pfc.prove import formula
from pfc.prove.frame import Frame, Reading
from tests.strategies import policies

FRAMES_PER_POLICY = 10


def _policy(text: str) -> ir.Policy:
    return compile_text(text).require()


def _agree(policy: ir.Policy, frames: list[bytes], skip_tag: bool) -> None:
    frame = Frame.fresh()
    m = formula.meaning(policy, Reading(frame, skip_tag))
    for data in frames:
        got = formula.evaluate(m, frame, data)
        want = interp.evaluate(policy, data, skip_tag=skip_tag)
        assert (got.passes, got.rule, got.counted, got.out) == (
            want.verdict is ir.Verdict.PASS, want.rule, want.counted, want.frame), (
            f"frame {data.hex()}:\n{policy}")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=policies(max_rules=5), data=st.data(), skip_tag=st.booleans())
def test_formula_is_the_interpreter(text: str, data: st.DataObject, skip_tag: bool) -> None:
    policy = _policy(text)
    frames = [data.draw(gen.frames(policy)) for _ in range(FRAMES_PER_POLICY)]
    _agree(policy, frames, skip_tag)


def test_formula_on_the_examples_and_many_frames() -> None:
    from pfc.frontend.pipeline import compile_path
    from tests.paths import EXAMPLES
    for path in EXAMPLES:
        policy = compile_path(path).require()
        if ir.flow_features(policy):  # log, limit, audit, ct state: prove refuses them
            continue
        _agree(policy, gen.sample(policy, 60, seed=7), True)


def test_redirect_rewrites_as_the_interpreter() -> None:
    policy = _policy("redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083\n"
                     "redirect tcp dst 2001:db8::1 to [2001:db8::99]:53\n"
                     "redirect ip dst 10.9.9.9 to 10.0.1.2\n")
    frames = gen.sample(policy, 400, seed=3)
    _agree(policy, frames, True)
    rewritten = [f for f in frames if interp.evaluate(policy, f).frame != f]
    assert len(rewritten) > 20  # the test sees real rewrites


def test_the_formula_can_fail() -> None:
    """A wrong encoding is caught: the meaning of one policy on another's frames."""
    a, b = _policy("drop udp dport 53\n"), _policy("drop udp dport 54\n")
    frame = Frame.fresh()
    m = formula.meaning(a, Reading(frame))
    data = next(f for f in gen.sample(b, 500, seed=1)
                if interp.evaluate(b, f).verdict is ir.Verdict.DROP)
    assert formula.evaluate(m, frame, data).passes

