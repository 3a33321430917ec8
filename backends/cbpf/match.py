"""One match of the language as a small graph of tests (a :data:`Block`).

A block is built for two exits, ``yes`` (the match holds) and ``no``; negation swaps
them. A block never tests presence: the rule's guards (``cbpf_cfg``) have already made
sure every byte the rule's fields occupy is inside the packet, so a negated match on a
present field is exactly "not (test)" (semantics.md: absent is false, negated or not).

Integer fields and IPv4 addresses are sets of intervals tested on the raw value with
``jeq`` (one value), ``jge``/``jgt`` (a range), walked in ascending order so that
"below this interval" is a definite no; the complement is tested instead when it is
cheaper. IPv6 prefixes compare 32-bit words. Nothing here ever turns an empty set into
"match anything": an empty set is a block that always answers ``no``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable

from pfc.backends.cbpf.graph import Node, Step, Test, Value, XState, load
from pfc.frontend import ir
from pfc.frontend.matches import complement_ranges

Block = Callable[[Node, Node], Node]
MakeNode = Callable[[Test, Node, Node], Node]


def negate(block: Block, negated: bool) -> Block:
    return (lambda yes, no: block(no, yes)) if negated else block


def conjunction(blocks: list[Block]) -> Block:
    """All blocks hold, tested in order; the first that fails goes to ``no``."""
    def build(yes: Node, no: Node) -> Node:
        target = yes
        for block in reversed(blocks):
            target = block(target, no)
        return target
    return build


def always(yes: Node, no: Node) -> Node:
    return yes


def never(yes: Node, no: Node) -> Node:
    return no


# ----------------------------------------------------------------------------- intervals

def merge(intervals: Iterable[tuple[int, int]], top: int) -> list[tuple[int, int]]:
    """Sorted, disjoint, non-adjacent intervals clipped to [0, top]; empty ones gone."""
    out: list[list[int]] = []
    for lo, hi in sorted((max(lo, 0), min(hi, top)) for lo, hi in intervals):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _cost(intervals: list[tuple[int, int]], top: int) -> int:
    return sum(1 if lo == hi else (lo > 0) + (hi < top) for lo, hi in intervals)


def interval_block(make: MakeNode, value: Value, x: XState | None,
                   intervals: Iterable[tuple[int, int]], top: int) -> Block:
    """``value`` lies in one of ``intervals`` (values outside [0, top] cannot occur)."""
    inside = merge(intervals, top)
    if not inside:
        return never
    outside = complement_ranges(inside, top)
    if not outside:
        return always
    if _cost(outside, top) < _cost(inside, top):
        return negate(_ascending(make, value, x, outside, top), True)
    return _ascending(make, value, x, inside, top)


def _ascending(make: MakeNode, value: Value, x: XState | None,
               intervals: list[tuple[int, int]], top: int) -> Block:
    def build(yes: Node, no: Node) -> Node:
        nxt = no
        for lo, hi in reversed(intervals):
            if lo == hi:
                nxt = make(Test(value, "jeq", lo, x), yes, nxt)
                continue
            upper = yes if hi == top else make(Test(value, "jgt", hi, x), nxt, yes)
            # Below lo: not in this interval, nor in a later (higher) one, nor in an
            # earlier one (those were ruled out on the way here).
            nxt = upper if lo == 0 else make(Test(value, "jge", lo, x), upper, no)
        return nxt
    return build


# ------------------------------------------------------------------------------ addresses

def ipv4_block(make: MakeNode, offset: int,
               prefixes: Iterable[ipaddress.IPv4Network]) -> Block:
    return interval_block(make, load(4, offset), None, _spans(prefixes), 0xFFFFFFFF)


def _spans(prefixes: Iterable[ir.IPNetwork]) -> list[tuple[int, int]]:
    """(first, last) address of each prefix, as integers."""
    out = []
    for p in prefixes:
        first = int(p.network_address)
        out.append((first, first + (1 << (p.max_prefixlen - p.prefixlen)) - 1))
    return out


def ipv6_block(make: MakeNode, offset: int,
               prefixes: Iterable[ipaddress.IPv6Network]) -> Block:
    """Any of ``prefixes`` (collapsed first): per prefix, its words in order."""
    nets = list(ipaddress.collapse_addresses(prefixes))
    if not nets:
        return never
    if any(n.prefixlen == 0 for n in nets):
        return always
    blocks = [_ipv6_prefix(make, offset, n) for n in nets]

    def build(yes: Node, no: Node) -> Node:
        nxt = no
        for block in reversed(blocks):
            nxt = block(yes, nxt)
        return nxt
    return build


def _ipv6_prefix(make: MakeNode, offset: int, net: ipaddress.IPv6Network) -> Block:
    address = int(net.network_address)
    words = []
    for i in range(4):
        bits = min(max(net.prefixlen - 32 * i, 0), 32)
        if bits == 0:
            break
        word = (address >> (96 - 32 * i)) & 0xFFFFFFFF
        span = (1 << (32 - bits)) - 1
        words.append(interval_block(make, load(4, offset + 4 * i), None,
                                    [(word, word | span)], 0xFFFFFFFF))
    return conjunction(words)


# ------------------------------------------------------------------------------- others

def flags_block(make: MakeNode, value: Value, x: XState | None, must: int,
                clear: int) -> Block:
    """Every bit of ``must`` set and every bit of ``clear`` clear in ``value``."""
    mask = must | clear
    if mask == 0:
        return always
    if clear == 0 and must & (must - 1) == 0:
        return lambda yes, no: make(Test(value, "jset", must, x), yes, no)
    if must == 0:
        return lambda yes, no: make(Test(value, "jset", clear, x), no, yes)
    masked = value + (Step("and", mask),)
    return lambda yes, no: make(Test(masked, "jeq", must, x), yes, no)


def bytes_block(make: MakeNode, offset: int, data: bytes, x: XState | None) -> Block:
    """``data`` at ``offset`` (relative to X when ``x`` is given), in 4/2/1-byte words."""
    blocks, at = [], 0
    while at < len(data):
        size = 4 if len(data) - at >= 4 else 2 if len(data) - at >= 2 else 1
        word = int.from_bytes(data[at:at + size], "big")
        step = Step("ldx" if x else "ld", offset + at, size)
        test = Test((step,), "jeq", word, x)
        blocks.append(lambda yes, no, t=test: make(t, yes, no))
        at += size
    return conjunction(blocks)


def frag_block(make: MakeNode, l3: int = 14) -> Block:
    """IPv4 MF set or fragment offset not 0 (flags/offset at L3 + 6)."""
    return lambda yes, no: make(Test(load(2, l3 + 6), "jset", 0x3FFF), yes, no)


def address_block(make: MakeNode, match: ir.AddrMatch, version: int,
                  l3: int = 14) -> Block:
    """``src``/``dst`` for one family (the IP header at ``l3``): the prefixes of that
    family only."""
    if version == 4:
        offset = l3 + (12 if match.field == "src" else 16)
        nets = [p for p in match.prefixes if p.version == 4]
        return negate(ipv4_block(make, offset, nets), match.negated)
    offset = l3 + (8 if match.field == "src" else 24)
    nets = [p for p in match.prefixes if p.version == 6]
    return negate(ipv6_block(make, offset, nets), match.negated)


# ------------------------------------------------------------------------------- size

def tests_needed(match: ir.Match, versions: Iterable[int]) -> int:
    """About how many tests the block of ``match`` holds (for ``versions``), without
    building it: the interval tests of an address list or integer set (the cheaper of
    the set and its complement, as ``interval_block`` chooses), one per IPv6 prefix (it
    takes one to four), one for anything else. Linear in the list; a 100k-entry set
    takes ~0.3 s here and minutes in the optimiser and assembler, so the backend
    checks this first."""
    if isinstance(match, ir.AddrMatch):
        total = 0
        for version in versions:
            nets = [p for p in match.prefixes if p.version == version]
            inside = merge(_spans(nets), (1 << (32 if version == 4 else 128)) - 1)
            total += _interval_tests(inside, 0xFFFFFFFF) if version == 4 else len(inside)
        return total
    if isinstance(match, ir.IntMatch):
        top = ir.FIELDS[match.field].maximum or 0xFFFFFFFF
        return _interval_tests(merge(match.ranges, top), top)
    return 1


def _interval_tests(inside: list[tuple[int, int]], top: int) -> int:
    if not inside:
        return 0
    return min(_cost(inside, top), _cost(complement_ranges(inside, top), top))
