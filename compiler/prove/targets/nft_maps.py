"""nf_tables sets, maps and verdict maps: elements as the kernel lists them back, keys
as the registers hold them, lookups as the set backends decide them.

Registers (``nft_parse_register``): ``reg 1``-``reg 4`` are the 16-byte registers,
32-bit slots 4, 8, 12, 16; ``reg 8``-``reg 23`` the 32-bit slots 4-19. A value is kept
at the slot it was written to, with its width; a write drops every value it overlaps.
A lookup reads the set's key length from its first slot on: one value per field
(a concatenation's fields each start on a slot), a field narrower than its slots
padded with zeros, which payload and meta loads write (``nft_payload_eval`` zeroes
the last slot, ``nft_reg_store8``/``16`` the whole one); a key made of anything
else is refused.

Elements (``nft --debug=netlink``: ``element KEY [- KEY_END] : [VERDICT] FLAGS
[end]``), and what a lookup finds:

- with a key end (pipapo, concatenated intervals): the first element, in the order
  the kernel lists them (its rule index order, the order ``nft_pipapo_lookup`` takes
  the first match in), whose every field lies between its start and end fields,
  compared big-endian over the field's own bytes (pipapo skips the padding);
- interval elements (rbtree, flag 1 marks an interval end, the key after the
  interval's last): the greatest element at or below the key, when it starts an
  interval; where an end and a start share a key (adjacent intervals, which nft
  does not merge) the start is the greater;
- otherwise (hash, bitmap): the element equal to the key.

A verdict map's hit is that element's verdict; a miss ends the rule (``NFT_BREAK``).
Maps with data other than verdicts are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import z3

from pfc.prove.frame import bv
from pfc.prove.targets.cbpf import Unsupported


@dataclass(frozen=True)
class Element:
    key: bytes
    end: bytes | None  # pipapo's key end
    flags: int
    verdict: tuple[str, str | None] | None  # ("jump", "r3"), ("accept", None)


@dataclass(frozen=True)
class Reg:
    value: z3.BitVecRef
    padded: bool = False  # the rest of its last slot is zero


def words(text: str) -> bytes:
    """``0x0240a8c0 0x...`` or ``0240a8c0 ...``: host-order (little-endian) u32 words
    as libnftnl prints them, back to the bytes they hold."""
    return b"".join(int(w, 16).to_bytes(4, "little") for w in text.split())


_WORDS = r"((?:[0-9a-f]{8} ?)+)"
ELEMENT = re.compile(r"^\s*element " + _WORDS + r"\s*(?:- " + _WORDS + r"\s*)?: (.*?)"
                     r"(\d+) \[end\]\s*(.*)$")
_VERDICT = re.compile(r"(accept|drop|continue|return) |(jump|goto) -> (\S+) ")


def parse_element(line: str) -> Element:
    m = ELEMENT.match(line)
    if m is None:
        raise Unsupported(f"set element not read: {line.strip()}")
    data, rest = m.group(3), m.group(5).strip()
    if rest and not rest.startswith("userdata = "):  # comments and flags nft keeps
        raise Unsupported(f"set element with expressions: {line.strip()}")
    verdict = None
    if data:
        v = _VERDICT.fullmatch(data)
        if v is None:
            raise Unsupported(f"maps with data other than verdicts: {line.strip()}")
        verdict = (v.group(1), None) if v.group(1) else (v.group(2), v.group(3))
    end = words(m.group(2)) if m.group(2) else None
    return Element(words(m.group(1)), end, int(m.group(4)), verdict)


# -------------------------------------------------------------------- registers

def slot(n: str | int) -> int:
    n = int(n)
    if 1 <= n <= 4:
        return 4 * n
    if 8 <= n <= 23:
        return n - 4
    raise Unsupported(f"register {n}")


def span(value: z3.BitVecRef) -> int:
    return -(-value.size() // 32)


def written(regs: dict[int, Reg], n: str | int, reg: Reg) -> dict[int, Reg]:
    at = slot(n)
    top = at + span(reg.value)
    kept = {s: r for s, r in regs.items() if s + span(r.value) <= at or s >= top}
    return kept | {at: reg}


def key_fields(regs: dict[int, Reg], n: str, length: int) -> list[z3.BitVecRef]:
    """The values a lookup's key of ``length`` bytes is made of, from register ``n``."""
    at, top, fields = slot(n), slot(n) + -(-length // 4), []
    while at < top:
        reg = regs.get(at)
        if reg is None:
            raise Unsupported(f"a set key from slot {at}, which holds no value of its own")
        fields.append(reg.value)
        at += span(reg.value)
    if at != top:
        raise Unsupported("a set key that ends inside a register value")
    if len(fields) > 1 and any(f.size() % 32 and not regs[s].padded
                               for s, f in _slots(regs, slot(n), fields)):
        raise Unsupported("a concatenation field whose padding is not known to be zero")
    return fields


def _slots(regs: dict[int, Reg], at: int, fields: list[z3.BitVecRef]):
    for f in fields:
        yield at, f
        at += span(f)


# ---------------------------------------------------------------------- lookups

def lookup(fields: list[z3.BitVecRef], elements: list[Element]):
    """(found, [(condition, verdict)]): the conditions are disjoint, one per element
    that can be found first."""
    if any(e.end is not None for e in elements):
        return _pipapo(fields, elements)
    key = fields[0] if len(fields) == 1 else z3.Concat(*[_padded(f) for f in fields])
    width = key.size() // 8
    if any(e.flags & 1 for e in elements):
        return _rbtree(key, width, elements)
    hits = [(key == _int(e.key[:width]), e.verdict) for e in elements]
    return (z3.Or(*[h for h, _ in hits]) if hits else z3.BoolVal(False)), hits


def _int(data: bytes) -> int:
    return int.from_bytes(data, "big")


def _padded(f: z3.BitVecRef) -> z3.BitVecRef:
    pad = 32 * span(f) - f.size()
    return z3.Concat(f, bv(0, pad)) if pad else f


def _rbtree(key, width: int, elements: list[Element]):
    # An interval's end (flag 1) is the key after its last one, so where two intervals
    # meet (203.0.113.10 and .11: .10 starts, .11 ends it and starts the next, .12
    # ends) an end and a start share a key; the start holds there, so the end sorts
    # first (the kernel lists them the other way round, highest key first).
    keyed = sorted(((_int(e.key[:width]), e) for e in elements),
                   key=lambda p: (p[0], not p[1].flags & 1))
    out = []
    for i, (start, e) in enumerate(keyed):
        if e.flags & 1:
            continue
        end = keyed[i + 1][0] if i + 1 < len(keyed) else None
        inside = z3.UGE(key, start) if start else z3.BoolVal(True)
        out.append((inside if end is None else z3.And(inside, z3.ULT(key, end)), e.verdict))
    return (z3.Or(*[c for c, _ in out]) if out else z3.BoolVal(False)), out


def _pipapo(fields: list[z3.BitVecRef], elements: list[Element]):
    if any(e.end is None for e in elements):
        raise Unsupported("a set with and without key ends")
    if disjoint([_bounds(fields, e) for e in elements]):  # the first match is the match
        hits = [(z3.And(*_box(fields, e)), e.verdict) for e in elements]
        return z3.Or(*[h for h, _ in hits]), hits
    out, before = [], z3.BoolVal(False)
    for e in elements:
        hit = z3.And(*_box(fields, e))
        out.append((z3.And(hit, z3.Not(before)), e.verdict))
        before = z3.Or(before, hit)
    return before, out


def _bounds(fields: list[z3.BitVecRef], e: Element) -> list[tuple[int, int]]:
    out, at = [], 0
    for f in fields:
        n = f.size() // 8
        out.append((_int(e.key[at:at + n]), _int(e.end[at:at + n])))
        at += 4 * span(f)
    return out


def disjoint(boxes: list[list[tuple[int, int]]]) -> bool:
    """No two boxes meet (decided on the constants: a sweep along the first field)."""
    order = sorted(boxes, key=lambda b: b[0][0])
    for i, box in enumerate(order):
        for other in order[i + 1:]:
            if other[0][0] > box[0][1]:
                break
            if all(lo <= hi2 and lo2 <= hi for (lo, hi), (lo2, hi2) in
                   zip(box, other, strict=True)):
                return False
    return True


def _box(fields: list[z3.BitVecRef], e: Element) -> list[z3.BoolRef]:
    terms = []
    for f, (lo, hi) in zip(fields, _bounds(fields, e), strict=True):
        if lo == hi:
            terms.append(f == lo)
        else:
            if lo:
                terms.append(z3.UGE(f, lo))
            if hi != (1 << f.size()) - 1:
                terms.append(z3.ULE(f, hi))
    return terms


def by_verdict(choices) -> dict:
    """The conditions of a lookup's elements, one per distinct verdict."""
    grouped: dict = {}
    for cond, verdict in choices:
        grouped.setdefault(verdict, []).append(cond)
    return {v: z3.Or(*conds) for v, conds in grouped.items()}


def swapped(value: z3.BitVecRef, size: int, length: int, same: bool) -> z3.BitVecRef:
    """``nft_byteorder_eval`` on a little-endian host (hton and ntoh alike): ``length
    // size`` units of ``size`` bytes reversed; the bytes after them left as they were
    (``same``: the source register is the destination) or refused."""
    n = value.size() // 8
    done = (length // size) * size
    if size not in (2, 4, 8) or length > n or (not same and done != n):
        raise Unsupported(f"byteorder of {length} bytes in units of {size}")
    raw = [z3.Extract(8 * (n - i) - 1, 8 * (n - i - 1), value) for i in range(n)]
    for at in range(0, done, size):
        raw[at:at + size] = reversed(raw[at:at + size])
    return z3.simplify(raw[0] if n == 1 else z3.Concat(*raw))
