"""The meaning of a policy as a formula over one symbolic frame (z3 bit-vectors).

:func:`meaning` follows :mod:`pfc.oracle.interp` step by step (its module doc): the
family gate, the protocol keyword read raw, every match false when its field is
absent (negated or not), ``redirect`` needing a destination address of its family,
first terminal match decides, ``count`` rules that hold on the way are recorded. The
result gives, for every frame of the symbolic :class:`~pfc.prove.frame.Frame`:

- ``passes``: the verdict is pass;
- ``rule``: the deciding rule's index (``DEFAULT_RULE`` for the default);
- ``counted``: per count rule, whether it held (and so counted the frame);
- ``out``: the frame leaving the hook (``rewrite.redirect`` for a redirect, else the
  frame itself).

``tests/prove/test_formula.py`` checks formula(frame) == interpreter(frame) on
generated policies and frames.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import z3

from pfc.frontend import ir
from pfc.frontend.ir import Family, Layer
from pfc.frontend.matches import merge_ranges
from pfc.prove import merge, rewrite
from pfc.prove.frame import Frame, Reading, bv, concrete, u32

DEFAULT_RULE = 0xFFFFFFFF  # ``rule`` when the default decided
TRUE, FALSE = z3.BoolVal(True), z3.BoolVal(False)


@dataclass(frozen=True)
class Meaning:
    passes: z3.BoolRef
    rule: z3.BitVecRef
    counted: dict[int, z3.BoolRef]
    out: z3.ArrayRef
    merged: dict[int, int] = field(default_factory=dict)  # rule index -> its run's
    # (``diff`` encodes runs of rules as one, :mod:`pfc.prove.merge`)

    def decider(self, index: int | None) -> int:
        """What ``rule`` is when rule ``index`` (None: the default) decided."""
        if index is None:
            return DEFAULT_RULE
        return self.merged.get(index, index)


def meaning(policy: ir.Policy, reading: Reading,
            rules: Iterable[ir.Rule] | None = None) -> Meaning:
    """The policy's meaning on ``reading``'s frame. ``rules`` (default: all) is a
    subset, in order, for callers that proved the others cannot hold (``diff``).
    Rules that hold on the same frames are encoded once per ``reading``."""
    chosen = list(policy.rules if rules is None else rules)
    holds = [reading.cached(("rule", merge.signature(r)), lambda r=r: rule_holds(r, reading))
             for r in chosen]
    passes = z3.BoolVal(policy.default is ir.Verdict.PASS)
    decided, out = bv(DEFAULT_RULE), reading.frame.data
    for rule, held in reversed(list(zip(chosen, holds, strict=True))):
        if not rule.terminal:
            continue
        passes = z3.If(held, z3.BoolVal(not isinstance(rule.action, ir.Drop)), passes)
        decided = z3.If(held, bv(rule.index), decided)
        if isinstance(rule.action, ir.Redirect):
            out = z3.If(held, rewrite.redirect(reading, rule.action, rule.proto), out)
        elif not out.eq(reading.frame.data):
            out = z3.If(held, reading.frame.data, out)
    counted, reached = {}, TRUE
    for rule, held in zip(chosen, holds, strict=True):
        if rule.terminal:
            reached = z3.And(reached, z3.Not(held))
        else:
            counted[rule.index] = z3.And(reached, held)
    return Meaning(passes, decided, counted, out)


# ------------------------------------------------------------------------------ rules

def rule_holds(rule: ir.Rule, reading: Reading) -> z3.BoolRef:
    """Whether ``rule`` holds on the frame (interp's steps 1-4)."""
    terms = [family_gate(rule.family, reading)]
    if rule.proto is not None:
        terms.append(reading.cached(("proto", rule.proto), lambda: z3.And(
            reading.l4proto_present, reading.l4proto == rule.proto)))
    terms += [match_holds(m, rule.proto, reading) for m in rule.matches]
    if isinstance(rule.action, ir.Redirect):
        version = rule.action.address.version
        end = 20 if version == 4 else 40
        terms.append(z3.And(reading.is_version(version),
                            reading.frame.has(reading.l3 + end, 0)))
    return z3.And(*terms)


def family_gate(family: Family, reading: Reading) -> z3.BoolRef:
    if family is Family.ANY:
        return TRUE
    if family is Family.IP4:
        return reading.is4
    if family is Family.IP6:
        return reading.is6
    return z3.Or(reading.is4, reading.is6)


def _present(value: tuple[z3.BoolRef, z3.ExprRef] | None, test, negated: bool) -> z3.BoolRef:
    """``_when_present``: the field is there and ``test(value) != negated``."""
    if value is None:
        return FALSE
    present, v = value
    held = test(v)
    return z3.And(present, z3.Not(held) if negated else held)


def match_holds(match: ir.Match, proto: int | None, reading: Reading) -> z3.BoolRef:
    if isinstance(match, ir.AddrMatch):
        return addr_holds(match, reading)
    if isinstance(match, ir.IntMatch):
        ranges = match.ranges
        return _present(int_field(match.field, proto, reading),
                        lambda v: in_ranges(v, ranges), match.negated)
    if isinstance(match, ir.FlagsMatch):
        must, clear = match.set, match.clear
        return _present(int_field("flags", proto, reading),
                        lambda f: z3.And(f & must == must, f & clear == 0), match.negated)
    if isinstance(match, ir.FragMatch):
        return _present(int_field("frag", proto, reading), lambda v: v != 0, match.negated)
    if isinstance(match, ir.PayloadMatch):
        return _present(payload(match, proto, reading), lambda v: v == int.from_bytes(
            match.data, "big"), match.negated)
    raise TypeError(f"not a match: {match!r}")


def in_ranges(value: z3.BitVecRef, ranges: Iterable[tuple[int, int]]) -> z3.BoolRef:
    terms = []
    for lo, hi in ranges:
        if lo == hi:
            terms.append(value == lo)
        elif lo == 0:
            terms.append(z3.ULE(value, hi))
        else:
            terms.append(z3.And(z3.UGE(value, lo), z3.ULE(value, hi)))
    return z3.Or(*terms) if terms else FALSE


# ----------------------------------------------------------------------------- fields

# name -> (offset into L3, size) for IPv4 and IPv6 (packets._IP4/_IP6).
IP4 = {"src": (12, 4), "dst": (16, 4), "ttl": (8, 1), "len": (2, 2), "proto": (9, 1),
       "frag": (6, 2)}
IP6 = {"src": (8, 16), "dst": (24, 16), "ttl": (7, 1), "len": (4, 2), "proto": (6, 1)}
TRANSPORT = {"sport": (0, 2, (6, 17)), "dport": (2, 2, (6, 17)), "flags": (13, 1, (6,)),
             "icmp-type": (0, 1, (1, 58)), "icmp-code": (1, 1, (1, 58))}


def ip_raw(name: str, version: int, reading: Reading) -> tuple[z3.BoolRef, z3.BitVecRef] | None:
    """(present, raw bytes) of IP field ``name`` for one version, or None."""
    return reading.cached(("ip", name, version), lambda: _ip_raw(name, version, reading))


def _ip_raw(name: str, version: int, reading: Reading):
    table = IP4 if version == 4 else IP6
    if name not in table:
        return None
    off, size = table[name]
    f, at = reading.frame, reading.l3 + off
    return z3.And(reading.is_version(version), f.has(at, size)), f.bytes_(at, size)


def _ip_value(name: str, version: int, raw: z3.BitVecRef) -> z3.BitVecRef:
    value = u32(raw)
    if name == "frag":
        return value & 0x3FFF
    if name == "len" and version == 6:
        return value + 40
    return value


def int_field(name: str, proto: int | None,
              reading: Reading) -> tuple[z3.BoolRef, z3.BitVecRef] | None:
    """(present, value as 32 bits) of an integer field, or None (never present)."""
    return reading.cached(("int", name, proto), lambda: _int_field(name, proto, reading))


def _int_field(name: str, proto: int | None, reading: Reading):
    if ir.FIELDS[name].layer is Layer.IP:
        parts = []
        for version in (4, 6):
            got = ip_raw(name, version, reading)
            if got is not None:
                parts.append((got[0], _ip_value(name, version, got[1])))
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        (p4, v4), (p6, v6) = parts
        return z3.Or(p4, p6), z3.If(reading.typed4, v4, v6)
    if proto is None or name not in TRANSPORT or proto not in TRANSPORT[name][2]:
        return None
    off, size, _ = TRANSPORT[name]
    f, at = reading.frame, reading.l4 + off
    return z3.And(reading.transport(proto), f.has(at, size)), u32(f.bytes_(at, size))


def payload(match: ir.PayloadMatch, proto: int | None,
            reading: Reading) -> tuple[z3.BoolRef, z3.BitVecRef] | None:
    if proto not in (6, 17):
        return None
    ok, start = reading.cached(("payload", proto), lambda: reading.payload_start(proto))
    at, n = start + match.offset, len(match.data)
    return z3.And(ok, reading.frame.has(at, n)), reading.frame.bytes_(at, n)


def addr_holds(match: ir.AddrMatch, reading: Reading) -> z3.BoolRef:
    """Per family: the address is present and (not) in that family's prefixes."""
    terms = []
    for version in (4, 6):
        present, raw = ip_raw(match.field, version, reading)
        inside = prefixes_hold(raw, [p for p in match.prefixes if p.version == version],
                               _tops(reading, match.field, version, raw),
                               few=None if reading.address_sets == "intervals" else ANY_NUMBER)
        terms.append(z3.And(present, z3.Not(inside) if match.negated else inside))
    return z3.Or(*terms)


def _tops(reading: Reading, name: str, version: int, raw: z3.BitVecRef):
    """The address's top ``n`` bits, one term per length for every rule."""
    size = raw.size()
    return lambda n: reading.cached(("top", name, version, n),
                                    lambda: z3.Extract(size - 1, size - n, raw))


def prefixes_hold(addr: z3.BitVecRef, prefixes: list[ir.IPNetwork],
                  top=None, few: int | None = None) -> z3.BoolRef:
    """``addr`` lies in one of ``prefixes`` (all of its family). Up to ``few``
    prefixes (default ``FEW_PREFIXES``): one equality of the top
    bits each; more: the merged address intervals, each as ``start <= addr < end``
    (as interval sets hold them: the artifacts' own form). ``top(n)``: the address's
    top ``n`` bits (a cache; default: extracted here)."""
    if any(net.prefixlen == 0 for net in prefixes):
        return TRUE
    bits = addr.size()
    if len(prefixes) <= (FEW_PREFIXES if few is None else few):
        top = top or (lambda n: z3.Extract(bits - 1, bits - n, addr))
        return any_of([equals(top(n.prefixlen), int(n.network_address) >> (bits - n.prefixlen))
                       for n in prefixes])
    terms = []
    for lo, hi in intervals(prefixes):
        inside = z3.UGE(addr, lo) if lo else TRUE
        terms.append(inside if hi == 2 ** bits - 1 else z3.And(inside, z3.ULT(addr, hi + 1)))
    return z3.Or(*terms)


FEW_PREFIXES = 8
ANY_NUMBER = 1 << 62


def equals(expr: z3.BitVecRef, value: int) -> z3.BoolRef:
    """``expr == value`` through z3's C API: ``==`` and ``z3.Or`` check and coerce each
    argument in Python, 10 of the 18 s ``pfc diff`` took to state a 50,000-address
    list."""
    ctx = expr.ctx
    num = z3.Z3_mk_numeral(ctx.ref(), str(value), expr.sort().ast)
    return z3.BoolRef(z3.Z3_mk_eq(ctx.ref(), expr.as_ast(), num), ctx)


def any_of(terms: list[z3.BoolRef]) -> z3.BoolRef:
    """``z3.Or(*terms)`` of boolean terms, without its per-argument checks."""
    if len(terms) == 1:
        return terms[0]
    if not terms:
        return z3.BoolVal(False)
    ctx = terms[0].ctx
    args = (z3.Ast * len(terms))(*[t.as_ast() for t in terms])
    return z3.BoolRef(z3.Z3_mk_or(ctx.ref(), len(terms), args), ctx)


def intervals(prefixes: list[ir.IPNetwork]) -> tuple[tuple[int, int], ...]:
    """The prefixes as merged inclusive address intervals, in order."""
    return merge_ranges([(int(n.network_address), int(n.broadcast_address))
                         for n in prefixes])



# --------------------------------------------------------------------- concrete frames

@dataclass(frozen=True)
class Concrete:
    """A :class:`Meaning` evaluated on one concrete frame."""

    passes: bool
    rule: int | None
    counted: tuple[int, ...]
    out: bytes


def evaluate(m: Meaning, frame: Frame, data: bytes) -> Concrete:
    """``m`` on the frame ``data`` (z3's simplifier, no solver): what the tests compare
    with the interpreter's :class:`~pfc.oracle.interp.Outcome`."""
    sub = concrete(frame, data)

    def value(expr: z3.ExprRef) -> z3.ExprRef:
        return z3.simplify(z3.substitute(expr, *sub))

    rule = value(m.rule).as_long()
    counted = tuple(i for i, held in m.counted.items() if z3.is_true(value(held)))
    return Concrete(z3.is_true(value(m.passes)), None if rule == DEFAULT_RULE else rule,
                    counted, array_bytes(value(m.out), len(data)))


def array_bytes(array: z3.ExprRef, n: int) -> bytes:
    """The first ``n`` bytes of a concrete array (``Store`` over ``K``)."""
    written: dict[int, int] = {}
    while z3.is_store(array):
        written.setdefault(array.arg(1).as_long(), array.arg(2).as_long())
        array = array.arg(0)
    base = array.arg(0).as_long() if z3.is_const_array(array) else 0
    return bytes(written.get(i, base) for i in range(n))
