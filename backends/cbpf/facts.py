"""What the optimiser knows on an edge of the test graph: facts per value.

A :class:`Fact` bounds one value (the key is ``Test.fact``: what A holds and the X
state it was computed with): a range, excluded values, bits known clear, masks known to
intersect; an ``A op X`` comparison is known by its outcome alone. :func:`learn` adds
a test's outcome, :func:`meet` keeps what holds on two edges, :func:`decide` answers
a test from the facts, :func:`facts_in` gives the facts at the entry of every node.
Facts come only from tests that ran, so they are true of every packet on the edge.
*Implications* add what the domain knows and the tests do not show (an accepted IPv4
header proves the frame holds 34 bytes: ``cbpf_cfg.IMPLICATIONS``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pfc.backends.cbpf.graph import Node, Test, predecessors

MAX_OUT = 32  # excluded values kept per fact


@dataclass(frozen=True, slots=True)
class Fact:
    """What is known of one value: lo <= v <= hi, v not in ``out``, v & ``zero`` == 0,
    v & m != 0 for every m in ``nonzero``."""

    lo: int
    hi: int
    out: frozenset[int] = frozenset()
    zero: int = 0
    nonzero: frozenset[int] = frozenset()


Facts = dict[int, object]  # Test.fact -> Fact for A op k; -> bool for A op X


def _fact(facts: Facts, test: Test) -> Fact:
    return facts.get(test.fact) or _unknown(test.top)


@functools.lru_cache(maxsize=16)
def _unknown(top: int) -> Fact:
    return Fact(0, top)


def decide(facts: Facts, test: Test) -> bool | None:
    """The test's outcome if the facts settle it."""
    if test.k is None:
        return facts.get(test.fact)
    f, k = _fact(facts, test), test.k
    if test.op == "jeq":
        if f.lo == f.hi:
            return f.lo == k
        if not f.lo <= k <= f.hi or k in f.out or k & f.zero or \
                any(k & m == 0 for m in f.nonzero):
            return False
        return None
    if test.op == "jgt":
        return True if f.lo > k else False if f.hi <= k else None
    if test.op == "jge":
        return True if f.lo >= k else False if f.hi < k else None
    if test.op == "jset":
        if k & ~f.zero == 0 or f.hi < (k & -k):
            return False
        if any(m & ~k == 0 for m in f.nonzero):
            return True
        return (f.lo & k != 0) if f.lo == f.hi else None
    raise ValueError(test.op)


Implication = tuple[tuple[tuple[Test, bool], ...], Test]


def learn(facts: Facts, test: Test, outcome: bool,
          implications: tuple[Implication, ...] = ()) -> Facts | None:
    """The facts after ``test`` gave ``outcome``; None if that cannot happen. Each
    implication (tests known to have given these outcomes ⇒ a test known true) is
    then applied once, when ``test`` told something new about one of its conditions
    (facts that already decided all of them already hold the consequence)."""
    out = _learn(facts, test, outcome)
    if out is None or not implications or test.fact not in _conditions(implications):
        return out
    for conditions, consequence in implications:
        if out is None:
            break
        if decide(out, consequence) is None and \
                all(decide(out, t) is o for t, o in conditions):
            out = _learn(out, consequence, True)
    return out


_CONDITIONS: dict[int, tuple[tuple[Implication, ...], frozenset[int]]] = {}


def _conditions(implications: tuple[Implication, ...]) -> frozenset[int]:
    """The facts the implications' conditions are about (kept per tuple object)."""
    known = _CONDITIONS.get(id(implications))
    if known is None or known[0] is not implications:
        known = _CONDITIONS[id(implications)] = (implications, frozenset(
            t.fact for conditions, _ in implications for t, _ in conditions))
    return known[1]


def _learn(facts: Facts, test: Test, outcome: bool) -> Facts | None:
    if decide(facts, test) is (not outcome):
        return None
    out = dict(facts)
    if test.k is None:
        out[test.fact] = outcome
        return out
    f, k = _fact(facts, test), test.k
    lo, hi, excluded, zero, nonzero = f.lo, f.hi, f.out, f.zero, f.nonzero
    if test.op == "jeq":
        if outcome:
            lo = hi = k
        else:
            excluded = _cap(excluded | {k})
    elif test.op == "jgt":
        lo, hi = (max(lo, k + 1), hi) if outcome else (lo, min(hi, k))
    elif test.op == "jge":
        lo, hi = (max(lo, k), hi) if outcome else (lo, min(hi, k - 1))
    elif outcome:
        nonzero = _cap(nonzero | {k})
    else:
        zero |= k
    if lo > hi:
        return None
    out[test.fact] = Fact(lo, hi, excluded, zero, nonzero)
    return out


def _cap(values: frozenset[int]) -> frozenset[int]:
    return values if len(values) <= MAX_OUT else frozenset(sorted(values)[:MAX_OUT])


def meet(a: Facts, b: Facts) -> Facts:
    """What holds on both: the weaker fact per value, kept only where both have one."""
    out: Facts = {}
    for key, fa in (a.items() if len(a) <= len(b) else b.items()):
        fb = (b if len(a) <= len(b) else a).get(key)
        if fb is None:
            continue
        if isinstance(fa, Fact):
            out[key] = Fact(min(fa.lo, fb.lo), max(fa.hi, fb.hi), fa.out & fb.out,
                            fa.zero & fb.zero, fa.nonzero & fb.nonzero)
        elif fa == fb:
            out[key] = fa
    return out


def facts_in(order: list[Node],
             implications: tuple[Implication, ...] = ()) -> dict[int, Facts | None]:
    """Facts at the entry of every node (None: no path can get there)."""
    preds = predecessors(order)
    known: dict[int, Facts | None] = {}
    for i, node in enumerate(order):
        if i == 0:
            known[node.nid] = {}
            continue
        acc = None
        for pred, outcome in preds[node.nid]:
            base = known[pred.nid]
            edge = None if base is None else learn(base, pred.test, outcome, implications)
            if edge is not None:
                acc = edge if acc is None else meet(acc, edge)
        known[node.nid] = acc
    return known
