"""Tables of the decision-tree prototype (dtree.c): HiCuts-style cutting (Gupta and
McKeown, Hot Interconnects 1999) in separable trees (EffiCuts, Vamanan et al.,
SIGCOMM 2010), with redundancy removal (an entry behind a terminal entry that covers
the whole node is dropped from it).

Each rule is split into *entries*, one per combination of its fields' intervals; each
field is one interval of an extended domain in which "absent" is a value of its own,
so a leaf checks five ranges and nothing else:

- ``fp`` 0..1023 (model.py; 515..1023 unused);
- ``src``, ``dst`` 0..2**33-1: the address, or 2**32 when absent;
- ``sport``, ``dport`` 0..2**17-1: the port, or 65536 when absent.

An unconstrained field is the whole domain (absent included), a constrained one an
interval of present values. Entries are split into groups by which address fields are
*small* (at most 2**16 addresses, i.e. /16 or longer): dst small; src small (dst
large); both large. Each group has its own tree, so a wide rule is not copied into
every part of a cut on the field it does not narrow. A node cuts one field of its
region (an aligned power-of-two block) into 2**k equal parts: the field and k that
make the largest part smallest while the parts hold at most ``spfac`` times the
node's entries in all (the root of a group may cut 16 bits, lower nodes 8), after
region compaction (HyperCuts): the cut spans only the smallest aligned block holding
the node's entries in that field, and a frame outside it matches nothing in this
tree. A leaf
lists at most ``binth`` entries (more only where no cut helps), in rule order.
Entries of one rule are disjoint boxes: a packet matches at most one of them, so a
count rule is counted once.
"""

from __future__ import annotations

import struct

import numpy as np

from benchmarks.classify_research.model import FIELDS, Cond
from benchmarks.classify_research.proto import Build, u32s

BITS = (10, 33, 33, 17, 17)  # domain of each field: 2**bits values
SMALL = 1 << 16  # an address interval of at most this many values is "small"
LEAF = 0xFF
NO_RULE = 0xFFFFFFFF
ROOT_CUT_BITS, CUT_BITS = 16, 8
MAX_DEPTH = 24


def entries(cs: list[Cond]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(lo[E, 5], hi[E, 5], rule index[E], is-count[E]) in rule order."""
    los, his, rules, counts = [], [], [], []
    for i, c in enumerate(cs):
        boxes: list[tuple[list[int], list[int]]] = [([], [])]
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


def groups(lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """Entry indices of each non-empty group: dst small, src small, neither."""
    size = hi - lo + np.uint64(1)
    dst_small = size[:, 2] <= SMALL
    src_small = (size[:, 1] <= SMALL) & ~dst_small
    rest = ~dst_small & ~src_small
    return [np.flatnonzero(m) for m in (dst_small, src_small, rest) if m.any()]


class Tree:
    """The flattened trees. ``nodes[k]`` = (field or LEAF, shift, kbits or has-count,
    a, b, min rule, base): an internal node's 2**kbits children are the nodes
    a .. a + 2**kbits - 1 (one lookup per level, no child table); a leaf's entries
    are leaf_entries[a:a + b] (identical lists are stored once). ``min rule`` is the
    smallest rule index below the node: a walk stops where it cannot do better."""

    def __init__(self, cs: list[Cond], binth: int, spfac: float,
                 grouped: bool = True) -> None:
        self.lo, self.hi, self.rule, self.count = entries(cs)
        self.binth, self.spfac = binth, spfac
        self.nodes: list[tuple[int, ...]] = []
        self.leaf_entries: list[int] = []
        self.lists: dict[tuple[int, ...], int] = {}
        self.depth = 0
        self.max_leaf = 0
        whole = (np.zeros(5, dtype=np.uint64),
                 np.array([2 ** b - 1 for b in BITS], dtype=np.uint64))
        self.roots = []
        every = [np.arange(len(self.rule))] if len(self.rule) else []
        for g in groups(self.lo, self.hi) if grouped else every:
            self.roots.append(len(self.nodes))
            self.nodes.append(())
            self.nodes[self.roots[-1]] = self._node(g, whole, 0)

    def _prune(self, idx: np.ndarray, rlo: np.ndarray, rhi: np.ndarray) -> np.ndarray:
        """Entries up to the first terminal one that covers the whole region."""
        covers = np.all((self.lo[idx] <= rlo) & (self.hi[idx] >= rhi), axis=1)
        covers &= ~self.count[idx]
        first = np.flatnonzero(covers)
        return idx[:first[0] + 1] if len(first) else idx

    def _leaf(self, listed: list[int]) -> tuple[int, ...]:
        key = tuple(listed)
        first = self.lists.get(key)
        if first is None:
            first = self.lists[key] = len(self.leaf_entries)
            self.leaf_entries.extend(key)
            self.max_leaf = max(self.max_leaf, len(key))
        has_count = int(any(self.count[e] for e in key))
        low = int(self.rule[key[0]]) if key else NO_RULE
        return (LEAF, 0, has_count, first, len(key), low, 0)

    def _node(self, idx: np.ndarray, region, depth: int) -> tuple[int, ...]:
        rlo, rhi = region
        idx = self._prune(idx, rlo, rhi)
        self.depth = max(self.depth, depth)
        if len(idx) <= self.binth or depth >= MAX_DEPTH:
            return self._leaf(idx.tolist())
        cut = self._choose(idx, rlo, rhi, ROOT_CUT_BITS if depth == 0 else CUT_BITS)
        if cut is None:
            return self._leaf(idx.tolist())
        field, kbits, a, b, base, size_bits = cut
        shift = size_bits - kbits
        members: list[list[int]] = [[] for _ in range(1 << kbits)]
        for e, first, last in zip(idx.tolist(), a.tolist(), b.tolist(), strict=True):
            for j in range(first, last + 1):
                members[j].append(e)
        block = len(self.nodes)
        self.nodes.extend([()] * (1 << kbits))
        for j, listed in enumerate(members):
            if len(listed) <= self.binth:  # a leaf whatever the region: no pruning needed
                self.nodes[block + j] = self._leaf(listed)
                self.depth = max(self.depth, depth + 1)
                continue
            clo, chi = rlo.copy(), rhi.copy()
            clo[field] = np.uint64(base + (j << shift))
            chi[field] = clo[field] + np.uint64((1 << shift) - 1)
            self.nodes[block + j] = self._node(np.array(listed, dtype=np.int64),
                                               (clo, chi), depth + 1)
        return (field, shift, kbits, block, 0, int(self.rule[idx[0]]), base)

    def _choose(self, idx: np.ndarray, rlo, rhi, max_bits: int):
        """(field, k, first part, last part of each entry, block base, block bits) of
        the cut whose largest part is smallest within the space budget, over the
        field's compacted block; None if no cut makes progress."""
        lo, hi = np.maximum(self.lo[idx], rlo), np.minimum(self.hi[idx], rhi)
        n = len(idx)
        best = None
        for f in range(5):
            first, last = int(lo[:, f].min()), int(hi[:, f].max())
            size_bits = (first ^ last).bit_length()
            base = first & ~((1 << size_bits) - 1)
            for kbits in range(1, min(max_bits, size_bits) + 1):
                shift = np.uint64(size_bits - kbits)
                a = ((lo[:, f] - np.uint64(base)) >> shift).astype(np.int64)
                b = ((hi[:, f] - np.uint64(base)) >> shift).astype(np.int64)
                total = int((b - a + 1).sum())
                if total > self.spfac * n + (1 << kbits) and kbits > 1:
                    break
                counts = np.zeros((1 << kbits) + 1, dtype=np.int64)
                np.add.at(counts, a, 1)
                np.add.at(counts, b + 1, -1)
                largest = int(np.cumsum(counts)[:-1].max())
                score = (largest, total, kbits)
                if largest < n and (best is None or score < best[0]):
                    best = (score, f, kbits, a, b, base, size_bits)
        return None if best is None else best[1:]


def build(cs: list[Cond], binth: int = 8, spfac: float = 4.0,
          grouped: bool = True) -> Build:
    tree = Tree(cs, binth, spfac, grouped)
    nodes = b"".join(struct.pack("<BBHIIIQ", *n) for n in tree.nodes)
    ent = []
    for e in tree.leaf_entries:
        bounds = [int(v) for pair in zip(tree.lo[e], tree.hi[e], strict=True) for v in pair]
        ent.append(struct.pack("<10QII", *bounds, int(tree.rule[e]), int(tree.count[e])))
    roots = tree.roots
    if not roots:  # no rules: one empty leaf
        roots, nodes = [0], struct.pack("<BBHIIIQ", *tree._leaf([]))
    fills = {"nodes": (u32s(range(len(nodes) // 24)), nodes),
             "roots": (u32s(range(len(roots))), u32s(roots)),
             "entries": (u32s(range(len(ent))), b"".join(ent))}
    defines: dict[str, int | None] = {
        "NN": len(nodes) // 24, "NE": max(1, len(ent)), "NG": len(roots),
        "DEPTH": tree.depth + 1, "LEAFMAX": max(1, tree.max_leaf)}
    if any(not c.terminal for c in cs):
        defines["PFC_COUNT"] = None
    stats = {"rules": len(cs), "entries": len(tree.rule), "groups": len(roots),
             "nodes": len(nodes) // 24, "leaf_entries": len(ent), "depth": tree.depth,
             "max_leaf": tree.max_leaf}
    return Build(f"dtree-{binth}" + ("" if grouped else "-one"), "dtree.c", defines, fills,
                 stats)
