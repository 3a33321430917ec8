"""Runs of rules that decide alike, merged into one rule before they are encoded.

Under first match, consecutive terminal rules with the same plain action (``drop``
or ``pass``, not ``redirect``, whose rewritten bytes depend on the rule) give the same
verdict and leave the frame as it is, whichever of them holds: the run holds exactly
when one of them does. When the rules of a run also share family, protocol and every
match but one, and that one is a non-negated address or integer match on the same
field in each, the run is one rule whose match takes the union of their values
(``drop src A`` then ``drop src B`` is ``drop src { A, B }``). Its index and line are
the run's first rule's.

A thousand-rule blocklist becomes one address-set test (interval form, as the
artifacts hold it) instead of a thousand terms, for z3's Python API and its solver
alike. Only the deciding rule's *identity* is lost; ``Block.rules`` keeps it for
callers that report it (``diff`` asks the interpreter which member decided).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.matches import merge_ranges

MERGEABLE = (ir.AddrMatch, ir.IntMatch)


@dataclass(frozen=True)
class Block:
    rule: ir.Rule  # the merged rule (``rules[0]`` itself for a run of one)
    rules: tuple[ir.Rule, ...]  # the run, in order


def match_key(match: ir.Match) -> tuple:
    """What ``match`` tests, as a hashable value (not where it was written, nor the
    name of the set it came from): equal keys, equal meaning."""
    if isinstance(match, ir.AddrMatch):
        return ("addr", match.field, match.prefixes, match.negated)
    if isinstance(match, ir.IntMatch):
        return ("int", match.field, match.ranges, match.negated)
    if isinstance(match, ir.FlagsMatch):
        return ("flags", match.set, match.clear, match.negated)
    if isinstance(match, ir.FragMatch):
        return ("frag", match.negated)
    return ("payload", match.offset, match.data, match.negated)


def signature(rule: ir.Rule) -> tuple:
    """What ``rule`` holds on, as a hashable value: equal signatures, equal frames."""
    action = rule.action
    target = (action.address, action.port) if isinstance(action, ir.Redirect) else None
    return (rule.family, rule.proto, tuple(match_key(m) for m in rule.matches), target)


def _kind(rule: ir.Rule) -> type | None:
    return type(rule.action) if isinstance(rule.action, ir.Drop | ir.Pass) else None


def _hole(a: ir.Rule, b: ir.Rule) -> int | None:
    """The one match position where ``a`` and ``b`` may differ for a merge (-1: they
    are the same rule), or None if they cannot merge."""
    if (_kind(a) is None or _kind(a) is not _kind(b) or a.family is not b.family
            or a.proto != b.proto or len(a.matches) != len(b.matches)):
        return None
    differ = [i for i, (m, n) in enumerate(zip(a.matches, b.matches, strict=True))
              if match_key(m) != match_key(n)]
    if not differ:
        return -1
    if len(differ) > 1:
        return None
    m, n = a.matches[differ[0]], b.matches[differ[0]]
    if type(m) is not type(n) or not isinstance(m, MERGEABLE) or m.field != n.field \
            or m.negated or n.negated:
        return None
    return differ[0]


def blocks(rules: Iterable[ir.Rule], alone: frozenset[int] = frozenset()) -> list[Block]:
    """``rules`` (in order) cut into runs that merge (module doc); the rules whose
    index is in ``alone`` stay runs of their own."""
    out: list[Block] = []
    run: list[ir.Rule] = []
    hole = -1
    for rule in rules:
        if run and rule.index not in alone and run[0].index not in alone:
            got = _hole(run[0], rule)
            if got is not None and (got == -1 or hole in (-1, got)):
                run.append(rule)
                hole = got if got != -1 else hole
                continue
        if run:
            out.append(_block(run, hole))
        run, hole = [rule], -1
    if run:
        out.append(_block(run, hole))
    return out


def _block(run: Sequence[ir.Rule], hole: int) -> Block:
    first = run[0]
    if len(run) == 1 or hole == -1:
        return Block(first, tuple(run))
    parts = [r.matches[hole] for r in run]
    if isinstance(parts[0], ir.AddrMatch):
        seen = dict.fromkeys(p for m in parts for p in m.prefixes)
        union: ir.Match = ir.AddrMatch(parts[0].field, tuple(seen))
    else:
        union = ir.IntMatch(parts[0].field, merge_ranges([r for m in parts for r in m.ranges]))
    matches = first.matches[:hole] + (union,) + first.matches[hole + 1:]
    return Block(dataclasses.replace(first, matches=matches), tuple(run))
