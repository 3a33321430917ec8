"""The classifier's tables: per field a value -> class lookup, per class the rules the
field lets hold as a compressed bit vector (Linear Bit Vector Search, bpf-iptables;
with ABV summaries, Baboescu and Varghese 2001). docs/ebpf.md "Large policies".

Rule positions. The terminal rules are cut into up to three *groups* (rules with a
narrow destination, a narrow source, the rest: in a group whose rules all name a
narrow address, that field's vectors are sparse, so the summaries skip almost every
word), then the ``count`` rules form a plane of their own. Each group and the count
plane start on a 64-bit word, rules in policy order inside: bit ``p`` of the global
numbering is rule ``order[p]``.

Vectors. For each field, the rules that do not constrain it (``wild``) hold for every
value: one vector per field, not per class. A class stores only the rules that do
constrain the field, compressed: a summary bit per word (is it non-zero), the count of
non-zero words before each summary word (``cum``) and where its non-zero words start
in the field's pool (``base``). The word ``w`` of a field for a class is ``wild[w] |
(summary bit set ? pool[base + cum[s] + popcount(summary[s] below w)] : 0)``.

Lookups. ``fp``: an array of 515 classes; ports: arrays of 65,537 (the last: absent);
addresses: IPv4 through a 16-8-8 trie of arrays (an entry is a class, or ``PTR | node``
of the next level), IPv6 through an LPM trie of disjoint prefixes; a family whose whole
space is one class is a constant instead. Class 0 is "no constrained rule" (absent).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from pfc.backends.ebpf.classify.model import FIELDS, PORT_ABSENT, SPACES, TOPS, Cond

PTR = 0x80000000
NARROW = 1 << 16  # an address match of at most this many addresses is "narrow"
SHORT = {"fp": "fp", "src": "sa", "dst": "da", "sport": "sp", "dport": "dp"}


@dataclass(frozen=True)
class Plane:
    """A group of terminal rules, or the count plane: ``words`` 64-bit words from word
    ``woff``, summarised by ``sums`` summary words from summary word ``soff``."""

    words: int
    woff: int
    sums: int
    soff: int
    first: int  # the smallest counter slot of its rules (groups are skipped after it)


@dataclass(frozen=True)
class MapData:
    """One map's contents: ``values`` for keys 0.. (``keys`` None) or for ``keys``."""

    name: str
    kind: str  # array | lpm_trie
    key_size: int
    value_size: int
    max_entries: int
    values: bytes
    keys: bytes | None = None

    @property
    def count(self) -> int:
        return len(self.values) // self.value_size

    @property
    def ctype(self) -> str:
        """The value's C type in classify.c.j2."""
        if self.name == "pfc_c_wild":
            return "struct pfc_wild"
        if self.name.endswith("_rec"):
            return "struct pfc_rec"
        return "__u64" if self.name.endswith("_pool") else "__u32"


@dataclass
class FieldTables:
    name: str
    classes: int = 0
    const4: int | None = None  # IPv4 addresses: one class (no trie)
    const6: int | None = None  # IPv6 addresses: one class (no LPM trie)
    lpm6: bool = False


@dataclass
class Tables:
    order: list[int]  # global bit -> policy position (-1: padding)
    groups: list[Plane]
    count: Plane | None
    words: int  # TW_TOT
    sums: int  # TS_TOT
    fields: list[FieldTables] = field(default_factory=list)
    maps: list[MapData] = field(default_factory=list)

    @property
    def rec_size(self) -> int:
        return 8 * self.sums + 4 * self.sums + 4 + (4 if self.sums % 2 == 0 else 0)


# --------------------------------------------------------------------------- layout

def _size(iv) -> int:
    return sum(hi - lo + 1 for lo, hi in iv)


def _narrow(iv) -> bool:
    return iv is not None and _size(iv) <= NARROW


def layout(cs: list[Cond]) -> tuple[list[int], list[Plane], Plane | None]:
    """(order, groups, count plane): module doc, "Rule positions"."""
    terminal = [i for i, c in enumerate(cs) if c.terminal]
    dst = [i for i in terminal if _narrow(cs[i].fields["dst"])]
    src = [i for i in terminal if not _narrow(cs[i].fields["dst"])
           and _narrow(cs[i].fields["src"])]
    rest = [i for i in terminal if not _narrow(cs[i].fields["dst"])
            and not _narrow(cs[i].fields["src"])]
    counting = [i for i, c in enumerate(cs) if not c.terminal]
    order: list[int] = []
    planes: list[Plane] = []
    soff = 0
    for members in [g for g in (dst, src, rest) if g] + [counting]:
        words = (len(members) + 63) // 64
        planes.append(Plane(words, len(order) // 64, (words + 63) // 64, soff,
                            min(members, default=0)))
        soff += planes[-1].sums
        order += members + [-1] * (64 * words - len(members))
    count = planes.pop() if counting else None
    if not counting:
        planes.pop()
    return order, planes, count


# ------------------------------------------------------------------------ segments

def segments(cs: list[Cond], name: str, bit: dict[int, int]) -> list[tuple[int, int]]:
    """(start, rules) for each run of values of ``name`` the same constraining rules
    allow (bit ``bit[i]`` for rule position ``i``), covering 0..top in order."""
    events: dict[int, int] = {}
    for i, c in enumerate(cs):
        for lo, hi in c.fields[name] or ():
            events[lo] = events.get(lo, 0) ^ (1 << bit[i])
            events[hi + 1] = events.get(hi + 1, 0) ^ (1 << bit[i])
    current, out = 0, [(0, 0)]
    for at in sorted(events):
        if at > TOPS[name]:
            break
        current ^= events[at]
        if out[-1][0] == at:
            out[-1] = (at, current)
        elif out[-1][1] != current:
            out.append((at, current))
    return out


class Vectors:
    """Distinct bit sets of one field as compressed records (module doc, "Vectors")."""

    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.ids: dict[bytes, int] = {}
        self.records: list[bytes] = []
        self.pool: list[np.ndarray] = []
        self.pooled = 0
        self.spot = _spot(tables)
        self.id(0)

    def id(self, bits: int) -> int:
        raw = bits.to_bytes(8 * self.t.words, "little")
        key = hashlib.blake2b(raw, digest_size=16).digest()
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.records)
            self.records.append(self._record(np.frombuffer(raw, dtype="<u8")))
        return found

    def _record(self, words: np.ndarray) -> bytes:
        nz = words != 0
        flags = np.zeros(self.t.sums * 64, dtype=bool)
        flags[self.spot[nz]] = True
        sums = np.packbits(flags, bitorder="little").tobytes()
        per = flags.reshape(self.t.sums, 64).sum(axis=1)
        cum = np.concatenate(([0], np.cumsum(per)[:-1])).astype("<u4")
        base = self.pooled
        kept = words[nz]
        self.pool.append(kept)
        self.pooled += len(kept)
        pad = bytes(self.t.rec_size - 12 * self.t.sums - 4)
        return sums + cum.tobytes() + np.array([base], dtype="<u4").tobytes() + pad


def wild_words(cs: list[Cond], name: str, tables: Tables) -> tuple[bytes, bytes]:
    """(summary words, words) of the rules that do not constrain ``name``."""
    flags = np.zeros(64 * tables.words, dtype=bool)
    for p, i in enumerate(tables.order):
        if i >= 0 and cs[i].fields[name] is None:
            flags[p] = True
    words = np.packbits(flags, bitorder="little").view("<u8")
    nz = words != 0
    sflags = np.zeros(tables.sums * 64, dtype=bool)
    sflags[_spot(tables)[nz]] = True
    return np.packbits(sflags, bitorder="little").tobytes(), words.tobytes()


def _spot(tables: Tables) -> np.ndarray:
    spot = np.zeros(tables.words, dtype=np.int64)
    for p in tables.groups + ([tables.count] if tables.count else []):
        spot[p.woff:p.woff + p.words] = p.soff * 64 + np.arange(p.words)
    return spot


# -------------------------------------------------------------------------- lookups

def u32s(values) -> bytes:
    return np.asarray(values, dtype="<u4").tobytes()


def small_table(segs, vec: Vectors, size: int) -> bytes:
    """fp and ports: an array of ``size`` classes (ports: the last one, absent, is 0)."""
    table = np.zeros(size, dtype="<u4")
    for k, (start, bits) in enumerate(segs):
        end = segs[k + 1][0] if k + 1 < len(segs) else min(size, PORT_ABSENT)
        table[start:min(end, size)] = vec.id(bits)
    if size == PORT_ABSENT + 1:
        table[PORT_ABSENT] = 0
    return table.tobytes()


def _cut(segs, lo: int, hi: int) -> list[tuple[int, int]]:
    """The segments inside [lo, hi], rebased to lo."""
    out = []
    for k, (start, bits) in enumerate(segs):
        end = segs[k + 1][0] - 1 if k + 1 < len(segs) else TOPS["src"]
        if end < lo or start > hi:
            continue
        out.append((max(start, lo) - lo, bits))
    return out


def dir_trie(segs: list[tuple[int, int]]) -> tuple[bytes, bytes, bytes]:
    """The 16-8-8 trie of IPv4 segments (start, class id): three u32 arrays."""
    starts = np.array([s for s, _ in segs], dtype=np.int64)
    ids = np.array([c for _, c in segs], dtype=np.uint32)

    def level(los: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        at = np.searchsorted(starts, los, side="right") - 1
        nxt = np.minimum(at + 1, len(starts) - 1)
        uniform = (at + 1 >= len(starts)) | (starts[nxt] >= los + size)
        return ids[at], uniform

    l1, u1 = level(np.arange(1 << 16, dtype=np.int64) << 16, 1 << 16)
    tops = np.nonzero(~u1)[0]
    l1[tops] = PTR | np.arange(len(tops), dtype=np.uint32)
    los2 = ((tops[:, None] << 16) | (np.arange(256)[None, :] << 8)).ravel()
    l2, u2 = level(los2, 256)
    mids = np.nonzero(~u2)[0]
    l2[mids] = PTR | np.arange(len(mids), dtype=np.uint32)
    los3 = (los2[mids][:, None] | np.arange(256)[None, :]).ravel()
    l3, _ = level(los3, 1)
    return (l1.astype("<u4").tobytes(), (l2 if len(l2) else np.zeros(256)).astype("<u4").tobytes(),
            (l3 if len(l3) else np.zeros(256)).astype("<u4").tobytes())


def cidr(lo: int, hi: int, bits: int):
    """The prefixes (address, length) that cover exactly [lo, hi]."""
    while lo <= hi:
        size = (lo & -lo) if lo else 1 << bits
        while size > hi - lo + 1:
            size >>= 1
        yield lo, bits - size.bit_length() + 1
        lo += size


def lpm6(segs: list[tuple[int, int]]) -> tuple[bytes, bytes]:
    """LPM_TRIE keys (u32 length, 16 address bytes) and u32 classes of IPv6 segments."""
    keys, values = bytearray(), []
    top = (1 << 128) - 1
    for k, (start, cls) in enumerate(segs):
        end = segs[k + 1][0] - 1 if k + 1 < len(segs) else top
        for addr, length in cidr(start, end, 128):
            keys += length.to_bytes(4, "little") + addr.to_bytes(16, "big")
            values.append(cls)
    return bytes(keys), u32s(values)


def addr_tables(cs, name: str, bit, vec: Vectors, out: Tables) -> FieldTables:
    segs = segments(cs, name, bit)
    ft = FieldTables(name)
    short = SHORT[name]
    for version, (lo, hi) in SPACES.items():
        part = [(s, vec.id(b)) for s, b in _cut(segs, lo, hi)]
        if len(part) == 1:
            setattr(ft, f"const{version}", part[0][1])
        elif version == 4:
            for level, data in zip(("l1", "l2", "l3"), dir_trie(part), strict=True):
                out.maps.append(MapData(f"pfc_c_{short}_{level}", "array", 4, 4,
                                        len(data) // 4, data))
        else:
            keys, values = lpm6(part)
            ft.lpm6 = True
            out.maps.append(MapData(f"pfc_c_{short}_lpm6", "lpm_trie", 20, 4,
                                    len(values) // 4, values, keys))
    return ft


# ---------------------------------------------------------------------------- build

def build(cs: list[Cond]) -> Tables:
    """Every map of the classifier for the rules ``cs`` (policy order)."""
    order, groups, count = layout(cs)
    words = len(order) // 64
    sums = sum(p.sums for p in groups) + (count.sums if count else 0)
    out = Tables(order, groups, count, words, sums)
    bit = {i: p for p, i in enumerate(order) if i >= 0}
    wild = []
    for name in FIELDS:
        if all(c.fields[name] is None for c in cs):
            continue
        vec = Vectors(out)
        short = SHORT[name]
        if name in ("src", "dst"):
            ft = addr_tables(cs, name, bit, vec, out)
        else:
            ft = FieldTables(name)
            size = 515 if name == "fp" else PORT_ABSENT + 1
            table = small_table(segments(cs, name, bit), vec, size)
            out.maps.append(MapData(f"pfc_c_{short}", "array", 4, 4, size, table))
        ft.classes = len(vec.records)
        out.fields.append(ft)
        records = b"".join(vec.records)
        out.maps.append(MapData(f"pfc_c_{short}_rec", "array", 4, out.rec_size,
                                len(vec.records), records))
        pool = np.concatenate(vec.pool) if vec.pooled else np.zeros(1, dtype="<u8")
        out.maps.append(MapData(f"pfc_c_{short}_pool", "array", 4, 8, len(pool),
                                pool.astype("<u8").tobytes()))
        wild.append(wild_words(cs, name, out))
    value = b"".join(s for s, _ in wild) + b"".join(w for _, w in wild)
    out.maps.append(MapData("pfc_c_wild", "array", 4, max(8, len(value)), 1,
                            value or bytes(8)))
    return out


def rule_table(tables: Tables, slot_action: list[int]) -> MapData:
    """Global bit -> ``slot | action << 24`` of the rule there (``slot_action`` per
    policy position)."""
    values = [slot_action[i] if i >= 0 else 0 for i in tables.order] or [0]
    return MapData("pfc_c_rules", "array", 4, 4, len(values), u32s(values))


def memory(tables: Tables) -> int:
    """Bytes of map values (what the kernel allocates, roughly, without overhead)."""
    return sum(m.max_entries * m.value_size for m in tables.maps)

