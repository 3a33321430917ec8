"""Rules that can never match: "shadowed by rule at LINE" warnings.

``covers(a, b)`` is conservative: it says True only when every packet that ``b`` matches
is sure to match ``a`` (so a terminal ``a`` before ``b`` decides first). It never guesses;
a missed shadow is a missed warning, not a wrong one.
"""

from __future__ import annotations

from pfc import ir
from pfc.diagnostics import Diagnostic, Note, warning

# Above this many rules only rules with at most one match are tried as shadowers, so the
# check stays linear-ish on 100k-rule policies (a blanket rule is the usual culprit).
FULL_CHECK_LIMIT = 2000


def shadowed(policy: ir.Policy) -> list[Diagnostic]:
    out = []
    earlier: list[ir.Rule] = []
    big = len(policy.rules) > FULL_CHECK_LIMIT
    for rule in policy.rules:
        cover = next((a for a in earlier if covers(a, rule)), None)
        if cover is not None:
            out.append(warning(f"this rule can never match: shadowed by rule at line "
                               f"{cover.line}", rule.span, code="shadowed",
                               notes=(Note("which decides every packet this rule matches",
                                           cover.span),)))
        if rule.terminal and (not big or len(rule.matches) <= 1):
            earlier.append(rule)
    return out


def covers(a: ir.Rule, b: ir.Rule) -> bool:
    """True when every packet ``b`` matches is matched by ``a`` too."""
    if not _family_covers(a.family, b.family):
        return False
    if a.proto is not None and a.proto != b.proto:
        return False
    if isinstance(a.action, ir.Redirect) and b.family is ir.Family.ANY:
        return False
    return all(any(_match_covers(ma, mb) for mb in b.matches) for ma in a.matches)


def _family_covers(a: ir.Family, b: ir.Family) -> bool:
    if a is ir.Family.ANY:
        return True
    if b is ir.Family.ANY:
        return False
    return b.versions <= a.versions


def _match_covers(ma: ir.Match, mb: ir.Match) -> bool:
    """Does ``mb`` holding imply ``ma`` holds?"""
    if type(ma) is not type(mb) or ma.field != mb.field or ma.negated != mb.negated:
        return False
    if isinstance(ma, ir.AddrMatch):
        inner, outer = (ma.prefixes, mb.prefixes) if ma.negated else (mb.prefixes, ma.prefixes)
        return all(any(_subnet(p, q) for q in outer) for p in inner)
    if isinstance(ma, ir.IntMatch):
        inner, outer = (ma.ranges, mb.ranges) if ma.negated else (mb.ranges, ma.ranges)
        return all(any(q[0] <= p[0] and p[1] <= q[1] for q in outer) for p in inner)
    if isinstance(ma, ir.FlagsMatch):
        if ma.negated:
            return ma == mb
        return ma.set & mb.set == ma.set and ma.clear & mb.clear == ma.clear
    if isinstance(ma, ir.FragMatch):
        return True
    return ma.offset == mb.offset and ma.data == mb.data


def _subnet(p: ir.IPNetwork, q: ir.IPNetwork) -> bool:
    return p.version == q.version and p.subnet_of(q)



