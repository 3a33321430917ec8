"""Tables of the tuple-space-search prototype (tss.c): Srinivasan, Suri and Varghese,
SIGCOMM 1999, with ports as *classes* rather than prefixes (as the issue's brief
asks; TupleMerge, Daly and Torng, ICCCN 2017, relaxes tuples the same way): a tuple is
(source prefix length, destination prefix length, family/protocol mask, source-port
class, destination-port class), a port class being "any", "exact" (hashed) or
"range" (checked after the hash hit). Addresses and negations are split into
prefixes (a negated /24 is 24 prefixes), a negated port into its one or two ranges.

All tuples share one hash table keyed by (tuple, masked fields); a key's value is a
list of entries (rule, port ranges) in rule order. A frame is looked up in every
tuple in order of the smallest rule index the tuple holds, until that is beyond the
best terminal rule found (the early exit). Count rules live in tuples, table and
lists of their own, walked after the terminal search with the same early exit.

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

ANY, EXACT, RANGE = 0, 1, 2


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


def _prefixes(allowed) -> list[tuple[int, int]]:
    """(value, length) prefixes of an address field; (0, 0) when unconstrained."""
    if allowed is None:
        return [(0, 0)]
    return [p for lo, hi in allowed for p in cidr(lo, hi, 32)]


def _ports(allowed) -> list[tuple[int, int, int]]:
    """(class, lo, hi) of each interval of a port field."""
    if allowed is None:
        return [(ANY, 0, 65535)]
    return [(EXACT if lo == hi else RANGE, lo, hi) for lo, hi in allowed]


def _mask(length: int) -> int:
    return 0xFFFFFFFF ^ ((1 << (32 - length)) - 1)


def entries(c: Cond) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(tuple masks, key values, port ranges) of each entry of the rule."""
    need = sum(bit for bit, name in ((1, "src"), (2, "dst"), (4, "sport"), (8, "dport"))
               if getattr(c, name) is not None)
    out = []
    for meta_mask, meta in _fp_parts(c):
        for s, sl in _prefixes(c.src):
            for d, dl in _prefixes(c.dst):
                for sc, slo, shi in _ports(c.sport):
                    for dc, dlo, dhi in _ports(c.dport):
                        port_mask = (0xFFFF0000 if sc == EXACT else 0) | \
                            (0xFFFF if dc == EXACT else 0)
                        masks = (_mask(sl) if sl else 0, _mask(dl) if dl else 0,
                                 port_mask, meta_mask | need, sc * 3 + dc)
                        ports = ((slo << 16) | dlo) & port_mask
                        out.append((masks, (s, d, ports, meta | need),
                                    (slo, shi, dlo, dhi)))
    return out


def _tables(cs: list[Cond], terminal: bool):
    """Tuples in order (masks -> smallest rule) and key -> [(rule, port ranges)]."""
    tuples: dict[tuple[int, ...], int] = {}
    keys: dict[tuple, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
    for i, c in enumerate(cs):
        if c.terminal != terminal:
            continue
        for masks, values, ranges in entries(c):
            tuples.setdefault(masks, i)
            keys[(masks, values)].append((i, ranges))
    return sorted(tuples, key=lambda m: tuples[m]), tuples, keys


def _fill(prefix: str, cs: list[Cond], terminal: bool, fills: dict) -> dict[str, int]:
    order, tuples, keys = _tables(cs, terminal)
    ids = {m: k for k, m in enumerate(order)}
    fills[prefix + "tuples"] = (u32s(range(len(order))),
                                b"".join(struct.pack("<6I", *m[:4], tuples[m], 0)
                                         for m in order))
    table_keys, values, listed = [], [], []
    for (masks, key), rules in keys.items():
        table_keys.append(struct.pack("<5I", ids[masks], *key))
        values.append(struct.pack("<2I", len(listed), len(rules)))
        listed.extend(struct.pack("<I4H", i, *r) for i, r in rules)
    fills[prefix + "table"] = (b"".join(table_keys), b"".join(values))
    fills[prefix + "entries"] = (u32s(range(len(listed))), b"".join(listed))
    return {"tuples": len(order), "keys": len(keys), "entries": len(listed),
            "longest": max((len(r) for r in keys.values()), default=0)}


def build(cs: list[Cond]) -> Build:
    fills: dict[str, tuple[bytes, bytes]] = {}
    t = _fill("", cs, True, fills)
    defines: dict[str, int | None] = {"NT": max(1, t["tuples"]), "NK": max(1, t["keys"]),
                                      "NE": max(1, t["entries"]),
                                      "MAXL": max(1, t["longest"])}
    stats = {"rules": len(cs)} | t
    if any(not c.terminal for c in cs):
        c = _fill("c", cs, False, fills)
        defines |= {"PFC_COUNT": None, "NCT": c["tuples"], "NCK": c["keys"],
                    "NCE": c["entries"], "MAXCL": c["longest"]}
        stats |= {f"count_{k}": v for k, v in c.items()}
    return Build("tss", "tss.c", defines, fills, stats)
