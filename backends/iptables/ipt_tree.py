"""Blocks of ``pfc.passes.classify`` as a tree of iptables user chains (large policies).

iptables has no verdict maps, so a block (a run of mappable rules of one family) is
dispatched by a decision tree (HiCuts-like, one field per node): each tree node is a
short chain of ``-g`` gotos on disjoint intervals (at most ``FANOUT``) of one field,
chosen per node as the one whose children hold the fewest rules in all: the source or
destination address (``-s``/``-d`` for an aligned prefix, ``-m iprange`` otherwise), the
protocol byte or the destination port (u32 tests: the very reads of the rules' own
protocol and port tests); the last child has no test. A leaf holds, in the policy's
order, the iptables lines of exactly the block's rules that can hold in its box.

Why this is exact: a node's children partition the packets reaching it, and a rule
left out of a child cannot hold for its packets. Addresses and the protocol byte are
always there at pfc's hooks (ip_rcv/ipv6_rcv checked the fixed header; semantics.md).
A destination-port node sends a packet whose u32 read fails (no transport header of 4
bytes where pfc reads it) to its last child, which holds only the rules naming no
``dport`` (a rule naming one cannot hold there: its own test is that read); a packet
whose read succeeds but which is no TCP/UDP first fragment goes by the bytes it has,
to a child that holds every rule naming no ``dport`` too. The leaf's lines are the
ordered chain's own lines (the same guards, ``! -f``, u32/bpf reads, negations, count
rules), so first match, the count rules before the decider and every rule's counter
stay as they are (a rule's counter is the sum of its lines, in whatever chain; a
packet passes one of them). Every step is a goto, so ``pass`` (``-j RETURN``, or ``-g
PFC-notrack``) still returns to the base chain; a leaf that decides nothing ends with
``-g NEXT``, the chain holding the rest of the policy after the block.

Size: a rule meeting several children is in each, so the tree grows its largest node
first and stops when the leaves would hold more than ``BUDGET`` rules per rule.
"""

from __future__ import annotations

import bisect
import heapq
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

from pfc.backends.iptables import u32 as u
from pfc.frontend import ir

FANOUT = 4  # children per tree node
LEAF = 12  # a node of at most this many rules is a leaf
MAX_DEPTH = 20
GAIN = 0.75  # a split must leave every child at most this share of the node's rules
ABSENT = (1, 0)  # the dport "interval" of packets without a destination port read
BUDGET = 8  # the leaves hold at most this many rules per rule of the block


@dataclass
class Member:
    rule: ir.Rule
    lines: list[tuple[str, int | str]]  # the rule's iptables lines (without -A CHAIN)
    addr: dict[str, tuple[tuple[int, int], ...] | None]  # src/dst/dport → intervals;
    # dport None: the rule names no destination port (it can hold without one)


@dataclass
class Chains:
    """The sub-chains of one family: name → lines (``(text, owner)``), in order."""

    prefix: str  # the main chain: sub-chains are PREFIX-tN
    chains: dict[str, list[tuple[str, int | str]]] = field(default_factory=dict)

    def new(self) -> str:
        name = f"{self.prefix}-t{label(len(self.chains))}"
        self.chains[name] = []
        return name


def label(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = digits[n % 36]
    while n >= 36:
        n //= 36
        out = digits[n % 36] + out
    return out


def build(out: Chains, version: int, members: list[Member], nxt: str) -> str:
    """The tree of one block: its root chain's name; leaves end with ``-g nxt``. The
    largest node is split first, until the rules in the leaves (a rule meeting several
    leaves is in each) would pass ``BUDGET`` times the block's, or no node can be split
    (module doc)."""
    top = 2**32 - 1 if version == 4 else 2**128 - 1
    root = out.new()
    bounds = {"src": (0, top), "dst": (0, top), "proto": (0, 255), "dport": (0, 65535)}
    heap = [(-len(members), 0, root, members, bounds, 0)]
    spent, budget = len(members), BUDGET * len(members)
    while heap:
        _, _, name, sub, bounds, depth = heapq.heappop(heap)
        split = _split(sub, bounds) if len(sub) > LEAF and depth < MAX_DEPTH else None
        grown = split and sum(len(s) for _, s in split[1]) - len(sub)
        if split is None or spent + grown > budget:
            out.chains[name] = [(line, owner) for m in sub for line, owner in m.lines] + \
                [(f"-g {nxt}", "log")]
            continue
        spent += grown
        lines = []
        for child, test, part, b in _children(out, version, split, bounds):
            lines.append((f"{test} -g {child}".strip(), "log"))
            heapq.heappush(heap, (-len(part), len(out.chains), child, part, b, depth + 1))
        out.chains[name] = lines
    return root


def _children(out: Chains, version: int, split, bounds: dict):
    """Per child of a split: its chain, the dispatch test, its members and bounds."""
    fld, parts = split
    for k, ((lo, hi), sub) in enumerate(parts):
        last = k == len(parts) - 1
        yield (out.new(), "" if last else _test(version, fld, lo, hi), sub,
               bounds | {fld: (lo, hi)})


def _split(members: list[Member], bounds: dict[str, tuple[int, int]]):
    """The best (field, [(interval, members)]) over src and dst, or None."""
    best = None
    for fld in ("src", "dst", "proto", "dport"):
        lo, hi = bounds[fld]
        parts = _parts(members, fld, lo, hi)
        if parts is None:
            continue
        worst = max(len(sub) for _, sub in parts)
        total = sum(len(sub) for _, sub in parts)
        if worst <= GAIN * len(members) and (best is None or total < best[0]):
            best = (total, fld, parts)
    return None if best is None else best[1:]


def _parts(members: list[Member], fld: str, lo: int, hi: int):
    """``[lo, hi]`` cut into at most FANOUT intervals at the members' boundaries (at
    quantiles of them), each with the members that meet it."""
    points = sorted(p for m in members for a, b in m.addr[fld] or ()
                    for p in (a, b + 1) if lo < p <= hi)
    if not points:
        return None
    cuts = sorted({points[len(points) * k // FANOUT] for k in range(1, FANOUT)})
    edges = [lo, *cuts, hi + 1]  # strictly increasing: child k is [edges[k], edges[k+1])
    kids: list[list[Member]] = [[] for _ in cuts] + [[]]
    for m in members:
        for k in _meeting(m.addr[fld], edges, lo, hi):
            if not kids[k] or kids[k][-1] is not m:
                kids[k].append(m)
    parts = [((a, b - 1), kid) for a, b, kid in zip(edges[:-1], edges[1:], kids,
                                                            strict=True)]
    if fld == "dport":  # no destination port read (the last, untested): no dport rules
        parts.append((ABSENT, [m for m in members if m.addr["dport"] is None]))
    return parts if len(parts) > 1 else None


def _meeting(ivs, edges: list[int], lo: int, hi: int):
    """The children (indexes) that intervals ``ivs`` (None: all values) meet."""
    if ivs is None:
        yield from range(len(edges) - 1)
        return
    for a, b in ivs:
        if b >= lo and a <= hi:
            yield from range(bisect.bisect_right(edges, max(a, lo)) - 1,
                             bisect.bisect_right(edges, min(b, hi)))


def _test(version: int, fld: str, lo: int, hi: int) -> str:
    if fld == "proto":  # the header's byte, as the rules' `-p`/u32 protocol tests read it
        location, _, _ = u.IP_FIELDS[(version, "proto")]
        return " ".join(u.u32_args((u.U32Test(location, ((lo, hi),)),)))
    if fld == "dport":  # the very read of the rules' own dport tests
        location, _ = u.TRANSPORT_FIELDS[(version, "dport")]
        return " ".join(u.u32_args((u.U32Test(location, ((lo, hi),)),)))
    size = hi - lo + 1
    cls = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    bits = 32 if version == 4 else 128
    if size & (size - 1) == 0 and lo % size == 0:
        return f"{'-s' if fld == 'src' else '-d'} {cls(lo)}/{bits - size.bit_length() + 1}"
    return f"-m iprange --{fld}-range {cls(lo)}-{cls(hi)}"


def addresses(box: dict, version: int) -> dict[str, tuple[tuple[int, int], ...] | None]:
    top = 2**32 - 1 if version == 4 else 2**128 - 1
    return {f: tuple(box.get(f, ((0, top),))) for f in ("src", "dst")} | \
        {"proto": tuple(box.get("proto", ((0, 255),)))} | \
        {"dport": tuple(box["dport"]) if "dport" in box else None}


def tree_family(items: list, family: int, chain: str, pairs: Callable,
                tail: list[tuple[str, int | str | None]]) -> dict:
    """The template's and the line table's view of one family of a classified policy
    (``pfc.passes.classify`` items): the main chain's lines and owners, and the
    sub-chains (module doc); ``tail`` ends the last segment (the default's lines)."""
    from pfc.passes.classify import Block, box

    out = Chains(chain)
    main: list = []
    current = main
    for item in items:
        if not isinstance(item, Block):
            if family in item.family.versions:
                current += pairs(item, family)
            continue
        if item.version != family:
            continue
        members = [Member(r, pairs(r, family), addresses(box(r), family)) for r in item.rules]
        nxt = out.new()
        current.append((f"-g {build(out, family, members, nxt)}", "log"))
        current = out.chains[nxt]
    current += tail
    return {"tree": main, "owners": [o for _, o in main], "subchains": out.chains,
            "entries": []}
