"""Per-field preprocessing shared by the prototypes: which rules each value of a field
lets hold, as segments of the value range and as prefixes.

Bit sets are Python ints: bit ``i`` is the ``i``-th rule of the policy (position,
which is also its pfc rule index).
"""

from __future__ import annotations

from collections.abc import Iterator

from benchmarks.classify_research.model import TOPS, Cond


def unconstrained(cs: list[Cond], name: str) -> int:
    """The rules that do not name the field: they hold for every value, absent too."""
    bits = 0
    for i, c in enumerate(cs):
        if c.field(name) is None:
            bits |= 1 << i
    return bits


def segments(cs: list[Cond], name: str) -> list[tuple[int, int]]:
    """(start, rules) for each run of values of ``name`` that the same rules allow,
    covering 0..TOPS[name] in order; "rules" includes the unconstrained ones."""
    events: dict[int, int] = {}
    for i, c in enumerate(cs):
        allowed = c.field(name)
        if allowed is None:
            continue
        for lo, hi in allowed:
            events[lo] = events.get(lo, 0) ^ (1 << i)
            events[hi + 1] = events.get(hi + 1, 0) ^ (1 << i)
    current = unconstrained(cs, name)
    out: list[tuple[int, int]] = []
    if 0 not in events:
        out.append((0, current))
    for at in sorted(events):
        if at > TOPS[name]:
            break
        current ^= events[at]
        if out and out[-1][1] == current:
            continue
        out.append((at, current))
    return out


def cidr(lo: int, hi: int, bits: int = 32) -> Iterator[tuple[int, int]]:
    """The prefixes (address, length) that cover exactly [lo, hi]."""
    while lo <= hi:
        size = (lo & -lo) if lo else 1 << bits
        while size > hi - lo + 1:
            size >>= 1
        yield lo, bits - size.bit_length() + 1
        lo += size


def prefix_classes(cs: list[Cond], name: str) -> dict[tuple[int, int], int]:
    """For longest-prefix match: every prefix a rule's address set splits into, plus
    0/0, mapped to the rules that hold for every address whose longest matching
    prefix it is: the rules with a prefix containing it, and the unconstrained ones."""
    own: dict[tuple[int, int], int] = {(0, 0): 0}
    for i, c in enumerate(cs):
        for lo, hi in c.field(name) or ():
            for p in cidr(lo, hi):
                own[p] = own.get(p, 0) | (1 << i)
    out: dict[tuple[int, int], int] = {}
    base = unconstrained(cs, name)
    for addr, length in sorted(own, key=lambda p: p[1]):
        parent = base
        for up in range(length - 1, -1, -1):
            mask = (0xFFFFFFFF << (32 - up)) & 0xFFFFFFFF if up else 0
            if (addr & mask, up) in out:
                parent = out[(addr & mask, up)]
                break
        out[(addr, length)] = own[(addr, length)] | parent
    return out


class Classes:
    """Distinct bit sets, numbered in order of first appearance (``first`` reserved)."""

    def __init__(self, *first: int) -> None:
        self.ids: dict[int, int] = {}
        self.sets: list[int] = []
        for bits in first:
            self.id(bits)

    def id(self, bits: int) -> int:
        found = self.ids.get(bits)
        if found is None:
            found = self.ids[bits] = len(self.sets)
            self.sets.append(bits)
        return found
