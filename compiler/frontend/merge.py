"""One match per field: a field given twice in a rule is merged into one match.

``drop src 10.0.0.0/8 !src 10.1.0.0/16`` holds when the source is in 10/8 and not in
10.1/16; iptables takes one ``-s`` per rule and nftables reads one match per field most
clearly, so the checker hands every backend one match per field (``payload`` excepted:
``payload[0]`` and ``payload[4]`` are different bytes). The merged match means exactly
what the matches meant together (the interpreter gives the same verdict on every frame):

- a field a packet lacks fails every match of it, negated or not (semantics.md), and the
  merged match reads the same field: it fails too;
- addresses and integers: the positive matches intersect, the negated ones unite, and a
  mix is the positives minus the negatives; only negated matches stay one negated match
  of the union. Addresses are worked per IP version, as the interpreter tests an address
  against the entries of its own family only;
- an empty result keeps the rule never-matching (a positive match of no value: nothing
  is in it), with a warning; it never becomes "match anything";
- ``flags``: positives join their set and clear bits; a negated ``flags`` that leaves one
  bit undecided becomes that bit's opposite; what one ``flags`` match cannot say (a
  contradiction, or "not both A and B" beside other flags) is an error with a hint, as
  ``flags syn,!syn`` already is; ``frag`` twice is one, ``frag !frag`` an error;
- the v2 matches (``iif``, ``ether-src``, ``ct state``, ``dst-type`` ...: twice only where
  ``inline_chains`` joins a jump with a chain's rule) as sets: positives intersect,
  negatives unite; ``ct status`` positives join their bits; a wildcard interface name
  beside another name, or a negated ``ct status`` beside another, is an error.

Linear in the entries after sorting: a 100k-entry set minus one prefix takes well under
a second.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error, warning
from pfc.frontend.matches import intersect_ranges, merge_ranges, subtract_ranges
from pfc.frontend.source import NO_SPAN, Span

Interval = tuple[int, int]
_NETWORK = {4: ipaddress.IPv4Network, 6: ipaddress.IPv6Network}
_BITS = {4: 32, 6: 128}


def merge_fields(matches: Sequence[ir.Match],
                 family: ir.Family) -> tuple[tuple[ir.Match, ...], list[Diagnostic]]:
    """The rule's matches with each field once (at its first place), and diagnostics."""
    groups: dict[str, list[ir.Match]] = {}
    for m in matches:
        if m.field != "payload":
            groups.setdefault(m.field, []).append(m)
    if all(len(g) == 1 for g in groups.values()):
        return tuple(matches), []
    diags: list[Diagnostic] = []
    out: list[ir.Match] = []
    for m in matches:
        group = groups.get(m.field)
        if group is None or len(group) == 1:
            out.append(m)
        elif m is group[0]:
            merged = _merge(group, family, diags)
            if merged is not None:
                out.append(merged)
    return tuple(out), diags


def _merge(group: list[ir.Match], family: ir.Family,
           diags: list[Diagnostic]) -> ir.Match | None:
    first = group[0]
    if isinstance(first, ir.AddrMatch):
        merged = _merge_addresses(group, family)
    elif isinstance(first, ir.IntMatch):
        merged = _merge_ints(group)
    elif isinstance(first, ir.FlagsMatch):
        return _merge_flags(group, diags)
    elif isinstance(first, ir.FragMatch):
        return _merge_frag(group, diags)
    else:  # the v2 matches: two come together only where a jump meets a chain's rule
        merged = _merge_named(group, diags)
        if merged is None:
            return None
    if _never(merged, family):
        diags.append(warning(
            f"`{first.field}` is given {_times(len(group))} and no value is in all of "
            "them: this rule can never match", _cover(group), code="never-matches",
            hint=f"a packet has one `{first.field}`: check the values"))
    return merged


def _times(n: int) -> str:
    return "twice" if n == 2 else f"{n} times"


def _cover(group: Sequence[ir.Match]) -> Span:
    span = group[0].span
    for m in group[1:]:
        if m.span.file == span.file:
            span = span.cover(m.span)
    return span


def _never(match: ir.Match, family: ir.Family) -> bool:
    """The merged match can hold on no packet of the rule's family."""
    if isinstance(match, ir.AddrMatch):
        if not match.negated:
            return not match.prefixes
        return all(_intervals(match.prefixes, v) == [(0, (1 << _BITS[v]) - 1)]
                   for v in family.versions)
    if isinstance(match, ir.IntMatch):
        if not match.negated:
            return not match.ranges
        return list(match.ranges) == [(0, ir.FIELDS[match.field].maximum)]
    if type(match) in _VALUES:
        return _empty(match)
    return False


# ------------------------------------------------------------------------ addresses

def _merge_addresses(group: list[ir.AddrMatch], family: ir.Family) -> ir.AddrMatch:
    plus = [m for m in group if not m.negated]
    minus = [m for m in group if m.negated]
    span = _cover(group)
    if not plus:
        union = tuple(dict.fromkeys(p for m in minus for p in m.prefixes))
        return ir.AddrMatch(group[0].field, _sorted_outermost(union), True, span)
    prefixes: list[ir.IPNetwork] = []
    for version in sorted(family.versions):
        kept = _intervals(plus[0].prefixes, version)
        for m in plus[1:]:
            kept = intersect_ranges(kept, _intervals(m.prefixes, version))
        for m in minus:
            kept = subtract_ranges(kept, _intervals(m.prefixes, version))
        prefixes += _prefixes(kept, version)
    only = plus[0]
    if len(plus) == 1 and set(prefixes) == {p for p in only.prefixes
                                            if p.version in family.versions}:
        return ir.AddrMatch(only.field, only.prefixes, False, span, only.set_name)
    return ir.AddrMatch(group[0].field, tuple(prefixes), False, span)


def _sorted_outermost(prefixes: tuple[ir.IPNetwork, ...]) -> tuple[ir.IPNetwork, ...]:
    out: list[ir.IPNetwork] = []
    for version in (4, 6):
        out += _prefixes(_intervals(prefixes, version), version)
    return tuple(out)


def _intervals(prefixes: Sequence[ir.IPNetwork], version: int) -> list[Interval]:
    """The addresses of ``prefixes`` of one version as sorted, merged intervals."""
    spans = [(int(p.network_address), int(p.network_address) + p.num_addresses - 1)
             for p in prefixes if p.version == version]
    return list(merge_ranges(spans))


def _prefixes(intervals: list[Interval], version: int) -> list[ir.IPNetwork]:
    """The fewest prefixes covering exactly the intervals (CIDR decomposition)."""
    bits, network, out = _BITS[version], _NETWORK[version], []
    for lo, hi in intervals:
        while lo <= hi:
            size = lo & -lo if lo else 1 << bits
            while size > hi - lo + 1:
                size >>= 1
            out.append(network((lo, bits - size.bit_length() + 1)))
            lo += size
    return out


# ------------------------------------------------------------------------- integers

def _merge_ints(group: list[ir.IntMatch]) -> ir.IntMatch:
    plus = [m for m in group if not m.negated]
    minus = [m for m in group if m.negated]
    field, span = group[0].field, _cover(group)
    union = list(merge_ranges([r for m in minus for r in m.ranges]))
    if not plus:
        return ir.IntMatch(field, tuple(union), True, span)
    kept = list(plus[0].ranges)
    for m in plus[1:]:
        kept = intersect_ranges(kept, list(m.ranges))
    kept = subtract_ranges(kept, union)
    if len(plus) == 1 and tuple(kept) == plus[0].ranges:
        return ir.IntMatch(field, plus[0].ranges, False, span, plus[0].set_name)
    return ir.IntMatch(field, tuple(kept), False, span)


# ---------------------------------------------------------------------- flags, frag

def _merge_flags(group: list[ir.FlagsMatch], diags: list[Diagnostic]) -> ir.FlagsMatch | None:
    set_bits = clear_bits = 0
    for m in group:
        if not m.negated:
            set_bits, clear_bits = set_bits | m.set, clear_bits | m.clear
    hard = [m for m in group if m.negated]
    progress = True
    while progress and not set_bits & clear_bits:
        progress, left = False, []
        for m in hard:
            open_set, open_clear = m.set & ~set_bits, m.clear & ~clear_bits
            if m.set & clear_bits or m.clear & set_bits:
                progress = True  # already false: "not (...)" holds
            elif not open_set | open_clear:
                return _flags_error(group, diags, "cannot all hold")
            elif (open_set | open_clear).bit_count() == 1:
                set_bits, clear_bits = set_bits | open_clear, clear_bits | open_set
                progress = True
            else:
                left.append(m)
        hard = left
    if set_bits & clear_bits:
        return _flags_error(group, diags, "cannot all hold")
    if not hard:
        return ir.FlagsMatch(set_bits, clear_bits, False, _cover(group))
    if len(hard) == 1 and not set_bits | clear_bits:
        return ir.FlagsMatch(hard[0].set, hard[0].clear, True, _cover(group))
    return _flags_error(group, diags, "cannot be written as one `flags` match")


def _flags_error(group: list[ir.Match], diags: list[Diagnostic], why: str) -> None:
    diags.append(error(f"these {len(group)} `flags` matches {why}", _cover(group),
                       hint="write one `flags` match (`flags syn,!ack`), or split the "
                       "rule into one rule per case", code="flags-merge"))
    return None


# ------------------------------------------------------------ v2: names and states

_UNIVERSE = {"ct": ir.CT_STATES, "dst-type": ir.ADDR_TYPES, "src-type": ir.ADDR_TYPES}
_VALUES = {ir.MacMatch: "macs", ir.IfaceMatch: "names", ir.CtMatch: "states",
           ir.AddrTypeMatch: "types", ir.CtStatusMatch: "statuses"}


def _merge_named(group: list[ir.Match], diags: list[Diagnostic]) -> ir.Match | None:
    """``iif``/``oif``, ``ether-src``/``-dst``, ``ct state``, ``ct status``,
    ``src-type``/``dst-type`` given twice: the positives intersect, the negatives unite
    (``ct status``: the bits of every positive; a wildcard of ``iif``/``oif`` only
    beside the same match). What one match cannot say is an error, never a guess."""
    first, attr = group[0], _VALUES[type(group[0])]
    kept = list({repr(_plain(m)): m for m in group}.values())
    if len(kept) == 1:
        return kept[0]
    sets = [(m.negated, set(getattr(m, attr))) for m in kept]
    if isinstance(first, ir.CtStatusMatch) and not any(neg for neg, _ in sets):
        every = set().union(*[v for _, v in sets])
        names = tuple(n for n in ir.CT_STATUSES if n in every)
        return ir.CtStatusMatch(names, False, _cover(group))
    wild = isinstance(first, ir.IfaceMatch) and any(n.endswith("*") for _, v in sets for n in v)
    if isinstance(first, ir.CtStatusMatch) or wild:
        diags.append(error(f"these {len(group)} `{first.field}` matches cannot be written "
                           "as one", _cover(group), code="flags-merge",
                           hint="write the chain's rules out in the block, or match "
                           f"`{first.field}` in one place only"))
        return None
    positives = [v for neg, v in sets if not neg]
    negatives = set().union(*[v for neg, v in sets if neg])
    universe = _UNIVERSE.get(first.field)
    if not positives and universe is None:
        return _named(first, attr, sorted(negatives, key=str), True, group)
    allowed = set.intersection(*positives) if positives else set(universe)
    return _named(first, attr, sorted(allowed - negatives, key=str), False, group)


def _named(first: ir.Match, attr: str, values: list, negated: bool,
           group: list[ir.Match]) -> ir.Match:
    order = _UNIVERSE.get(first.field)
    if order is not None:
        values = [v for v in order if v in values]
    named = {"set_name": None} if hasattr(first, "set_name") else {}
    return dataclasses.replace(first, **{attr: tuple(values)}, negated=negated,
                               span=_cover(group), **named)


def _plain(m: ir.Match) -> ir.Match:
    named = {"set_name": None} if hasattr(m, "set_name") else {}
    return dataclasses.replace(m, span=NO_SPAN, **named)


def _empty(m: ir.Match) -> bool:
    return not m.negated and not getattr(m, _VALUES[type(m)])


def _merge_frag(group: list[ir.FragMatch], diags: list[Diagnostic]) -> ir.FragMatch | None:
    if len({m.negated for m in group}) == 1:
        return ir.FragMatch(group[0].negated, _cover(group))
    diags.append(error("`frag` and `!frag` cannot both hold: this rule can never match",
                       _cover(group), hint="keep one of them", code="flags-merge"))
    return None
