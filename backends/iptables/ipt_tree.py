"""Blocks of ``pfc.passes.classify`` as a tree of iptables user chains (large policies).

iptables has no verdict maps, so a block (a run of mappable rules of one family) is
dispatched by address: each tree node is a short chain of ``-g`` gotos on disjoint
intervals of the source or the destination address (``-s``/``-d`` for an aligned
prefix, ``-m iprange`` otherwise; the last interval without a test), chosen per node
as the field that splits its rules best; a leaf holds, in the policy's order, the
iptables lines of exactly the block's rules whose address sets meet the leaf's box.

Why this is exact: the addresses are always there at pfc's hooks (ip_rcv/ipv6_rcv
checked the fixed header; semantics.md), so a packet reaches exactly one leaf, and a
rule left out of that leaf cannot hold for it. The leaf's lines are the ordered chain's
own lines (the same guards, ``! -f``, u32/bpf reads, negations, count rules), so first
match, the count rules before the decider and every rule's counter stay as they are
(the counters of a rule are the sum of its lines, in whatever chain: one per packet).
Every step is a goto, so ``pass`` (``-j RETURN``, or ``-g PFC-notrack``) still returns
to the base chain; a leaf that decides nothing ends with ``-g NEXT``, the chain holding
the rest of the policy after the block.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

from pfc.frontend import ir

FANOUT = 8  # children per tree node
LEAF = 12  # a node of at most this many rules is a leaf
MAX_DEPTH = 8
GAIN = 0.75  # a split must leave every child at most this share of the node's rules


@dataclass
class Member:
    rule: ir.Rule
    lines: list[tuple[str, int | str]]  # the rule's iptables lines (without -A CHAIN)
    addr: dict[str, tuple[tuple[int, int], ...]]  # "src"/"dst" → intervals


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


def meets(ivs: tuple[tuple[int, int], ...], lo: int, hi: int) -> bool:
    return any(a <= hi and lo <= b for a, b in ivs)


def build(out: Chains, version: int, members: list[Member], nxt: str) -> str:
    """The tree of one block: its root chain's name; leaves end with ``-g nxt``."""
    top = 2**32 - 1 if version == 4 else 2**128 - 1
    root = out.new()
    _node(out, root, version, members, {"src": (0, top), "dst": (0, top)}, 0, nxt)
    return root


def _node(out: Chains, name: str, version: int, members: list[Member],
          bounds: dict[str, tuple[int, int]], depth: int, nxt: str) -> None:
    split = _split(members, bounds) if len(members) > LEAF and depth < MAX_DEPTH else None
    if split is None:
        out.chains[name] = [(line, owner) for m in members for line, owner in m.lines] + \
            [(f"-g {nxt}", "log")]
        return
    fld, parts = split
    lines = []
    for k, ((lo, hi), sub) in enumerate(parts):
        child = out.new()
        last = k == len(parts) - 1
        lines.append((("" if last else _test(version, fld, lo, hi) + " ") + f"-g {child}",
                      "log"))
        _node(out, child, version, sub, bounds | {fld: (lo, hi)}, depth + 1, nxt)
    out.chains[name] = lines


def _split(members: list[Member], bounds: dict[str, tuple[int, int]]):
    """The best (field, [(interval, members)]) over src and dst, or None."""
    best = None
    for fld in ("src", "dst"):
        lo, hi = bounds[fld]
        parts = _parts(members, fld, lo, hi)
        if parts is None:
            continue
        worst = max(len(sub) for _, sub in parts)
        if worst <= GAIN * len(members) and (best is None or worst < best[0]):
            best = (worst, fld, parts)
    return None if best is None else best[1:]


def _parts(members: list[Member], fld: str, lo: int, hi: int):
    """``[lo, hi]`` cut into at most FANOUT intervals at the members' boundaries (at
    quantiles of them), each with the members that meet it."""
    points = sorted(p for m in members for a, b in m.addr[fld]
                    for p in (a, b + 1) if lo < p <= hi)
    if not points:
        return None
    cuts = sorted({points[len(points) * k // FANOUT] for k in range(1, FANOUT)})
    edges = [lo, *cuts, hi + 1]
    parts = []
    for a, b in zip(edges, edges[1:], strict=False):
        if a < b:
            parts.append(((a, b - 1), [m for m in members if meets(m.addr[fld], a, b - 1)]))
    return parts if len(parts) > 1 else None


def _test(version: int, fld: str, lo: int, hi: int) -> str:
    size = hi - lo + 1
    cls = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    bits = 32 if version == 4 else 128
    if size & (size - 1) == 0 and lo % size == 0:
        return f"{'-s' if fld == 'src' else '-d'} {cls(lo)}/{bits - size.bit_length() + 1}"
    return f"-m iprange --{fld}-range {cls(lo)}-{cls(hi)}"


def addresses(box: dict, version: int) -> dict[str, tuple[tuple[int, int], ...]]:
    top = 2**32 - 1 if version == 4 else 2**128 - 1
    return {f: tuple(box.get(f, ((0, top),))) for f in ("src", "dst")}


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
