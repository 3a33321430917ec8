"""The bytes a map lookup's value pointer reads, as formulas small enough to solve.

A map's contents are constants of the artifact (:mod:`pfc.prove.targets.ebpf`), so a
read is a function of the key alone. Arrays (the classifier's 65,536-entry class
tables, the /24-bitmap sets' 262,144 top entries) are read by index: equal values at
consecutive indices are one *range*, and the ranges are a balanced tree of ``index <
bound`` tests (a table of one value on a few /16s is a handful of tests, not 65,536).
An LPM trie's value is the value of the longest prefix that holds the key's address
within the key's prefix length (the classifier's IPv6 classes); a hash map's the
value of the equal key. A read at an offset into the value that is not a constant
(``l->bits[i]``) is a choice among the offsets it can take.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

import z3

from pfc.prove.formula import prefixes_hold

ARRAYS = ("array", "percpu_array")


def array_index(key: z3.BitVecRef) -> z3.BitVecRef:
    """An array's u32 index from its key as the stack holds it (memory order)."""
    return z3.Concat(*[z3.Extract(8 * i + 7, 8 * i, key) for i in range(4)])


def lpm_key(info, key: z3.BitVecRef) -> tuple[z3.BitVecRef, z3.BitVecRef]:
    """An LPM trie key's (address, prefix length): ``struct { u32 prefixlen; u8
    data[]; }`` as the stack holds it."""
    bits = 8 * (info.key_size - 4)
    return z3.Extract(bits - 1, 0, key), array_index(z3.Extract(bits + 31, bits, key))


def lpm_net(key: bytes) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The prefix an LPM trie entry's key (as the maps file holds it) stands for."""
    return ipaddress.ip_network((key[4:], int.from_bytes(key[:4], "little")), strict=False)


def read(info, key: z3.BitVecRef, at, size: int, values=None) -> z3.BitVecRef:
    """``size`` bytes at ``at`` into the value found for ``key`` (little-endian as a
    load reads them), zero where the map holds nothing. ``values``: the value sets of
    terms (:mod:`.ebpf_values`); an array index known to take few values (a pool word
    at a class's base) is a tree over those indices alone."""
    if isinstance(at, int):
        if values is not None and info.kind in ARRAYS:
            few = values.of(array_index(key))
            if few is not None:
                return _few(info, array_index(key), sorted(few), at, size)
        return _read_at(info, key, at, size)
    at = z3.simplify(at)
    if z3.is_bv_value(at):
        return _read_at(info, key, at.as_signed_long(), size)
    align = next((a for a in (8, 4, 2) if z3.is_true(z3.simplify(at & (a - 1) == 0))), 1)
    out = z3.BitVecVal(0, 8 * size)
    for o in range(0, max(info.value_size - size + 1, 0), align):
        out = z3.If(at == o, _read_at(info, key, o, size), out)
    return out


def _read_at(info, key, at: int, size: int) -> z3.BitVecRef:
    if info.kind in ARRAYS:
        runs = _runs(_Table(info), at, size)
        return _tree(array_index(key), runs, 0, len(runs), 8 * size)
    if info.kind == "lpm_trie":
        return _lpm_value(info, key, at, size)
    out = z3.BitVecVal(0, 8 * size)
    for k, v in info.contents.items():
        raw = _slice(v, at, size)
        if raw:
            out = z3.If(key == int.from_bytes(k, "big"), z3.BitVecVal(raw, 8 * size), out)
    return out


def _few(info, index, keys: list[int], at: int, size: int) -> z3.BitVecRef:
    """The read when ``index`` is one of ``keys``: runs of equal values among them."""
    runs: list[tuple[int, int]] = []
    for k in keys:
        raw = _slice(info.contents.get(k.to_bytes(4, "little"), b""), at, size)
        if not runs or runs[-1][1] != raw:
            runs.append((k, raw))
    return _tree(index, runs, 0, len(runs), 8 * size)


def _slice(value: bytes, at: int, size: int) -> int:
    if at < 0:
        return 0
    return int.from_bytes(value[at:at + size].ljust(size, b"\0"), "little")


class _Table:
    """A hashable handle on one map's contents (for the cache of its ranges)."""

    def __init__(self, info):
        self.info = info

    def __hash__(self):
        return id(self.info.contents)

    def __eq__(self, other):
        return self.info.contents is other.info.contents


@lru_cache(maxsize=256)
def _runs(table: _Table, at: int, size: int) -> tuple[tuple[int, int], ...]:
    """(first index, value) of each run of equal values, from index 0 (zero where the
    array holds nothing, and past its end: a lookup there finds NULL anyway)."""
    values = {}
    for k, v in table.info.contents.items():
        raw = _slice(v, at, size)
        if raw:
            values[int.from_bytes(k, "little")] = raw
    runs, last, cur = [(0, 0)], -1, 0
    for index in sorted(values):
        v = values[index]
        if index != last + 1 and cur != 0:
            runs.append((last + 1, 0))
            cur = 0
        if v != cur:
            runs.append((index, v))
            cur = v
        last = index
    if cur != 0:
        runs.append((last + 1, 0))
    if len(runs) > 1 and runs[1][0] == 0:
        runs = runs[1:]
    return tuple(runs)


def _tree(index, runs, lo: int, hi: int, bits: int) -> z3.BitVecRef:
    if hi - lo == 1:
        return z3.BitVecVal(runs[lo][1], bits)
    mid = (lo + hi) // 2
    return z3.If(z3.ULT(index, runs[mid][0]), _tree(index, runs, lo, mid, bits),
                 _tree(index, runs, mid, hi, bits))


def _lpm_value(info, key, at: int, size: int) -> z3.BitVecRef:
    """The value of the longest prefix within the key's length that holds its address."""
    addr, plen = lpm_key(info, key)
    entries = []
    for k, v in info.contents.items():
        net = lpm_net(k)
        entries.append((net.prefixlen, net, _slice(v, at, size)))
    out = z3.BitVecVal(0, 8 * size)
    for length, net, raw in sorted(entries, key=lambda e: e[0]):
        holds = prefixes_hold(addr, [net])
        if length:
            holds = z3.And(z3.UGE(plen, length), holds)
        out = z3.If(holds, z3.BitVecVal(raw, 8 * size), out)
    return out
