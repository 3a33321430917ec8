"""Rules that can never match: "shadowed by rule at LINE" warnings.

``covers(a, b)`` is conservative: it says True only when every packet that ``b`` matches
is sure to match ``a`` (so a terminal ``a`` before ``b`` decides first). It never guesses;
a missed shadow is a missed warning, not a wrong one.
"""

from __future__ import annotations

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, Note, warning

# Above this many rules only rules with at most one match are tried as shadowers, so the
# check stays linear-ish on 100k-rule policies (a blanket rule is the usual culprit).
FULL_CHECK_LIMIT = 2000
# An exact-value port list up to this long indexes its rule (see ``_Shadowers``).
INDEXED_VALUES_MAX = 64


def shadowed(policy: ir.Policy) -> list[Diagnostic]:
    out = []
    earlier = _Shadowers()
    big = len(policy.rules) > FULL_CHECK_LIMIT
    for rule in policy.rules:
        cover = earlier.first_cover(rule)
        if cover is not None:
            out.append(warning(f"this rule can never match: shadowed by rule at line "
                               f"{cover.line}", rule.span, code="shadowed",
                               notes=(Note("which decides every packet this rule matches",
                                           cover.span),)))
        if rule.terminal and (not big or len(rule.matches) <= 1):
            earlier.add(rule)
    return out


class _Shadowers:
    """The earlier terminal rules, indexed so that finding the first one that covers a
    rule does not try them all (10k one-address rules: 0.1 s instead of minutes).

    A rule is filed under its *anchor*, its first non-negated address match (each
    prefix, by field) or exact-value port-like match (each value); rules without one
    are tried in turn. The index only proposes candidates, ``covers`` decides. It
    misses no coverer: if ``a`` covers ``b``, ``a``'s anchor covers a non-negated match
    ``mb`` of ``b`` of its field, so it holds a supernet of ``mb``'s first prefix (or
    ``mb``'s first range is one value ``a``'s anchor lists) — which is what is looked up.
    """

    def __init__(self) -> None:
        self.rules: list[ir.Rule] = []
        self.index: dict[tuple, list[int]] = {}
        self.unanchored: list[int] = []
        # (field, IP version) → the prefix lengths some "addr" key was filed under: a
        # lookup tries only those (2 lengths, not 33, for hosts and /24s).
        self.lengths: dict[tuple[str, int], set[int]] = {}

    def add(self, rule: ir.Rule) -> None:
        position = len(self.rules)
        self.rules.append(rule)
        keys = _anchor_keys(rule)
        if keys is None:
            self.unanchored.append(position)
        for key in keys or ():
            self.index.setdefault(key, []).append(position)
            if key[0] == "addr":
                self.lengths.setdefault((key[1], key[2]), set()).add(key[3])

    def first_cover(self, rule: ir.Rule) -> ir.Rule | None:
        keys = _lookup_keys(rule, self.lengths)
        found = set(self.unanchored) if keys is not None else set(range(len(self.rules)))
        for key in keys or ():
            found.update(self.index.get(key, ()))
        return next((self.rules[i] for i in sorted(found) if covers(self.rules[i], rule)),
                    None)


def _net_key(field: str, net: ir.IPNetwork, length: int) -> tuple:
    bits = net.max_prefixlen
    return ("addr", field, net.version, length, int(net.network_address) >> (bits - length))


def _anchor_keys(rule: ir.Rule) -> list[tuple] | None:
    for m in rule.matches:
        if m.negated:
            continue
        if isinstance(m, ir.AddrMatch) and m.prefixes:
            return [_net_key(m.field, q, q.prefixlen) for q in m.prefixes]
        if isinstance(m, ir.IntMatch) and all(lo == hi for lo, hi in m.ranges) and \
                0 < len(m.ranges) <= INDEXED_VALUES_MAX:
            return [("int", m.field, lo) for lo, _ in m.ranges]
    return None


def _lookup_keys(rule: ir.Rule, lengths: dict[tuple[str, int], set[int]]) -> list[tuple] | None:
    """The index keys of the rules that may cover ``rule`` (of the address prefix
    lengths in ``lengths``, the only ones filed); None: try every rule (an empty list
    match, which any same-field match covers)."""
    keys = []
    for m in rule.matches:
        if m.negated:
            continue
        if isinstance(m, (ir.AddrMatch, ir.IntMatch)) and \
                not (m.prefixes if isinstance(m, ir.AddrMatch) else m.ranges):
            return None
        if isinstance(m, ir.AddrMatch):
            p = m.prefixes[0]
            keys += [_net_key(m.field, p, n) for n in lengths.get((m.field, p.version), ())
                     if n <= p.prefixlen]
        elif isinstance(m, ir.IntMatch) and m.ranges[0][0] == m.ranges[0][1]:
            keys.append(("int", m.field, m.ranges[0][0]))
    return keys


def covers(a: ir.Rule, b: ir.Rule) -> bool:
    """True when every packet ``b`` matches is matched by ``a`` too."""
    if a.limit is not None or not _family_covers(a.family, b.family):
        return False  # a limited rule holds only on some packets: it covers nothing
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
    if isinstance(ma, ir.CtMatch):
        inner, outer = (ma.states, mb.states) if ma.negated else (mb.states, ma.states)
        return set(inner) <= set(outer)
    if isinstance(ma, ir.PayloadMatch):
        return ma.offset == mb.offset and ma.data == mb.data
    return _v2_covers(ma, mb)


def _v2_covers(ma: ir.Match, mb: ir.Match) -> bool:
    """The v2 matches (same type, field and negation): names and MACs as sets (a
    name pattern ``eth*`` covers the names it matches); ``ct status`` holds when all
    its bits are set, so fewer bits cover more."""
    if isinstance(ma, ir.CtStatusMatch):
        return set(ma.statuses) <= set(mb.statuses) if not ma.negated else ma == mb
    if isinstance(ma, ir.IfaceMatch):
        inner, outer = (ma.names, mb.names) if ma.negated else (mb.names, ma.names)
        return all(any(_name_covers(q, p) for q in outer) for p in inner)
    values = {ir.MacMatch: "macs", ir.AddrTypeMatch: "types"}.get(type(ma))
    if values is None:
        return False
    a, b = getattr(ma, values), getattr(mb, values)
    inner, outer = (a, b) if ma.negated else (b, a)
    return set(inner) <= set(outer)


def _name_covers(pattern: str, name: str) -> bool:
    """Every interface ``name`` (itself maybe a pattern) matches is matched by
    ``pattern``."""
    if pattern == name:
        return True
    return pattern.endswith("*") and name.rstrip("*").startswith(pattern[:-1])


def _subnet(p: ir.IPNetwork, q: ir.IPNetwork) -> bool:
    return p.version == q.version and p.subnet_of(q)



