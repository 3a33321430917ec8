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
# A rule is in a field's wide part when it allows more values than this (module doc).
WIDE = {"fp": -1, "src": NARROW, "dst": NARROW, "sport": 256, "dport": 256}
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
        if self.name.endswith(("_rec", "_wide")):
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
        """struct pfc_rec: sum[sums] u64, cum[sums] u32, base u32, wide u32, padding."""
        return 12 * self.sums + 8 + (4 if self.sums % 2 else 0)


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

def wide(c: Cond, name: str) -> bool:
    """Whether the rule is in the field's wide part: it does not constrain the field,
    or allows more than ``WIDE[name]`` values (``fp``: always)."""
    iv = c.fields[name]
    return iv is None or _size(iv) > WIDE[name]


def segments(cs: list[Cond], name: str, bit: dict[int, int]) -> list[tuple[int, int, int]]:
    """(start, narrow rules, wide rules) for each run of values of ``name`` that the
    same rules allow (bit ``bit[i]`` for rule position ``i``), covering 0..top in
    order; the wide rules include those that do not constrain the field."""
    events: dict[int, list[int]] = {}
    wild = 0
    for i, c in enumerate(cs):
        k = 1 if wide(c, name) else 0
        if c.fields[name] is None:
            wild |= 1 << bit[i]
        for lo, hi in c.fields[name] or ():
            for at in (lo, hi + 1):
                e = events.setdefault(at, [0, 0])
                e[k] ^= 1 << bit[i]
    narrow, broad = 0, wild
    out = [(0, 0, wild)]
    for at in sorted(events):
        if at > TOPS[name]:
            break
        narrow ^= events[at][0]
        broad ^= events[at][1]
        if out[-1][0] == at:
            out[-1] = (at, narrow, broad)
        elif out[-1][1] != narrow or out[-1][2] != broad:
            out.append((at, narrow, broad))
    return out


class Store:
    """One field's classes (module doc, "Vectors"): class records (a narrow vector and
    the index of a wide record) and wide records, their words in one pool."""

    def __init__(self, tables: Tables, wild: int) -> None:
        self.t = tables
        self.spot = _spot(tables)
        self.vecs: dict[bytes, bytes] = {}
        self.wides: dict[bytes, int] = {}
        self.wide_records: list[bytes] = []
        self.classes: dict[tuple[bytes, int], int] = {}
        self.records: list[bytes] = []
        self.pool: list[np.ndarray] = []
        self.pooled = 0
        self.of(0, wild)  # class 0: absent

    def of(self, narrow: int, broad: int) -> int:
        """The class of a value whose narrow and wide rules are these."""
        vec, key = self._vec(narrow)
        wide_key = self._vec(broad)[1]
        w = self.wides.get(wide_key)
        if w is None:
            w = self.wides[wide_key] = len(self.wide_records)
            self.wide_records.append(self.vecs[wide_key] + bytes(4 + self._pad))
        found = self.classes.get((key, w))
        if found is None:
            found = self.classes[(key, w)] = len(self.records)
            self.records.append(vec + w.to_bytes(4, "little") + bytes(self._pad))
        return found

    @property
    def _pad(self) -> int:
        return self.t.rec_size - 12 * self.t.sums - 8

    def _vec(self, bits: int) -> tuple[bytes, bytes]:
        raw = bits.to_bytes(8 * self.t.words, "little")
        key = hashlib.blake2b(raw, digest_size=16).digest()
        vec = self.vecs.get(key)
        if vec is None:
            vec = self.vecs[key] = self._compress(np.frombuffer(raw, dtype="<u8"))
        return vec, key

    def _compress(self, words: np.ndarray) -> bytes:
        nz = words != 0
        flags = np.zeros(self.t.sums * 64, dtype=bool)
        flags[self.spot[nz]] = True
        per = flags.reshape(self.t.sums, 64).sum(axis=1)
        cum = np.zeros(self.t.sums, dtype="<u4")
        cum[1:] = np.cumsum(per)[:-1]
        base = self.pooled
        kept = words[nz]
        self.pool.append(kept)
        self.pooled += len(kept)
        return (np.packbits(flags, bitorder="little").tobytes() + cum.tobytes()
                + base.to_bytes(4, "little"))


def _spot(tables: Tables) -> np.ndarray:
    """Word -> its summary bit (global)."""
    spot = np.zeros(tables.words, dtype=np.int64)
    for p in tables.groups + ([tables.count] if tables.count else []):
        spot[p.woff:p.woff + p.words] = p.soff * 64 + np.arange(p.words)
    return spot


# -------------------------------------------------------------------------- lookups

def u32s(values) -> bytes:
    return np.asarray(values, dtype="<u4").tobytes()


def small_table(segs, store: Store, size: int) -> bytes:
    """fp and ports: an array of ``size`` classes (ports: the last one, absent, is 0)."""
    table = np.zeros(size, dtype="<u4")
    for k, (start, narrow, broad) in enumerate(segs):
        end = segs[k + 1][0] if k + 1 < len(segs) else size
        table[start:min(end, size)] = store.of(narrow, broad)
    if size == PORT_ABSENT + 1:
        table[PORT_ABSENT] = 0
    return table.tobytes()


def _cut(segs, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """The segments inside [lo, hi], rebased to lo."""
    out = []
    for k, (start, narrow, broad) in enumerate(segs):
        end = segs[k + 1][0] - 1 if k + 1 < len(segs) else TOPS["src"]
        if end < lo or start > hi:
            continue
        out.append((max(start, lo) - lo, narrow, broad))
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


def addr_tables(cs, name: str, bit, store: Store, out: Tables) -> FieldTables:
    segs = segments(cs, name, bit)
    ft = FieldTables(name)
    short = SHORT[name]
    for version, (lo, hi) in SPACES.items():
        part = [(s, store.of(n, b)) for s, n, b in _cut(segs, lo, hi)]
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
    for name in FIELDS:
        if all(c.fields[name] is None for c in cs):
            continue
        wild = 0
        for i, c in enumerate(cs):
            if c.fields[name] is None:
                wild |= 1 << bit[i]
        store = Store(out, wild)
        short = SHORT[name]
        if name in ("src", "dst"):
            ft = addr_tables(cs, name, bit, store, out)
        else:
            ft = FieldTables(name)
            size = 515 if name == "fp" else PORT_ABSENT + 1
            table = small_table(segments(cs, name, bit), store, size)
            out.maps.append(MapData(f"pfc_c_{short}", "array", 4, 4, size, table))
        ft.classes = len(store.records)
        out.fields.append(ft)
        for kind, records in (("rec", store.records), ("wide", store.wide_records)):
            out.maps.append(MapData(f"pfc_c_{short}_{kind}", "array", 4, out.rec_size,
                                    len(records), b"".join(records)))
        pool = np.concatenate(store.pool) if store.pooled else np.zeros(1, dtype="<u8")
        out.maps.append(MapData(f"pfc_c_{short}_pool", "array", 4, 8, len(pool),
                                pool.astype("<u8").tobytes()))
    return out


def rule_table(tables: Tables, slot_action: list[int]) -> MapData:
    """Global bit -> ``slot | action << 24`` of the rule there (``slot_action`` per
    policy position)."""
    values = [slot_action[i] if i >= 0 else 0 for i in tables.order] or [0]
    return MapData("pfc_c_rules", "array", 4, 4, len(values), u32s(values))


def memory(tables: Tables) -> int:
    """Bytes of map values (what the kernel allocates, roughly, without overhead)."""
    return sum(m.max_entries * m.value_size for m in tables.maps)
