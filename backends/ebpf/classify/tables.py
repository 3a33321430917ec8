"""The classifier's tables: per field a value -> class lookup, per class the rules the
field lets hold as a bit vector with summaries (Linear Bit Vector Search, bpf-iptables;
ABV summaries, Baboescu and Varghese 2001). docs/ebpf.md "Large policies".

Rule positions. The terminal rules are cut into *groups* by shape (which of
:data:`SHAPE` they match narrowly; small shapes share a group): in a group whose rules
all match a field narrowly, that field's summaries are sparse, so their AND leaves few
candidate words. The ``count`` rules are grouped the same way after them. Each group
starts on a 64-bit word, rules in policy order inside: bit ``p`` of the global
numbering is rule ``order[p]``; summary bit ``j`` of a group's summary word ``s`` is its
word ``64 s + j``.

Vectors. A field's rules are *narrow* (they allow at most ``WIDE[field]`` values) or
*wide* (more, or the field is not constrained: a wildcard holds for every value, absent
included). Per class: the narrow rules' vector, compressed (summary words, the count of
non-zero words before each summary word ``cum``, its non-zero words from ``base`` in the
field's pool), and the index of its wide record: few distinct wide vectors exist, each
stored whole in the wide pool. Word ``w`` (summary word ``s``, bit ``b``) is ``wpool[wide.base
+ w] | (summary bit set ? pool[base + cum[s] + popcount(sum[s] below b)] : 0)``. While all
classes' whole vectors fit in :data:`DENSE_MAX`, each class's whole vector is stored
instead (*dense*: ``dpool[base + w]``, no rank).

Lookups (:mod:`.lookups`). ``fp``: an array of 515 classes; ports: arrays of 65,537
(the last: absent); addresses: IPv4 through a 16-8-8 trie of arrays, IPv6 through an
LPM trie of disjoint prefixes; a family whose whole space is one class is a constant
instead. Class 0 is "absent" (the wide record of the unconstrained rules).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from pfc.backends.ebpf.classify.lookups import cut, dir_trie, lpm6, small_table, u32s
from pfc.backends.ebpf.classify.model import FIELDS, PORT_ABSENT, SPACES, TOPS, Cond

NARROW = 1 << 16  # an address match of at most this many addresses is "narrow"
# Terminal rules are grouped by which of these fields they match narrowly: in a group,
# a narrow field's summaries are sparse, so their AND leaves few candidate words.
SHAPE = ("dst", "src", "dport")
MIN_GROUP = 64
MIN_COUNT_GROUP = 16
# Dense vectors (one AND per field and word, no rank) while they take at most this
# much kernel memory, about one core's L2; compressed ones beyond (docs/ebpf.md "Large
# policies"): a new flow reads its classes' vectors from memory, and compressed ones
# are 2-4x smaller (docs/scale.md "New flows": 8k ClassBench rules, 1.1-1.3x faster
# per new flow than dense, 0.9x as fast on a few flows that stay in cache).
DENSE_MAX = 2 << 20
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
        return "__u64" if self.name.endswith("pool") else "__u32"


@dataclass
class FieldTables:
    name: str
    order: int = 0  # tested in this order in a candidate word: the narrowest first
    narrow: bool = True  # some rule matches the field narrowly (else: wide part only)
    classes: int = 0
    const4: int | None = None  # IPv4 addresses: one class (no trie)
    const6: int | None = None  # IPv6 addresses: one class (no LPM trie)
    lpm6: bool = False


@dataclass
class Tables:
    order: list[int]  # global bit -> policy position (-1: padding)
    groups: list[Plane]
    count: list[Plane]  # groups of count rules
    words: int  # TW_TOT
    sums: int  # TS_TOT
    fields: list[FieldTables] = field(default_factory=list)
    maps: list[MapData] = field(default_factory=list)
    dense: bool = False  # one record per class: summaries and every word

    @property
    def rec_size(self) -> int:
        """struct pfc_rec: sum[sums] u64, cum[sums] u32, base u32, wide u32, padding."""
        return 12 * self.sums + 8 + (4 if self.sums % 2 else 0)


# --------------------------------------------------------------------------- layout

def _size(iv) -> int:
    return sum(hi - lo + 1 for lo, hi in iv)


def shape_groups(cs: list[Cond], wides: dict[str, list[bool]], terminal: bool,
                 minimum: int) -> list[list[int]]:
    """The terminal (or count) rules cut by shape (which of :data:`SHAPE` they match
    narrowly), policy order inside each group; shapes of fewer than ``minimum`` rules
    share one group."""
    by: dict[tuple[bool, ...], list[int]] = {}
    for i, c in enumerate(cs):
        if c.terminal == terminal:
            by.setdefault(tuple(not wides[f][i] for f in SHAPE), []).append(i)
    big = [g for g in by.values() if len(g) >= minimum]
    small = sorted(i for g in by.values() if len(g) < minimum for i in g)
    return [g for g in big + [small] if g]


def layout(cs: list[Cond], wides: dict[str, list[bool]]
           ) -> tuple[list[int], list[Plane], list[Plane]]:
    """(order, groups of terminal rules, groups of count rules): module doc, "Rule
    positions"."""
    order: list[int] = []
    planes: list[Plane] = []
    soff = 0
    terminal = shape_groups(cs, wides, True, MIN_GROUP)
    for members in terminal + shape_groups(cs, wides, False, MIN_COUNT_GROUP):
        words = (len(members) + 63) // 64
        planes.append(Plane(words, len(order) // 64, (words + 63) // 64, soff, min(members)))
        soff += planes[-1].sums
        order += members + [-1] * (64 * words - len(members))
    if not order:  # no rule at all: one empty word keeps every array non-empty
        order = [-1] * 64
    return order, planes[:len(terminal)], planes[len(terminal):]


# ------------------------------------------------------------------------ segments

def wide(c: Cond, name: str) -> bool:
    """Whether the rule is in the field's wide part: it does not constrain the field,
    or allows more than ``WIDE[name]`` values (``fp``: always)."""
    iv = c.fields[name]
    return iv is None or _size(iv) > WIDE[name]


def classes(cs: list[Cond], name: str, bit: dict[int, int], store: Store,
            wides: list[bool]) -> list[tuple[int, int]]:
    """(start, class) for each run of values of ``name`` that the same rules allow
    (bit ``bit[i]`` for rule position ``i``), covering 0..top in order: a sweep over
    the intervals' ends, flipping the rules' bits in two word arrays (narrow, wide)."""
    events: dict[int, tuple[list[int], list[int]]] = {}
    narrow = np.zeros(store.t.words, dtype="<u8")
    broad = np.zeros(store.t.words, dtype="<u8")
    wild = [bit[i] for i, c in enumerate(cs) if c.fields[name] is None]
    _flip(broad, wild)
    for i, c in enumerate(cs):
        k = 1 if wides[i] else 0
        for lo, hi in c.fields[name] or ():
            events.setdefault(lo, ([], []))[k].append(bit[i])
            events.setdefault(hi + 1, ([], []))[k].append(bit[i])
    keys = [store.narrow_key(narrow), store.wide_key(broad)]
    out = [(0, store.pair(*keys))]
    for at in sorted(events):
        if at > TOPS[name]:
            break
        for k, arr in enumerate((narrow, broad)):
            if events[at][k]:
                _flip(arr, events[at][k])
                keys[k] = store.narrow_key(arr) if k == 0 else store.wide_key(arr)
        cls = store.pair(*keys)
        if out[-1][0] == at:
            out[-1] = (at, cls)
        elif out[-1][1] != cls:
            out.append((at, cls))
    return out


def _flip(words: np.ndarray, positions: list[int]) -> None:
    if len(positions) <= 4:
        for p in positions:
            words[p >> 6] ^= np.uint64(1 << (p & 63))
    else:
        pos = np.asarray(positions, dtype=np.int64)
        np.bitwise_xor.at(words, pos >> 6, np.left_shift(np.uint64(1), (pos & 63).astype(
            np.uint64)))


class Store:
    """One field's classes (module doc, "Vectors"): class records (a compressed narrow
    vector and the index of a wide record) and wide records (summaries, and the vector
    uncompressed in the wide pool at ``base``: few classes share them)."""

    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self.spot = _spot(tables)
        self.narrow: dict[bytes, bytes] = {}
        self.narrow_nz: dict[bytes, tuple[np.ndarray, int]] = {}
        self.class_keys: list[tuple[bytes, int]] = []
        self.wides: dict[bytes, int] = {}
        self.wide_records: list[bytes] = []
        self.wide_pool: list[np.ndarray] = []
        self.classes: dict[tuple[bytes, int], int] = {}
        self.records: list[bytes] = []
        self.pool: list[np.ndarray] = []
        self.pooled = 0
        self.pad = tables.rec_size - 12 * tables.sums - 8

    @staticmethod
    def _digest(words: np.ndarray) -> bytes:
        return hashlib.blake2b(words.tobytes(), digest_size=16).digest()

    def narrow_key(self, words: np.ndarray) -> bytes:
        """A narrow vector's key; compressed into the pool the first time it is seen."""
        key = self._digest(words)
        if key not in self.narrow:
            self.narrow_nz[key] = (np.nonzero(words)[0], self.pooled)
            self.narrow[key] = self._compress(words)
        return key

    def wide_key(self, words: np.ndarray) -> bytes:
        """A wide vector's key; a wide record the first time it is seen."""
        key = self._digest(words)
        if key not in self.wides:
            self.wides[key] = len(self.wide_records)
            base = len(self.wide_pool) * self.t.words
            self.wide_pool.append(words.copy())
            self.wide_records.append(self._summary(words)[0] + bytes(4 * self.t.sums)
                                     + base.to_bytes(4, "little") + bytes(4 + self.pad))
        return key

    def pair(self, narrow: bytes, broad: bytes) -> int:
        """The class of a value whose narrow and wide rules have these keys."""
        w = self.wides[broad]
        found = self.classes.get((narrow, w))
        if found is None:
            found = self.classes[(narrow, w)] = len(self.records)
            self.class_keys.append((narrow, w))
            self.records.append(self.narrow[narrow] + w.to_bytes(4, "little")
                                + bytes(self.pad))
        return found

    def _summary(self, words: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
        nz = np.nonzero(words)[0]
        at = self.spot[nz]
        flags = np.zeros(self.t.sums * 64, dtype=bool)
        flags[at] = True
        return np.packbits(flags, bitorder="little").tobytes(), nz, at

    def _compress(self, words: np.ndarray) -> bytes:
        sums, nz, at = self._summary(words)
        cum = np.zeros(self.t.sums, dtype="<u4")
        cum[1:] = np.cumsum(np.bincount(at >> 6, minlength=self.t.sums))[:-1]
        base = self.pooled
        self.pool.append(words[nz].copy())
        self.pooled += len(nz)
        return sums + cum.tobytes() + base.to_bytes(4, "little")


def _spot(tables: Tables) -> np.ndarray:
    """Word -> its summary bit (global)."""
    spot = np.zeros(tables.words, dtype=np.int64)
    for p in tables.groups + tables.count:
        spot[p.woff:p.woff + p.words] = p.soff * 64 + np.arange(p.words)
    return spot


def addr_tables(cs, name: str, bit, store: Store, out: Tables, wides) -> FieldTables:
    segs = classes(cs, name, bit, store, wides)
    ft = FieldTables(name)
    short = SHORT[name]
    for version, (lo, hi) in SPACES.items():
        part = cut(segs, lo, hi)
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

def build(cs: list[Cond], dense_max: int | None = None) -> Tables:
    """Every map of the classifier for the rules ``cs`` (policy order): dense vectors
    when they take at most ``dense_max`` bytes (:data:`DENSE_MAX`), else compressed."""
    wides = {name: [wide(c, name) for c in cs] for name in FIELDS}
    order, groups, count = layout(cs, wides)
    words = len(order) // 64
    sums = max(1, sum(p.sums for p in groups + count))
    out = Tables(order, groups, count, words, sums)
    bit = {i: p for p, i in enumerate(order) if i >= 0}
    stores = {}
    for name in FIELDS:
        if all(c.fields[name] is None for c in cs):
            continue
        store = stores[name] = Store(out)
        zero = store.narrow_key(np.zeros(words, dtype="<u8"))
        wild = np.zeros(words, dtype="<u8")
        _flip(wild, [bit[i] for i, c in enumerate(cs) if c.fields[name] is None])
        store.pair(zero, store.wide_key(wild))  # class 0: absent
        short = SHORT[name]
        if name in ("src", "dst"):
            ft = addr_tables(cs, name, bit, store, out, wides[name])
        else:
            ft = FieldTables(name)
            size = 515 if name == "fp" else PORT_ABSENT + 1
            table = small_table(classes(cs, name, bit, store, wides[name]), size)
            out.maps.append(MapData(f"pfc_c_{short}", "array", 4, 4, size, table))
        ft.classes = len(store.records)
        ft.order = ("dst", "src", "dport", "sport", "fp").index(name)
        ft.narrow = not all(wides[name])
        out.fields.append(ft)
    dense_size = out.rec_size + 8 * words
    limit = DENSE_MAX if dense_max is None else dense_max
    out.dense = sum(len(st.records) for st in stores.values()) * dense_size <= limit
    for name, store in stores.items():
        out.maps += dense_maps(store, name) if out.dense else compressed_maps(store, name)
    return out


def compressed_maps(store: Store, name: str) -> list[MapData]:
    short, out = SHORT[name], []
    for kind, records in (("rec", store.records), ("wide", store.wide_records)):
        out.append(MapData(f"pfc_c_{short}_{kind}", "array", 4, store.t.rec_size,
                           len(records), b"".join(records)))
    for kind, parts in (("pool", store.pool), ("wpool", store.wide_pool)):
        pool = np.concatenate(parts) if parts else np.zeros(1, dtype="<u8")
        out.append(MapData(f"pfc_c_{short}_{kind}", "array", 4, 8, max(1, len(pool)),
                           pool.astype("<u8").tobytes() or bytes(8)))
    return out


def dense_maps(store: Store, name: str) -> list[MapData]:
    """One record per class (its summaries; ``base``: where its whole vector starts in
    the dense pool ``pfc_c_F_dpool``)."""
    pool = np.concatenate(store.pool) if store.pool else np.zeros(0, dtype="<u8")
    records, vectors = [], []
    t = store.t
    for k, (narrow, w) in enumerate(store.class_keys):
        words = store.wide_pool[w].copy()
        nz, base = store.narrow_nz[narrow]
        words[nz] |= pool[base:base + len(nz)]
        vectors.append(words)
        records.append(store._summary(words)[0] + bytes(4 * t.sums)
                       + (k * t.words).to_bytes(4, "little") + bytes(4 + store.pad))
    short = SHORT[name]
    data = np.concatenate(vectors).astype("<u8").tobytes()
    return [MapData(f"pfc_c_{short}_rec", "array", 4, t.rec_size, len(records),
                    b"".join(records)),
            MapData(f"pfc_c_{short}_dpool", "array", 4, 8, len(data) // 8, data)]


def rule_table(tables: Tables, slot_action: list[int]) -> MapData:
    """Global bit -> ``slot | action << 24`` of the rule there (``slot_action`` per
    policy position)."""
    values = [slot_action[i] if i >= 0 else 0 for i in tables.order] or [0]
    return MapData("pfc_c_rules", "array", 4, 4, len(values), u32s(values))


def memory(tables: Tables) -> int:
    """Bytes of map values (what the kernel allocates, roughly, without overhead)."""
    return sum(m.max_entries * m.value_size for m in tables.maps)
