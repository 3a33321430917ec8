"""One symbolic Ethernet frame, and how a frame is read (semantics.md "Reading a frame").

A frame is a z3 array ``data`` from 32-bit offsets to bytes and a 32-bit ``length``
bounded by ``bound`` (the frame length bound of every proof). Only bytes below
``length`` are the frame; every read of the encoding is guarded by a presence test,
so bytes past the end never decide anything.

:class:`Reading` mirrors :func:`pfc.oracle.packets.read_frame`: where L3 and the
transport header start, which IP version the EtherType says, whether the transport
header is one the kernel accepts. ``skip_tag`` is the same switch as there: False for
hooks that see the frame after the kernel removed the outer VLAN tag.

Arithmetic is 32-bit: offsets never pass 2**17 (an IPv6 payload length plus headers),
so ``has(off, n)`` (``off + n <= length``) cannot wrap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

import z3

from pfc.prove.worker import check

BV8, BV32 = z3.BitVecSort(8), z3.BitVecSort(32)
DEFAULT_BOUND = 1518  # an untagged Ethernet frame of MTU 1500, or a tagged one of 1496
ETH_HLEN = 14
TPIDS = (0x8100, 0x88A8)
ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD


def bv(value: int, bits: int = 32) -> z3.BitVecRef:
    return z3.BitVecVal(value, bits)


def u32(expr: z3.BitVecRef) -> z3.BitVecRef:
    """``expr`` zero-extended (or cut) to 32 bits."""
    size = expr.size()
    if size == 32:
        return expr
    return z3.ZeroExt(32 - size, expr) if size < 32 else z3.Extract(31, 0, expr)


def offset(value: int | z3.BitVecRef) -> z3.BitVecRef:
    return bv(value) if isinstance(value, int) else u32(value)


@dataclass(frozen=True)
class Frame:
    """A symbolic frame: ``data[i]`` for ``i < length``; ``length <= bound``."""

    data: z3.ArrayRef
    length: z3.BitVecRef
    bound: int = DEFAULT_BOUND

    @staticmethod
    def fresh(name: str = "frame", bound: int = DEFAULT_BOUND) -> Frame:
        return Frame(z3.Array(name, BV32, BV8), z3.BitVec(f"{name}_len", 32), bound)

    def valid(self) -> z3.BoolRef:
        return z3.ULE(self.length, self.bound)

    def byte(self, at: int | z3.BitVecRef) -> z3.BitVecRef:
        return z3.Select(self.data, offset(at))

    def bytes_(self, at: int | z3.BitVecRef, n: int) -> z3.BitVecRef:
        """``n`` bytes from ``at`` as one big-endian bit-vector (network order)."""
        parts = [self.byte(offset(at) + i) for i in range(n)]
        return parts[0] if n == 1 else z3.Concat(*parts)

    def u16(self, at: int | z3.BitVecRef) -> z3.BitVecRef:
        return self.bytes_(at, 2)

    def has(self, at: int | z3.BitVecRef, n: int) -> z3.BoolRef:
        """All ``n`` bytes from ``at`` lie inside the frame."""
        return z3.ULE(offset(at) + n, self.length)


@dataclass(frozen=True)
class Reading:
    """A frame read once, as ``packets.read_frame(frame, skip_tag)`` reads it."""

    frame: Frame
    skip_tag: bool = True
    # how a long address list is encoded (``formula.prefixes_hold``): "intervals" (the
    # artifacts' own form, for proofs against them) or "prefixes" (equalities of top
    # bits: 2x faster to solve when both sides are policies, as in ``diff``)
    address_sets: str = "intervals"
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # field reads

    def cached(self, key: tuple, build):
        """``build()`` once per ``key``: every rule reads a field through one term."""
        got = self.memo.get(key)
        if got is None:
            got = self.memo[key] = build()
        return got

    @cached_property
    def tagged(self) -> z3.BoolRef:
        if not self.skip_tag:
            return z3.BoolVal(False)
        f = self.frame
        return z3.And(f.has(0, ETH_HLEN), z3.Or(*[f.u16(12) == t for t in TPIDS]))

    @cached_property
    def l3_known(self) -> z3.BoolRef:
        """The frame holds an EtherType (after a skipped tag)."""
        f = self.frame
        return z3.And(f.has(0, ETH_HLEN), z3.Or(z3.Not(self.tagged), f.has(0, 18)))

    @cached_property
    def l3(self) -> z3.BitVecRef:
        return z3.If(self.tagged, bv(18), bv(ETH_HLEN))

    @cached_property
    def ethertype(self) -> z3.BitVecRef:
        return z3.If(self.tagged, self.frame.u16(16), self.frame.u16(12))

    @cached_property
    def is4(self) -> z3.BoolRef:
        return z3.And(self.l3_known, self.typed4)

    @cached_property
    def typed4(self) -> z3.BoolRef:
        """The EtherType says IPv4, whether or not the frame holds it: the choice
        between IPv4 and IPv6 offsets (meaningful only where ``is4`` or ``is6`` holds),
        so that an offset does not depend on the frame length and reads at the
        same place share one term on both sides of a proof."""
        return self.ethertype == ETH_P_IP

    @cached_property
    def is6(self) -> z3.BoolRef:
        return z3.And(self.l3_known, self.ethertype == ETH_P_IPV6)

    def is_version(self, version: int) -> z3.BoolRef:
        return self.is4 if version == 4 else self.is6

    def l3_len(self) -> z3.BitVecRef:
        return self.frame.length - self.l3

    # -- transport ------------------------------------------------------------------

    @cached_property
    def ihl4(self) -> z3.BitVecRef:
        """IPv4 header length in bytes (IHL * 4), 32 bits."""
        return u32(self.frame.byte(self.l3) & 0x0F) * 4

    @cached_property
    def l4_ok4(self) -> z3.BoolRef:
        """``packets._ipv4_l4``: an IPv4 header the kernel accepts, first fragment."""
        f, l3 = self.frame, self.l3
        total = u32(f.u16(l3 + 2))
        return z3.And(self.is4, f.has(l3, 20), z3.LShR(f.byte(l3), 4) == 4,
                      z3.UGE(self.ihl4, 20), z3.ULE(self.ihl4, total),
                      z3.ULE(total, self.l3_len()), f.u16(l3 + 6) & 0x1FFF == 0)

    @cached_property
    def l4_ok6(self) -> z3.BoolRef:
        """``packets._ipv6_l4``: version 6, 40 + payload length <= len(L3)."""
        f, l3 = self.frame, self.l3
        return z3.And(self.is6, f.has(l3, 40), z3.LShR(f.byte(l3), 4) == 6,
                      z3.ULE(40 + u32(f.u16(l3 + 4)), self.l3_len()))

    @cached_property
    def l4(self) -> z3.BitVecRef:
        """The transport header's offset (meaningful when ``l4_ok``)."""
        return z3.If(self.typed4, self.l3 + self.ihl4, self.l3 + 40)

    @cached_property
    def l4_ok(self) -> z3.BoolRef:
        return z3.Or(self.l4_ok4, self.l4_ok6)

    @cached_property
    def l4proto(self) -> z3.BitVecRef:
        """IPv4 protocol byte / IPv6 Next Header (meaningful when present)."""
        return z3.If(self.typed4, self.frame.byte(self.l3 + 9), self.frame.byte(self.l3 + 6))

    @cached_property
    def l4proto_present(self) -> z3.BoolRef:
        f = self.frame
        return z3.Or(z3.And(self.is4, f.has(self.l3 + 9, 1)),
                     z3.And(self.is6, f.has(self.l3 + 6, 1)))

    def transport(self, proto: int) -> z3.BoolRef:
        """The transport header is readable and its protocol is ``proto``."""
        return z3.And(self.l4_ok, self.l4proto == proto)

    def payload_start(self, proto: int) -> tuple[z3.BoolRef, z3.BitVecRef]:
        """(payload exists, its offset): UDP 8 bytes in; TCP data offset * 4 (>= 5)."""
        if proto == 17:
            return self.transport(proto), self.l4 + 8
        f = self.frame
        doff = u32(z3.LShR(f.byte(self.l4 + 12), 4))
        ok = z3.And(self.transport(proto), f.has(self.l4 + 12, 1), z3.UGE(doff, 5))
        return ok, self.l4 + doff * 4

    @cached_property
    def counted_bytes(self) -> z3.BitVecRef:
        """``packets.counted_bytes``: length after L2 (0 without an EtherType)."""
        return z3.If(self.l3_known, self.frame.length - self.l3, bv(0))


@dataclass(frozen=True)
class Behaviour:
    """What an artifact does to the symbolic frame: ``passes``; ``out`` the frame
    leaving the hook (None: unchanged); ``counted`` per count rule index, whether its
    counter moves (None: the target's counters are not modelled)."""

    passes: z3.BoolRef
    out: z3.ArrayRef | None = None
    counted: dict[int, z3.BoolRef] | None = None
    valid: z3.BoolRef | None = None  # the artifact gives a verdict at all (eBPF returns)


def concrete(frame: Frame, data: bytes) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
    """Substitution pairs that make ``frame`` the concrete ``data``."""
    array = z3.K(BV32, bv(0, 8))
    for i, b in enumerate(data):
        if b:
            array = z3.Store(array, bv(i), bv(b, 8))
    return [(frame.data, array), (frame.length, bv(len(data)))]


def frame_bytes(model: z3.ModelRef, frame: Frame) -> bytes:
    """The concrete frame a model gives (its length, then each byte)."""
    n = model.eval(frame.length, model_completion=True).as_long()
    return bytes(model.eval(frame.byte(i), model_completion=True).as_long() for i in range(n))


def select(array: z3.ExprRef, at: z3.BitVecRef) -> z3.BitVecRef:
    """``array[at]`` with the read pushed through every ``Store`` and ``If`` of an
    output frame, down to the input frame's bytes: no array equalities reach the
    solver (:func:`solver` eliminates arrays only from plain reads)."""
    memo: dict[int, z3.BitVecRef] = {}

    def go(a: z3.ExprRef) -> z3.BitVecRef:
        key = a.get_id()
        if key in memo:
            return memo[key]
        if z3.is_store(a):
            got = z3.If(a.arg(1) == at, a.arg(2), go(a.arg(0)))
        elif z3.is_app_of(a, z3.Z3_OP_ITE):
            got = z3.If(a.arg(0), go(a.arg(1)), go(a.arg(2)))
        else:
            got = z3.Select(a, at)
        memo[key] = got
        return got
    return go(array)


def frames_differ(a: z3.ExprRef, b: z3.ExprRef, frame: Frame) -> z3.BoolRef:
    """Some byte of the frame differs between output frames ``a`` and ``b``."""
    if a.eq(b):
        return z3.BoolVal(False)
    at = z3.FreshConst(BV32, "at")
    return z3.And(z3.ULT(at, frame.length), select(a, at) != select(b, at))


def solver(light: bool = False) -> z3.Solver:
    """A solver for these formulas: arrays of plain reads become functions, then Ackermann's
    reduction and bit-blasting (20x faster than z3's default on a 440-prefix blocklist
    proof); ``check`` falls back to the default solver when the tactic gives up.
    ``light``: bit-blasting straight after simplification, without ``qfbv``'s
    preprocessing (its AIG rewriting, solve-eqs): for ``pfc diff``, whose formulas are
    policies against policies, and whose region search solves one formula again and
    again (``drop src $bl`` of 50,000 addresses: 35 s a search with ``qfbv``, 3 s
    without; the 1k- and 10k-rule benchmarks 20-30 % faster)."""
    return _Solver(LIGHT if light else _Solver.TACTIC)


LIGHT = ("simplify", "bvarray2uf", "ackermannize_bv", "simplify", "bit-blast", "sat")


def _plain_array(a: z3.ExprRef) -> bool:
    return z3.is_const(a) and a.decl().kind() == z3.Z3_OP_UNINTERPRETED


def _reads_of_writes(expr: z3.ExprRef) -> list[z3.ExprRef]:
    """The reads in ``expr`` of an array that is not an input (a ``Store``, an ``If``
    of arrays): a model's read of a frame it wrote (eBPF helpers, nft payload writes)."""
    seen, found, todo = set(), [], [expr]
    while todo:
        e = todo.pop()
        key = e.get_id()
        if key in seen:
            continue
        seen.add(key)
        if z3.is_select(e) and not _plain_array(e.arg(0)):
            found.append(e)
        if z3.is_app(e):
            todo.extend(e.children())
    return found


def reads_pushed(expr: z3.ExprRef) -> z3.ExprRef:
    """``expr`` with every read of a written frame pushed through its ``Store`` and
    ``If`` terms (:func:`select`) down to the input frame. The ``bvarray2uf`` tactic
    refuses reads of stores ("bit-vector size must be greater than zero"): without
    this, a proof of a rewriting artifact fell back to z3's default solver (the
    redirect proofs: 14-26 s each; with it, under 1 s)."""
    for _ in range(64):  # nested: a stored value that reads a written frame
        found = _reads_of_writes(expr)
        if not found:
            return expr
        expr = z3.substitute(expr, *[(r, select(r.arg(0), r.arg(1))) for r in found])
    return expr


def _left_ms(deadline: float | None) -> int:
    """The solver's timeout in ms until ``deadline`` (none: z3's largest)."""
    if deadline is None:
        return 4294967295
    return max(1, int((deadline - time.monotonic()) * 1000))


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


class _Solver:
    """The tactic's solver, and z3's default one only when the tactic gives up: built
    then from the constraints kept per scope (asserting a large formula into the
    default solver, and every push after that, cost about a second each: a tenth of
    ``pfc diff``'s time on a 50,000-address list)."""

    TACTIC = ("simplify", "bvarray2uf", "ackermannize_bv", "qfbv")

    def __init__(self, tactic: tuple[str, ...] = TACTIC) -> None:
        self.fast = z3.Then(*tactic).solver()
        self.scopes: list[list[z3.BoolRef]] = [[]]
        self.used = self.fast
        self.fell_back = ""  # why the tactic gave up, when it did

    def add(self, *constraints: z3.BoolRef) -> None:
        """Constraints that read written frames must come through :func:`reads_pushed`
        (``pfc prove`` does; ``diff``'s formulas read only the input frame)."""
        self.fast.add(*constraints)
        self.scopes[-1].extend(constraints)

    def push(self) -> None:
        self.fast.push()
        self.scopes.append([])

    def pop(self) -> None:
        self.fast.pop()
        self.scopes.pop()

    def check(self, timeout_ms: int = 0, fall_back: bool = True,
              deadline: float | None = None) -> z3.CheckSatResult:
        """sat, unsat, or (only with a timeout, a ``deadline`` (``time.monotonic()``) or
        without ``fall_back``) unknown."""
        self.used = self.fast
        self.fast.set("timeout", timeout_ms or _left_ms(deadline))
        found = check(self.fast)
        if found == z3.unknown and fall_back and not _past(deadline):
            self.fell_back = self.fast.reason_unknown()
            self.used = z3.Solver()
            self.used.add(*[c for scope in self.scopes for c in scope])
            self.used.set("timeout", _left_ms(deadline))
            found = check(self.used)
        return found

    def model(self) -> z3.ModelRef:
        return self.used.model()

    def reason_unknown(self) -> str:
        return self.used.reason_unknown()
