"""Tables of the tuple-space-search prototype (tss.c): Srinivasan, Suri and Varghese,
SIGCOMM 1999, as Open vSwitch's classifier does it: every rule is split into entries
whose fields are prefixes (port ranges and negations split too, into at most ~30
prefixes each), entries with the same prefix lengths and the same required fields
form a *tuple*, and all tuples share one hash table keyed by (tuple, masked fields).

A frame is looked up in every tuple in order of the smallest rule index the tuple
holds, until that index is beyond the best terminal rule found so far (the early
exit). Count rules live in tuples of their own, looked up the same way after the
terminal search, each hit giving the sorted list of count rules with that key.

Key (20 bytes): tuple, src, dst, sport << 16 | dport, and ``meta`` = family << 16 |
protocol << 4 | presence bits (src 1, dst 2, sport 4, dport 8). A field a rule names
is required present through the presence bits, so "absent" never matches it.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from benchmarks.classify_research.fields import cidr
from benchmarks.classify_research.model import Cond
from benchmarks.classify_research.proto import Build, u32s

NONE = 0xFFFFFFFF
Entry = tuple[int, int, int, int, int, int, int, int]  # lens..., meta_mask, values...


def _fp_parts(c: Cond) -> list[tuple[int, int]]:
    """(meta mask, meta value) pairs for the family and protocol the rule allows."""
    if c.fp is None:
        return [(0, 0)]
    out = []
    fams = {0: {0} & c.fp, 1: {v - 1 for v in c.fp if 1 <= v <= 257},
            2: {v - 258 for v in c.fp if v >= 258}}
    for fam, protos in fams.items():
        if not protos:
            continue
        if fam == 0 or len(protos) == 257:
            out.append((0x3 << 16, fam << 16))
        else:
            out.extend(((0x3 << 16) | (0x1FF << 4), (fam << 16) | (p << 4))
                       for p in sorted(protos))
    return out


def _prefixes(allowed, bits: int) -> list[tuple[int, int]]:
    """(value, length) prefixes of a field; (0, 0) when unconstrained."""
    if allowed is None:
        return [(0, 0)]
    return [p for lo, hi in allowed for p in cidr(lo, hi, bits)]


def _mask(length: int, bits: int) -> int:
    return ((1 << bits) - 1) ^ ((1 << (bits - length)) - 1)


def entries(c: Cond) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(tuple masks, key values) of each entry of the rule."""
    need = sum(bit for bit, name in ((1, "src"), (2, "dst"), (4, "sport"), (8, "dport"))
               if getattr(c, name) is not None)
    out = []
    for meta_mask, meta in _fp_parts(c):
        for s, sl in _prefixes(c.src, 32):
            for d, dl in _prefixes(c.dst, 32):
                for sp, spl in _prefixes(c.sport, 16):
                    for dp, dpl in _prefixes(c.dport, 16):
                        masks = (_mask(sl, 32), _mask(dl, 32),
                                 (_mask(spl, 16) << 16) | _mask(dpl, 16),
                                 meta_mask | need)
                        out.append((masks, (s, d, (sp << 16) | dp, meta | need)))
    return out


def _tables(cs: list[Cond], terminal: bool):
    """tuples (masks -> min rule) and keys ((masks, values) -> rules), for one kind."""
    tuples: dict[tuple[int, ...], int] = {}
    keys: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(cs):
        if c.terminal != terminal:
            continue
        for masks, values in entries(c):
            tuples.setdefault(masks, i)
            rules = keys[(masks, values)]
            if not rules or rules[-1] != i:
                rules.append(i)
    order = sorted(tuples, key=lambda m: tuples[m])
    return order, tuples, keys


def _pack_tuples(order, tuples) -> bytes:
    return b"".join(struct.pack("<6I", *m, tuples[m], 0) for m in order)


def _key(tuple_id: int, values) -> bytes:
    return struct.pack("<5I", tuple_id, *values)


def build(cs: list[Cond]) -> Build:
    fills: dict[str, tuple[bytes, bytes]] = {}
    order, tuples, keys = _tables(cs, terminal=True)
    ids = {m: k for k, m in enumerate(order)}
    fills["tuples"] = (u32s(range(len(order))), _pack_tuples(order, tuples))
    fills["table"] = (b"".join(_key(ids[m], v) for m, v in keys),
                      u32s(rules[0] for rules in keys.values()))
    defines: dict[str, int | None] = {"NT": max(1, len(order)), "NK": max(1, len(keys))}
    corder, ctuples, ckeys = _tables(cs, terminal=False)
    stats = {"rules": len(cs), "tuples": len(order), "keys": len(keys),
             "count_tuples": len(corder), "count_keys": len(ckeys)}
    if corder:
        cids = {m: k for k, m in enumerate(corder)}
        lists, values = [], []
        for rules in ckeys.values():
            values.append(struct.pack("<2I", len(lists), len(rules)))
            lists.extend(rules)
        fills["ctuples"] = (u32s(range(len(corder))), _pack_tuples(corder, ctuples))
        fills["ctable"] = (b"".join(_key(cids[m], v) for m, v in ckeys), b"".join(values))
        fills["clists"] = (u32s(range(len(lists))), u32s(lists))
        defines |= {"PFC_COUNT": None, "NCT": len(corder), "NCK": len(ckeys),
                    "NCL": len(lists), "MAXL": max(len(r) for r in ckeys.values())}
    return Build("tss", "tss.c", defines, fills, stats)
