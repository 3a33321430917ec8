"""Which rules can never hold on one frame together: a cheap, conservative test.

A rule's *box* is, per IP version it can match (4, 6, or None for non-IP frames), the
values each field it tests may take: interval sets over the field's integers. Two
rules are disjoint when, for every version both allow, some field both test has value
sets that do not meet. Every match needs its field present, negated or not, so a
negated match is the complement of its values (over that field's own range) and still
a constraint. Payload matches are left out (no constraint): the test only ever
answers "disjoint" when that is certain, never the other way.

``diff`` uses it to leave out rules that cannot hold on any frame a changed rule
holds on: for those frames they change nothing.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.ir import Family
from pfc.frontend.matches import complement_ranges as complement
from pfc.frontend.matches import intersect_ranges, merge_ranges

Intervals = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive
TOP = {"ttl": 255, "proto": 255, "len": 65535 + 40, "frag": 1, "sport": 65535,
       "dport": 65535, "icmp-type": 255, "flags": 255}
ADDR_TOP = {4: 2 ** 32 - 1, 6: 2 ** 128 - 1}
VERSIONS = {Family.ANY: (4, 6, None), Family.IP: (4, 6), Family.IP4: (4,), Family.IP6: (6,)}


def normal(pairs: Iterable[tuple[int, int]]) -> Intervals:
    return merge_ranges(list(pairs))


def meet(a: Intervals, b: Intervals) -> Intervals:
    return tuple(intersect_ranges(a, b))


@dataclass(frozen=True)
class Box:
    """Per version the rule can match: field key -> allowed values."""

    fields: dict[int | None, dict[str, Intervals]]

    def disjoint(self, other: Box) -> bool:
        for version, mine in self.fields.items():
            theirs = other.fields.get(version)
            if theirs is None:
                continue
            if not any(key in theirs and not meet(values, theirs[key])
                       for key, values in mine.items()):
                return False
        return True


def box(rule: ir.Rule) -> Box:
    versions = VERSIONS[rule.family]
    if isinstance(rule.action, ir.Redirect):
        versions = tuple(v for v in versions if v == rule.action.address.version)
    fields: dict[int | None, dict[str, Intervals]] = {}
    for version in versions:
        got = _fields(rule, version)
        if got is not None:
            fields[version] = got
    return Box(fields)


def _fields(rule: ir.Rule, version: int | None) -> dict[str, Intervals] | None:
    """The value sets of ``rule``'s fields on ``version`` frames; None if it can never
    hold on them."""
    out: dict[str, Intervals] = {}
    if rule.proto is not None:
        out["proto"] = ((rule.proto, rule.proto),)
    for match in rule.matches:
        got = _values(match, version)
        if got is None:
            continue
        key, values = got
        values = meet(values, out[key]) if key in out else values
        if not values:
            return None
        out[key] = values
    return out


def _values(match: ir.Match, version: int | None) -> tuple[str, Intervals] | None:
    if version is None:
        return None  # a non-IP rule has no IP match
    if isinstance(match, ir.AddrMatch):
        top = ADDR_TOP[version]
        bits = 32 if version == 4 else 128
        values = normal((int(p.network_address), int(p.network_address) + 2 ** (
            bits - p.prefixlen) - 1) for p in match.prefixes if p.version == version)
        return match.field, complement(values, top) if match.negated else values
    if isinstance(match, ir.IntMatch):
        values = normal(match.ranges)
        return match.field, complement(values, TOP[match.field]) if match.negated else values
    if isinstance(match, ir.FlagsMatch):
        values = normal((f, f) for f in range(256)
                        if (f & match.set == match.set and not f & match.clear) != match.negated)
        return "flags", values
    if isinstance(match, ir.FragMatch):
        if version == 6:
            return "frag", ()
        return "frag", ((0, 0),) if match.negated else ((1, 1),)
    return None


class Index:
    """The boxes of the changed rules, for "does this rule meet any of them?" without
    testing every pair: per IP version, the boxes that test the version's most tested
    address field sit in one list sorted by where their values start; a query looks
    only at those whose values can meet its own (by bisection), plus the boxes that do
    not test that field. A rule that does not test it either is tested against all.
    """

    def __init__(self, boxes: list[Box]) -> None:
        self.boxes = boxes
        self.by_version: dict[int | None, _Sorted] = {}
        for version in (4, 6, None):
            holding = [b for b in boxes if version in b.fields]
            self.by_version[version] = _Sorted(version, holding)

    def meets(self, other: Box) -> bool:
        """Some indexed box may share a frame with ``other`` (conservative)."""
        for version, mine in other.fields.items():
            for candidate in self.by_version[version].near(mine):
                if not candidate.disjoint(other):
                    return True
        return False


class _Sorted:
    def __init__(self, version: int | None, boxes: list[Box]) -> None:
        counts: dict[str, int] = {}
        for b in boxes:
            for key in b.fields[version]:
                if key in ("src", "dst"):
                    counts[key] = counts.get(key, 0) + 1
        self.key = max(counts, key=counts.__getitem__) if counts else None
        self.all = boxes
        self.wild = [b for b in boxes if self.key not in b.fields[version]]
        spans = sorted((lo, hi, n) for n, b in enumerate(boxes)
                       if self.key in b.fields[version] for lo, hi in b.fields[version][self.key])
        self.spans = spans
        self.starts = [lo for lo, _, _ in spans]
        self.reach = list(itertools.accumulate((hi for _, hi, _ in spans), max))

    def near(self, fields: dict[str, Intervals]) -> list[Box]:
        if self.key is None or self.key not in fields:
            return self.all
        found: dict[int, Box] = {}
        for lo, hi in fields[self.key]:
            end = bisect.bisect_right(self.starts, hi)  # spans starting at or before hi
            i = end - 1
            while i >= 0 and self.reach[i] >= lo:  # some span up to i may still reach lo
                if self.spans[i][1] >= lo:
                    found.setdefault(self.spans[i][2], self.all[self.spans[i][2]])
                i -= 1
        return self.wild + list(found.values())
