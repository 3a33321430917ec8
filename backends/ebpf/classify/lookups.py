"""The classifier's per-field lookups, from (start, class) segments of a field's
value space: arrays for ``fp`` and ports, a 16-8-8 trie of arrays for IPv4 addresses
(an entry is a class, or ``PTR | node`` of the next level), an LPM trie of disjoint
prefixes for IPv6 addresses."""

from __future__ import annotations

import numpy as np

from pfc.backends.ebpf.classify.model import PORT_ABSENT, TOPS

PTR = 0x80000000


def u32s(values) -> bytes:
    return np.asarray(values, dtype="<u4").tobytes()


def small_table(segs, size: int) -> bytes:
    """fp and ports: an array of ``size`` classes (ports: the last one, absent, is 0)."""
    table = np.zeros(size, dtype="<u4")
    for k, (start, cls) in enumerate(segs):
        end = segs[k + 1][0] if k + 1 < len(segs) else size
        table[start:min(end, size)] = cls
    if size == PORT_ABSENT + 1:
        table[PORT_ABSENT] = 0
    return table.tobytes()


def cut(segs, lo: int, hi: int) -> list[tuple[int, int]]:
    """The segments inside [lo, hi], rebased to lo."""
    out = []
    for k, (start, cls) in enumerate(segs):
        end = segs[k + 1][0] - 1 if k + 1 < len(segs) else TOPS["src"]
        if end < lo or start > hi:
            continue
        out.append((max(start, lo) - lo, cls))
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


