"""Tables of the LBVS prototype (lbvs.c): per field a value -> class map, per class a
bit vector of the rules (with an ABV summary in front), the count rules' mask.

Addresses are looked up in an LPM_TRIE (``addr="lpm"``, as bpf-iptables does) or in a
16-8-8 multibit trie of arrays (``addr="dir"``: 1-3 array lookups the verifier
inlines, no trie walk).
"""

from __future__ import annotations

import struct

import numpy as np

from benchmarks.classify_research.fields import Classes, prefix_classes, segments
from benchmarks.classify_research.model import FP_SIZE, PORT_ABSENT, Cond
from benchmarks.classify_research.proto import Build, u32s

PTR = 0x80000000


def _plane(bits: np.ndarray, words: int, summary_words: int) -> bytes:
    """One plane from a bool array (bit i = the i-th rule of the plane): (summary
    words, words) as little-endian u64s."""
    padded = np.zeros(words * 64, dtype=bool)
    padded[:len(bits)] = bits
    raw = np.packbits(padded, bitorder="little").tobytes()
    nonzero = np.frombuffer(raw, dtype="<u8") != 0
    summary = np.zeros(summary_words * 64, dtype=bool)
    summary[:words] = nonzero
    return np.packbits(summary, bitorder="little").tobytes() + raw


SMALL = 1 << 16  # an address match of at most this many addresses is "narrow"


def _narrow(allowed) -> bool:
    return allowed is not None and sum(hi - lo + 1 for lo, hi in allowed) <= SMALL


def _groups(cs: list[Cond], grouped: bool) -> list[list[int]]:
    """Positions of the terminal rules of each group, in rule order: all in one, or
    narrow destination / narrow source / the rest (empty groups dropped, at most 3)."""
    terminal = [i for i, c in enumerate(cs) if c.terminal]
    if not grouped:
        return [terminal]
    dst = [i for i in terminal if _narrow(cs[i].dst)]
    src = [i for i in terminal if not _narrow(cs[i].dst) and _narrow(cs[i].src)]
    rest = [i for i in terminal if not _narrow(cs[i].dst) and not _narrow(cs[i].src)]
    return [g for g in (dst, src, rest) if g] or [[]]


class Planes:
    """Rule bit sets (bit = policy position) split into the terminal plane (cut into
    groups) and the count plane, each renumbered in policy order."""

    def __init__(self, cs: list[Cond], grouped: bool = False) -> None:
        self.n = len(cs)
        self.groups = [np.array(g, dtype=np.int64) for g in _groups(cs, grouped)]
        self.counting = np.array([i for i, c in enumerate(cs) if not c.terminal],
                                 dtype=np.int64)
        self.tw = [max(1, (len(g) + 63) // 64) if k == 0 else (len(g) + 63) // 64
                   for k, g in enumerate(self.groups)]
        self.ts = [(w + 63) // 64 for w in self.tw]
        self.cw = (len(self.counting) + 63) // 64
        self.cs = (self.cw + 63) // 64

    @property
    def terminal(self) -> np.ndarray:
        return np.concatenate(self.groups)

    def defines(self) -> dict[str, int]:
        out: dict[str, int] = {}
        offset = 0
        for k in range(3):
            words = self.tw[k] if k < len(self.groups) else 0
            out |= {f"TW{k}": words, f"TS{k}": self.ts[k] if words else 0}
            if k:
                out[f"OFF{k}"] = offset
            offset += words * 64
        return out

    def vector(self, bits: int) -> bytes:
        raw = np.frombuffer(bits.to_bytes((self.n + 7) // 8 or 1, "little"), dtype=np.uint8)
        flags = np.unpackbits(raw, bitorder="little")[:self.n].astype(bool)
        out = b"".join(_plane(flags[g], w, s)
                       for g, w, s in zip(self.groups, self.tw, self.ts, strict=True) if w)
        if self.cw:
            out += _plane(flags[self.counting], self.cw, self.cs)
        return out

    def tidx(self) -> list[int]:
        out: list[int] = []
        for g, w in zip(self.groups, self.tw, strict=True):
            out += g.tolist() + [0] * (w * 64 - len(g))
        return out


def _port_table(cs: list[Cond], name: str) -> tuple[bytes, Classes]:
    classes = Classes()
    table = [0] * (PORT_ABSENT + 1)
    segs = segments(cs, name)
    for k, (start, bits) in enumerate(segs):
        end = segs[k + 1][0] if k + 1 < len(segs) else PORT_ABSENT
        table[start:end] = [classes.id(bits)] * (end - start)
    table[PORT_ABSENT] = classes.id(_absent(cs, name))
    return u32s(table), classes


def _absent(cs: list[Cond], name: str) -> int:
    from benchmarks.classify_research.fields import unconstrained

    return unconstrained(cs, name)


def _fp_table(cs: list[Cond]) -> tuple[bytes, Classes]:
    classes = Classes()
    table = []
    for v in range(FP_SIZE):
        bits = 0
        for i, c in enumerate(cs):
            if c.fp is None or v in c.fp:
                bits |= 1 << i
        table.append(classes.id(bits))
    return u32s(table), classes


def _lpm(cs: list[Cond], name: str) -> tuple[bytes, bytes, Classes]:
    classes = Classes(_absent(cs, name))  # class 0: the address is absent
    keys, values = [], []
    for (addr, length), bits in prefix_classes(cs, name).items():
        keys.append(struct.pack("<I", length) + addr.to_bytes(4, "big"))
        values.append(classes.id(bits))
    return b"".join(keys), u32s(values), classes


def _dir(cs: list[Cond], name: str) -> tuple[list[int], list[int], list[int], Classes]:
    """The 16-8-8 trie: level 1 indexed by the top 16 bits; an entry is a class, or
    PTR | node, whose 256 entries (next 8 bits) follow the same rule."""
    classes = Classes(_absent(cs, name))
    segs = [(s, classes.id(b)) for s, b in segments(cs, name)]
    starts = [s for s, _ in segs]
    import bisect

    def class_at(a: int) -> int:
        return segs[bisect.bisect_right(starts, a) - 1][1]

    def uniform(lo: int, size: int) -> bool:  # one class over [lo, lo + size)
        i = bisect.bisect_right(starts, lo)
        return i >= len(starts) or starts[i] >= lo + size

    l1, l2, l3 = [], [], []
    for top in range(1 << 16):
        lo = top << 16
        if uniform(lo, 1 << 16):
            l1.append(class_at(lo))
            continue
        l1.append(PTR | len(l2) // 256)
        node = []
        for mid in range(256):
            lo2 = lo | (mid << 8)
            if uniform(lo2, 256):
                node.append(class_at(lo2))
            else:
                node.append(PTR | len(l3) // 256)
                l3.extend(class_at(lo2 | b) for b in range(256))
        l2.extend(node)
    return l1, l2 or [0] * 256, l3 or [0] * 256, classes


def build(cs: list[Cond], addr: str = "lpm", summary: bool = True,
          grouped: bool = False) -> Build:
    planes = Planes(cs, grouped)
    fills: dict[str, tuple[bytes, bytes]] = {}
    defines: dict[str, int | None] = dict(planes.defines())
    fp, fp_classes = _fp_table(cs)
    fills["fp_class"] = (u32s(range(FP_SIZE)), fp)
    per_field = {"fp": fp_classes}
    for name, short in (("sport", "sp"), ("dport", "dp")):
        table, classes = _port_table(cs, name)
        fills[f"{short}_class"] = (u32s(range(PORT_ABSENT + 1)), table)
        per_field[short] = classes
    for name in ("src", "dst"):
        if addr == "lpm":
            keys, values, classes = _lpm(cs, name)
            fills[f"{name}_lpm"] = (keys, values)
            defines[f"NP_{name.upper()}"] = len(values) // 4
        else:
            l1, l2, l3, classes = _dir(cs, name)
            for level, table in (("l1", l1), ("l2", l2), ("l3", l3)):
                fills[f"{name}_{level}"] = (u32s(range(len(table))), u32s(table))
            defines[f"NN_{name.upper()}2"] = len(l2) // 256
            defines[f"NN_{name.upper()}3"] = len(l3) // 256
        per_field[name] = classes
    for field, classes in per_field.items():
        vectors = b"".join(planes.vector(bits) for bits in classes.sets)
        fills["vec_" + field] = (u32s(range(len(classes.sets))), vectors)
        defines[f"NC_{field.upper()}"] = len(classes.sets)
    table = planes.tidx()
    fills["tidx"] = (u32s(range(len(table))), u32s(table))
    if planes.cw:
        defines |= {"PFC_COUNT": None, "CW": planes.cw, "CS": planes.cs}
        fills["cidx"] = _index(planes.counting.tolist(), planes.cw)
    if summary:
        defines["PFC_SUMMARY"] = None
    defines["PFC_ADDR_" + addr.upper()] = None
    name = f"lbvs-{addr}" + ("" if summary else "-plain") + ("-grouped" if grouped else "")
    stats = {"rules": len(cs), "terminal_words": sum(planes.tw), "count_words": planes.cw,
             "groups": [len(g) for g in planes.groups]}
    return Build(name, "lbvs.c", defines, fills,
                 stats | {f"classes_{f}": len(c.sets) for f, c in per_field.items()})


def _index(positions: list[int], words: int) -> tuple[bytes, bytes]:
    table = positions + [0] * (words * 64 - len(positions))
    return u32s(range(len(table))), u32s(table)
