"""``pfc prove`` of nft's large-policy lowering (issue 16): blocks of chains with
verdict maps over concatenated keys (pipapo intervals) jumping to outcome chains.

Generated ClassBench-style policies (``benchmarks/classbench.py``), thresholds forced
small as tests/backends/test_classify.py does so that 100-150 rules take the map path
in many groups; the nft model reads the maps back from the kernel
(``pfc.prove.targets.nft_maps``).
"""

from __future__ import annotations

import random

import pytest

from benchmarks import classbench as cb
from pfc.build import build_artifact
from pfc.frontend.pipeline import compile_text
from pfc.passes import classify as cl
from pfc.prove import mutate, proof

pytestmark = pytest.mark.kernel


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(cl, "MIN_RULES", 4)
    monkeypatch.setattr(cl, "MIN_RUN", 4)
    monkeypatch.setattr(cl, "MAX_NEW", 3)


def mapped(flavour: str, n: int, default: str, hook: str):
    rules = cb.generate(flavour, n, seed=3, default=default, negated=0.1, count=0.1)
    compiled = compile_text(rules.text(), "c.pf")
    built, _ = build_artifact(compiled, "nft", hook=hook, dev="dut")
    assert built.text.count("vmap @") >= 8
    return compiled, built


CASES = [("acl", 150, "drop", "ingress"), ("acl", 100, "pass", "ingress"),
         ("acl", 100, "drop", "prerouting"), ("acl", 150, "pass", "prerouting")]


@pytest.mark.parametrize("flavour,n,default,hook", CASES,
                         ids=["-".join(map(str, c)) for c in CASES])
def test_verdict_maps_are_proved(small, flavour, n, default, hook) -> None:
    compiled, built = mapped(flavour, n, default, hook)
    result = proof.prove(built, compiled.require())
    assert result.equal, (result.expected, result.modelled, result.witness.hex(), result.note)


def test_the_model_of_the_maps_agrees_with_the_kernel(small) -> None:
    """On this policy the lowering itself differs from the policy (a count rule missed
    on a TCP frame whose transport header is cut off: docs/prove.md, "Found"); the
    witness must be one the kernel confirms."""
    compiled, built = mapped("fw", 150, "drop", "ingress")
    result = proof.prove(built, compiled.require())
    assert result.equal or result.confirmed, result.note


def test_map_element_mutants_are_caught_in_the_kernel(small) -> None:
    """An element's verdict swapped, an interval bound moved by one: every mutant the
    prover says differs is confirmed in the kernel; every one proved equal agrees
    with the interpreter on generated frames."""
    compiled, built = mapped("acl", 100, "drop", "ingress")
    policy = compiled.require()
    pool = [(w, make) for w, make in mutate._text(built)
            if w.startswith(("element verdict", "interval bound"))]
    random.Random(1).shuffle(pool)
    picked = [p for p in pool if p[0].startswith("element")][:3] + \
        [p for p in pool if p[0].startswith("interval")][:5]
    seen: dict[str, list[str]] = {k: [] for k in mutate.OUTCOMES}
    with mutate.lab("nft"):
        for what, make in picked:
            m = mutate.Mutant(what, make())
            judged = mutate.judge(m, policy)
            seen[judged.outcome].append(what)
            if judged.outcome == "proved":
                assert mutate.disagreement(m.artifact, policy) is None, what
    assert not seen["unconfirmed"] and not seen["models refuse"], seen
    assert seen["differs"]
