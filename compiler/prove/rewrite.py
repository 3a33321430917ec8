"""``redirect`` as a formula: the frame leaving the hook, and checksum arithmetic.

:func:`redirect` follows :func:`pfc.oracle.interp.redirect_frame` (semantics.md "What
redirect writes"): the destination address, the IPv4 header checksum, the destination
port when the rule's protocol is TCP/UDP and the transport header is readable with
it, and the TCP/UDP checksum when its bytes are present (a UDP checksum of 0 stays 0,
an updated one of 0 is written 0xffff). Checksums are the RFC 1624 update of
:func:`pfc.oracle.interp.csum_update`: ``(HC + m - m') mod 0xffff``.

The ones'-complement helpers (``csum_add``, ``csum_fold``) are the kernel's, for the
eBPF executor's helper calls and XDP's in-place updates.
"""

from __future__ import annotations

import z3

from pfc.frontend import ir
from pfc.prove.frame import Reading, bv, u32

MASK16 = 0xFFFF


def words(value: z3.BitVecRef) -> z3.BitVecRef:
    """The sum of the 16-bit big-endian words of ``value`` (a multiple of 16 bits),
    in 32 bits (at most 8 words: no overflow)."""
    size = value.size()
    total = bv(0)
    for hi in range(size - 1, 0, -16):
        total = total + u32(z3.Extract(hi, hi - 15, value))
    return total


def fold(x: z3.BitVecRef) -> z3.BitVecRef:
    """The 32-bit ``x`` folded to 16 bits with end-around carries (32 bits wide): a
    value in 1..0xffff congruent to ``x`` mod 0xffff, 0 only for 0. Adders only: a
    solver handles it far better than a division."""
    x = (x & MASK16) + z3.LShR(x, 16)
    return (x & MASK16) + z3.LShR(x, 16)


def mod_ffff(x: z3.BitVecRef) -> z3.BitVecRef:
    """``x mod 0xffff`` (32 bits)."""
    y = fold(x)
    return z3.If(y == MASK16, bv(0), y)


def csum_update(old_csum: z3.BitVecRef, old: z3.BitVecRef, new: z3.BitVecRef) -> z3.BitVecRef:
    """``interp.csum_update`` on 16-bit ``old_csum``: (HC + sum(old) - sum(new)) mod
    0xffff, as 16 bits. ``old`` and ``new`` hold at most 9 words."""
    spare = 16 * MASK16  # a multiple of 0xffff above any sum(new)
    total = u32(old_csum) + words(old) + spare - words(new)
    return z3.Extract(15, 0, mod_ffff(total))


def _store(data: z3.ArrayRef, at: z3.BitVecRef, value: z3.BitVecRef) -> z3.ArrayRef:
    """``value`` (a multiple of 8 bits) written big-endian from ``at``."""
    size = value.size()
    for i in range(size // 8):
        data = z3.Store(data, at + i, z3.Extract(size - 1 - 8 * i, size - 8 - 8 * i, value))
    return data


def _put_csum(data: z3.ArrayRef, reading: Reading, at: z3.BitVecRef, old: z3.BitVecRef,
              new: z3.BitVecRef, zero: int | z3.BitVecRef) -> z3.ArrayRef:
    current = reading.frame.bytes_(at, 2)
    value = csum_update(current, old, new)
    zero_bv = bv(zero, 16) if isinstance(zero, int) else zero
    return _store(data, at, z3.If(value == 0, zero_bv, value))


def redirect(reading: Reading, action: ir.Redirect, proto: int | None) -> z3.ArrayRef:
    """The frame after ``action``, assuming the rule held (so the destination address
    of the target's family is present). The L4 checksum is updated for the address,
    then for the port: the same value as one update for both (ones' complement sums
    mod 0xffff), in the order every target's code takes."""
    f, l3, l4 = reading.frame, reading.l3, reading.l4
    version = action.address.version
    size = 4 if version == 4 else 16
    at = l3 + (16 if version == 4 else 24)
    old_addr = f.bytes_(at, size)
    new_addr = bv(int(action.address), 8 * size)
    data = _store(f.data, at, new_addr)
    if version == 4:
        data = _put_csum(data, reading, l3 + 10, old_addr, new_addr, 0)
    tcp = reading.l4proto == 6
    csum_at = z3.If(tcp, l4 + 16, l4 + 6)
    has_csum = z3.And(reading.l4_ok, z3.Or(tcp, reading.l4proto == 17), f.has(csum_at, 2))
    update = z3.And(has_csum, z3.Not(z3.And(z3.Not(tcp), f.u16(csum_at) == 0)))
    zero = z3.If(tcp, bv(0, 16), bv(MASK16, 16))
    csum = csum_update(f.u16(csum_at), old_addr, new_addr)
    csum = z3.If(csum == 0, zero, csum)
    if proto in (6, 17) and action.port is not None:
        writable = z3.And(reading.transport(proto), f.has(l4 + 2, 2))
        port = bv(action.port, 16)
        data = z3.If(writable, _store(data, l4 + 2, port), data)
        moved = csum_update(csum, f.u16(l4 + 2), port)
        csum = z3.If(writable, z3.If(moved == 0, zero, moved), csum)
    return z3.If(update, _store(data, csum_at, csum), data)


# ------------------------------------------------------------- kernel ones' complement

def csum_add(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    """The kernel's ``csum_add``: 32-bit add with end-around carry."""
    total = a + b
    return total + z3.If(z3.ULT(total, b), bv(1), bv(0))


def csum_fold(x: z3.BitVecRef) -> z3.BitVecRef:
    """The kernel's ``csum_fold``: 32 bits folded to 16, complemented (16 bits)."""
    x = (x & MASK16) + z3.LShR(x, 16)
    x = (x & MASK16) + z3.LShR(x, 16)
    return ~z3.Extract(15, 0, x)
