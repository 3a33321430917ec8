"""Tables of the decision-tree prototype (dtree.c): HiCuts (Gupta and McKeown, Hot
Interconnects 1999) with HyperCuts' rule pushing left out and EffiCuts-style
redundancy removal (a rule behind a terminal rule that covers the whole node is
dropped from it).

Each rule is split into *entries*, one per combination of its fields' intervals, each
field one interval of an extended domain in which "absent" is a value of its own, so a
leaf checks five ranges and nothing else:

- ``fp`` 0..1023 (model.py; 515..1023 unused);
- ``src``, ``dst`` 0..2**33-1: the address, or 2**32 when absent;
- ``sport``, ``dport`` 0..2**17-1: the port, or 65536 when absent.

An unconstrained field is the whole domain (absent included), a constrained one an
interval inside the present values. A node cuts one field of its region (an aligned
power-of-two block) into 2**k equal parts; a leaf is a list of at most ``binth``
entries (more only where cutting stops helping), in rule order. Entries of one rule
are disjoint boxes, so a packet matches at most one of them: a count rule is counted
once.
"""

from __future__ import annotations

import struct

import numpy as np

from benchmarks.classify_research.model import FIELDS, Cond
from benchmarks.classify_research.proto import Build, u32s

BITS = (10, 33, 33, 17, 17)  # domain of each field: 2**bits values
ABSENT = (None, 2**32, 2**32, 65536, 65536)
LEAF = 0xFF
MAX_CUT_BITS = 8
MAX_DEPTH = 24


def entries(cs: list[Cond]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo[E, 5], hi[E, 5], rule index[E], is-count[E]) in rule order."""
    los, his, rules, counts = [], [], [], []
    for i, c in enumerate(cs):
        boxes = [([], [])]
        for f, name in enumerate(FIELDS):
            allowed = c.field(name)
            options = [(0, 2 ** BITS[f] - 1)] if allowed is None else list(allowed)
            boxes = [(lo + [a], hi + [b]) for lo, hi in boxes for a, b in options]
        for lo, hi in boxes:
            los.append(lo)
            his.append(hi)
            rules.append(i)
            counts.append(not c.terminal)
    return (np.array(los, dtype=np.uint64).reshape(-1, 5),
            np.array(his, dtype=np.uint64).reshape(-1, 5),
            np.array(rules, dtype=np.uint32), np.array(counts, dtype=bool))


class Tree:
    """The flattened tree: nodes, child lists and leaf entry lists."""

    def __init__(self, cs: list[Cond], binth: int, spfac: float) -> None:
        self.lo, self.hi, self.rule, self.count = entries(cs)
        self.binth, self.spfac = binth, spfac
        self.nodes: list[tuple[int, int, int, int, int]] = []  # field, shift, kbits, a, b
        self.kids: list[int] = []
        self.leaf_entries: list[int] = []
        self.leaves: dict[tuple[int, ...], int] = {}
        self.depth = 0
        self.max_leaf = 0
        region = (np.zeros(5, dtype=np.uint64),
                  np.array([2 ** b - 1 for b in BITS], dtype=np.uint64))
        self._build(np.arange(len(self.rule)), region, 0)

    def _prune(self, idx: np.ndarray, rlo: np.ndarray, rhi: np.ndarray) -> np.ndarray:
        """Entries up to the first terminal one that covers the whole region."""
        covers = np.all((self.lo[idx] <= rlo) & (self.hi[idx] >= rhi), axis=1)
        covers &= ~self.count[idx]
        first = np.flatnonzero(covers)
        return idx[:first[0] + 1] if len(first) else idx

    def _leaf(self, idx: np.ndarray) -> int:
        key = tuple(idx.tolist())
        found = self.leaves.get(key)
        if found is None:
            found = self.leaves[key] = len(self.nodes)
            self.nodes.append((LEAF, 0, 0, len(self.leaf_entries), len(key)))
            self.leaf_entries.extend(key)
            self.max_leaf = max(self.max_leaf, len(key))
        return found

    def _build(self, idx: np.ndarray, region, depth: int) -> int:
        rlo, rhi = region
        idx = self._prune(idx, rlo, rhi)
        self.depth = max(self.depth, depth)
        if len(idx) <= self.binth or depth >= MAX_DEPTH:
            return self._leaf(idx)
        cut = self._choose(idx, rlo, rhi)
        if cut is None:
            return self._leaf(idx)
        field, kbits, members = cut
        shift = int(rhi[field] - rlo[field] + 1).bit_length() - 1 - kbits
        me = len(self.nodes)
        self.nodes.append((field, shift, kbits, 0, 0))
        children = []
        for j, child in enumerate(members):
            clo, chi = rlo.copy(), rhi.copy()
            clo[field] = rlo[field] + np.uint64(j << shift)
            chi[field] = clo[field] + np.uint64((1 << shift) - 1)
            children.append(self._build(child, (clo, chi), depth + 1))
        self.nodes[me] = (field, shift, kbits, len(self.kids), 0)
        self.kids.extend(children)
        return me

    def _choose(self, idx: np.ndarray, rlo, rhi):
        """HiCuts: the field with the most distinct projections, cut into the most
        parts (a power of two) whose total of entries stays within spfac * n."""
        lo, hi = np.maximum(self.lo[idx], rlo), np.minimum(self.hi[idx], rhi)
        best, best_distinct = None, 1
        for f in range(5):
            if rhi[f] == rlo[f]:
                continue
            distinct = len(np.unique(lo[:, f] * np.uint64(3) + hi[:, f]))
            if distinct > best_distinct:
                best, best_distinct = f, distinct
        if best is None:
            return None
        size_bits = int(rhi[best] - rlo[best] + 1).bit_length() - 1
        chosen = None
        for kbits in range(1, min(MAX_CUT_BITS, size_bits) + 1):
            shift = np.uint64(size_bits - kbits)
            a = ((lo[:, best] - rlo[best]) >> shift).astype(np.int64)
            b = ((hi[:, best] - rlo[best]) >> shift).astype(np.int64)
            total = int((b - a + 1).sum()) + (1 << kbits)
            if chosen is not None and total > self.spfac * len(idx):
                break
            chosen = (kbits, a, b)
        kbits, a, b = chosen
        members = [idx[(a <= j) & (b >= j)] for j in range(1 << kbits)]
        if max(len(m) for m in members) == len(idx) and kbits == 1:
            return None  # no progress
        return best, kbits, members


def build(cs: list[Cond], binth: int = 8, spfac: float = 4.0) -> Build:
    tree = Tree(cs, binth, spfac)
    nodes = b"".join(struct.pack("<BBHII", f, s, k, a, b) for f, s, k, a, b in tree.nodes)
    ent = []
    for e in tree.leaf_entries:
        bounds = [int(v) for pair in zip(tree.lo[e], tree.hi[e], strict=True) for v in pair]
        ent.append(struct.pack("<10QII", *bounds, int(tree.rule[e]), int(tree.count[e])))
    fills = {"nodes": (u32s(range(len(tree.nodes))), nodes),
             "kids": (u32s(range(len(tree.kids))), u32s(tree.kids or [0])),
             "entries": (u32s(range(len(ent))), b"".join(ent))}
    if not tree.kids:
        fills["kids"] = (u32s([0]), u32s([0]))
    defines = {"NN": len(tree.nodes), "NK": max(1, len(tree.kids)),
               "NE": max(1, len(ent)), "DEPTH": tree.depth + 1,
               "LEAFMAX": max(1, tree.max_leaf)}
    if any(not c.terminal for c in cs):
        defines["PFC_COUNT"] = None
    stats = {"rules": len(cs), "entries": len(tree.rule), "nodes": len(tree.nodes),
             "leaf_entries": len(ent), "depth": tree.depth, "max_leaf": tree.max_leaf}
    return Build(f"dtree-{binth}", "dtree.c", defines, fills, stats)
