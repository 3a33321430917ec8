"""Disjoint regions of a first-match list of boxes (``classify``'s maps).

:func:`split` takes rules in order, each a box (per key field a union of inclusive
intervals), and returns disjoint boxes of one interval per field, each with its
:class:`Outcome`: every point of a region is held by the same rules before the first
terminal one. Rules are inserted one by one (priority insertion): the part of a new
rule's box that no region covers becomes new regions with the rule's outcome; where it
meets a region that a terminal rule already decides, nothing changes (first match);
where it meets a counts-only region, that region is cut and the intersection gets the
rule added to its outcome. So regions are only cut where rules really overlap, and no
region ever covers a point no rule holds.

Candidate regions are found with numpy on 64-bit bounds (an IPv6 address by its top
64 bits: a superset), then checked exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pfc.frontend import ir

Interval = tuple[int, int]
Intervals = tuple[Interval, ...]
Box = tuple[Interval, ...]  # one interval per key field


@dataclass(frozen=True)
class Outcome:
    """What the rules do to a packet of a region: the ``count`` rules that hold before
    the first terminal rule that holds (indexes, in order), and that rule (None: none
    holds; evaluation goes on)."""

    counts: tuple[int, ...]
    decider: ir.Rule | None

    def then(self, rule: ir.Rule) -> Outcome:
        """The outcome when ``rule`` also holds, after these."""
        if self.decider is not None:
            return self
        if rule.terminal:
            return Outcome(self.counts, rule)
        return Outcome((*self.counts, rule.index), None)

    @property
    def name(self) -> str:
        """A chain name: ``r12`` (rule 12 decides), ``r12_c3_7`` (counts 3 and 7
        first), ``c3_7`` (counts only)."""
        head = [f"r{self.decider.index}"] if self.decider is not None else []
        tail = ["c" + "_".join(map(str, self.counts))] if self.counts else []
        return "_".join(head + tail)


NOTHING = Outcome((), None)


def overlap(a: Intervals, b: Intervals) -> bool:
    """Whether two sorted interval lists share a value."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][1] < b[j][0]:
            i += 1
        elif b[j][1] < a[i][0]:
            j += 1
        else:
            return True
    return False


def pieces(fields: tuple[Intervals, ...]) -> list[Box]:
    """A union of intervals per field as single-interval boxes (their product)."""
    out: list[Box] = [()]
    for ivs in fields:
        out = [(*b, iv) for b in out for iv in ivs]
    return out


def meets(a: Box, b: Box) -> bool:
    return all(x[0] <= y[1] and y[0] <= x[1] for x, y in zip(a, b, strict=True))


def minus(a: Box, b: Box) -> list[Box]:
    """``a`` without ``b`` as disjoint boxes (at most two per field)."""
    out = []
    rest = list(a)
    for f, ((lo, hi), (blo, bhi)) in enumerate(zip(a, b, strict=True)):
        if lo < blo:
            out.append((*rest[:f], (lo, blo - 1), *rest[f + 1:]))
        if bhi < hi:
            out.append((*rest[:f], (bhi + 1, hi), *rest[f + 1:]))
        rest[f] = (max(lo, blo), min(hi, bhi))
    return out


def common(a: Box, b: Box) -> Box:
    return tuple((max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b, strict=True))


class Store:
    """The regions so far, of every group, with 64-bit bound arrays for candidate
    search (a region's group is ``group[k]``)."""

    def __init__(self, nfields: int, shifts: tuple[int, ...]) -> None:
        self.shifts = shifts
        self.boxes: list[Box | None] = []
        self.outcomes: list[Outcome] = []
        self.group = np.zeros(64, dtype=np.int64)
        self.lo = np.zeros((64, nfields), dtype=np.uint64)
        self.hi = np.zeros((64, nfields), dtype=np.uint64)
        self.alive = np.zeros(64, dtype=bool)

    def _grow(self) -> None:
        self.lo = np.concatenate([self.lo, np.zeros_like(self.lo)])
        self.hi = np.concatenate([self.hi, np.zeros_like(self.hi)])
        self.alive = np.concatenate([self.alive, np.zeros_like(self.alive)])
        self.group = np.concatenate([self.group, np.zeros_like(self.group)])

    def _bounds(self, b: Box) -> tuple[list[int], list[int]]:
        return ([lo >> s for (lo, _), s in zip(b, self.shifts, strict=True)],
                [hi >> s for (_, hi), s in zip(b, self.shifts, strict=True)])

    def add(self, b: Box, out: Outcome, group: int) -> None:
        n = len(self.boxes)
        if n == len(self.alive):
            self._grow()
        self.boxes.append(b)
        self.outcomes.append(out)
        self.lo[n], self.hi[n] = self._bounds(b)
        self.alive[n] = True
        self.group[n] = group

    def remove(self, k: int) -> None:
        self.boxes[k] = None
        self.alive[k] = False

    def candidates(self, b: Box) -> list[int]:
        """The regions (of any group) that meet ``b``."""
        n = len(self.boxes)
        lo, hi = (np.array(v, dtype=np.uint64) for v in self._bounds(b))
        ok = self.alive[:n] & np.all((self.lo[:n] <= hi) & (lo <= self.hi[:n]), axis=1)
        if not any(self.shifts):  # the bounds are exact: no check left
            return np.flatnonzero(ok).tolist()
        return [int(k) for k in np.flatnonzero(ok) if meets(self.boxes[k], b)]

    def regions(self, group: int) -> list[tuple[Box, Outcome]]:
        return [(self.boxes[k], self.outcomes[k]) for k in
                np.flatnonzero(self.alive[:len(self.boxes)] & (self.group[:len(self.boxes)]
                                                              == group))]


def uncovered(store: Store, piece: Box, found: list[int],
              limit: int | None = None) -> list[Box] | None:
    """``piece`` without the regions ``found`` (those of its group that meet it);
    None once that is more than ``limit`` boxes."""
    todo = [piece]
    for k in found:
        if limit is not None and len(todo) > limit:
            return None
        region = store.boxes[k]
        todo = [rest for p in todo for rest in (minus(p, region) if meets(p, region)
                                                else [p])]
        if not todo:
            break
    return todo


def cost(store: Store, found: list[int], todo: list[Box]) -> int:
    """How many regions ``insert`` would add."""
    return len(todo) + 2 * sum(store.outcomes[k].decider is None for k in found)


def insert(store: Store, piece: Box, rule: ir.Rule, group: int, found: list[int],
           todo: list[Box]) -> None:
    """Add ``rule``'s ``piece`` to ``group``: ``found`` are the group's regions that
    meet it (``Store.candidates``), ``todo`` what of it they leave (``uncovered``)."""
    for k in found:
        region, out = store.boxes[k], store.outcomes[k]
        if out.decider is None:  # counts only: the overlap gets this rule too
            store.remove(k)
            for rest in minus(region, piece):
                store.add(rest, out, group)
            store.add(common(region, piece), out.then(rule), group)
    for p in todo:
        store.add(p, NOTHING.then(rule), group)
