"""Classic BPF as a formula: symbolic execution of the instructions, loop-free.

Classic BPF jumps only forward, so one pass in instruction order visits every
instruction after all its predecessors: the state on entry (the path condition and A,
X, M[0..15]) is the merge of what every incoming edge brings (``If`` on the edges'
conditions). A ``ret`` adds its path condition and value to the result.

Semantics as the kernel runs a socket filter (``bpf_convert_filter``, Linux 6.x):

- a packet load (``ld``/``ldh``/``ldb`` ``[k]`` or ``[x + k]``, ``ldxb 4*([k]&0xf)``)
  whose bytes are not all inside the frame ends the program with return 0;
  ``[x + k]`` wraps in 32 bits, and a negative offset reads from the link-layer header
  (``SKF_LL_OFF``) or the network header at byte 14 (``SKF_NET_OFF``), else fails;
  ancillary loads (``SKF_AD_OFF``) are not modelled and are refused;
- ``#pktlen`` is the frame's length; division or modulo by X = 0 returns 0; shifts by
  X use X & 31 (the kernel masks them); scratch memory starts at 0;
- a non-zero return keeps the frame (pass), 0 drops it.

Programs are read from every format ``pfc compile --target cbpf`` writes
(:func:`parse`): ``asm`` (``tcpdump -d``), ``c`` (``-dd``), ``ddd`` and ``bin``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import z3

from pfc.prove.frame import Frame, bv

Insn = tuple[int, int, int, int]
SKF_AD_OFF, SKF_NET_OFF, SKF_LL_OFF = -0x1000, -0x100000, -0x200000
NETWORK_HEADER = 14


class Unsupported(ValueError):
    """A program the model cannot judge (an ancillary load, a bad jump)."""


class Invalid(Unsupported):
    """A program the kernel refuses too (``bpf_check_classic``, the eBPF verifier):
    there is nothing to prove; the mutation run checks the kernel's refusal."""


# net/core/filter.c ``codes[]``: every opcode ``bpf_check_classic`` takes
VALID = {0x04, 0x0C, 0x14, 0x1C, 0x24, 0x2C, 0x34, 0x3C, 0x94, 0x9C, 0x54, 0x5C, 0x44,
         0x4C, 0xA4, 0xAC, 0x64, 0x6C, 0x74, 0x7C, 0x84, 0x20, 0x28, 0x30, 0x80, 0x40,
         0x48, 0x50, 0x00, 0x60, 0x81, 0xB1, 0x01, 0x61, 0x02, 0x03, 0x07, 0x87, 0x06,
         0x16, 0x05, 0x15, 0x1D, 0x35, 0x3D, 0x25, 0x2D, 0x45, 0x4D}
MEMWORDS = 16


def check_classic(insns: list[Insn]) -> None:
    """Raise :class:`Invalid` where ``bpf_check_classic`` refuses the program: an
    opcode outside its table, a division by constant 0, a shift by 32 or more, a
    scratch slot out of range or read before every path wrote it, a jump out of the
    program, a last instruction that is not a return."""
    n = len(insns)
    if not 0 < n <= 4096:
        raise Invalid(f"a program of {n} instructions")
    written: list[int | None] = [None] * n  # slots written on every path to each insn
    written[0] = 0
    for pc, (code, jt, jf, k) in enumerate(insns):
        if code not in VALID:
            raise Invalid(f"opcode {code:#x} at {pc}: the kernel refuses it")
        if code in (0x34, 0x94) and k == 0 or code in (0x64, 0x74) and k >= 32:
            raise Invalid(f"instruction {pc}: division by 0 or shift by {k}")
        if code in (0x60, 0x61, 0x02, 0x03) and k >= MEMWORDS:
            raise Invalid(f"instruction {pc}: scratch slot {k}")
        mask = written[pc]
        if mask is None:
            continue  # unreachable: the kernel checks nothing more here
        if code in (0x60, 0x61) and not mask >> k & 1:
            raise Invalid(f"instruction {pc} reads scratch slot {k} before it is written")
        if code in (0x02, 0x03):
            mask |= 1 << k
        for target in _targets(pc, code, jt, jf, k):
            if not pc < target < n:
                raise Invalid(f"instruction {pc} jumps to {target}, outside the program")
            written[target] = mask if written[target] is None else written[target] & mask
    if insns[-1][0] not in (0x06, 0x16):
        raise Invalid("the last instruction is not a return")


def _targets(pc: int, code: int, jt: int, jf: int, k: int) -> tuple[int, ...]:
    if code & 0x07 == 0x06:
        return ()
    if code == 0x05:
        return (pc + 1 + k,)
    if code & 0x07 == 0x05:
        return (pc + 1 + jt, pc + 1 + jf)
    return (pc + 1,)


@dataclass(frozen=True)
class State:
    cond: z3.BoolRef
    a: z3.BitVecRef
    x: z3.BitVecRef
    mem: tuple[z3.BitVecRef, ...]


def _merge(states: list[State]) -> State:
    if len(states) == 1:
        return states[0]
    cond = z3.Or(*[s.cond for s in states])

    def pick(values: list[z3.BitVecRef]) -> z3.BitVecRef:
        out = values[-1]
        for s, v in zip(reversed(states[:-1]), reversed(values[:-1]), strict=True):
            if not v.eq(out):
                out = z3.If(s.cond, v, out)
        return out
    return State(cond, pick([s.a for s in states]), pick([s.x for s in states]),
                 tuple(pick([s.mem[i] for s in states]) for i in range(16)))


def behaviour(insns: list[Insn], frame: Frame) -> tuple[z3.BoolRef, z3.BoolRef]:
    """(the frame is kept, it is kept whole): a return value below the frame's length
    keeps only that many bytes (a snap length), which no policy asks for."""
    kept: list = []
    passes(insns, frame, returns=kept)
    whole = z3.And(*[z3.Implies(c, z3.Or(v == 0, z3.UGE(v, frame.length))) for c, v in kept])
    return z3.Or(*[z3.And(c, v != 0) for c, v in kept]) if kept else z3.BoolVal(False), whole


def passes(insns: list[Insn], frame: Frame, network: int = NETWORK_HEADER,
           returns: list | None = None) -> z3.BoolRef:
    """The frame is kept (the program returns non-zero). ``network``: where the
    network header lies (``SKF_NET_OFF`` loads): 14 on a packet socket, 0 for
    ``-m bpf`` at an IP hook."""
    check_classic(insns)
    n = len(insns)
    incoming: list[list[State]] = [[] for _ in range(n)]
    zero = bv(0)
    incoming[0].append(State(z3.BoolVal(True), zero, zero, (zero,) * 16))
    kept = []
    for pc, insn in enumerate(insns):
        if not incoming[pc]:
            continue
        state = _merge(incoming[pc])
        for target, nxt in _step(pc, insn, state, frame, kept, network):
            if not pc < target < n:
                raise Unsupported(f"instruction {pc} jumps to {target}, outside the program")
            incoming[target].append(nxt)
    if returns is not None:
        returns += kept
    return z3.Or(*[z3.And(c, v != 0) for c, v in kept]) if kept else z3.BoolVal(False)


def _load(frame: Frame, at: z3.BitVecRef, size: int,
          network: int) -> tuple[z3.BoolRef, z3.BitVecRef]:
    """(the bytes are there, the value): offsets as the kernel's negative helper."""
    signed = z3.BitVecVal
    direct = z3.And(at >= signed(0, 32), frame.has(at, size))
    net = at - SKF_NET_OFF + network
    ll = at - SKF_LL_OFF
    in_net = z3.And(at >= SKF_NET_OFF, at < 0, frame.has(net, size))
    in_ll = z3.And(at >= SKF_LL_OFF, at < SKF_NET_OFF, frame.has(ll, size))
    where = z3.If(at >= 0, at, z3.If(at >= SKF_NET_OFF, net, ll))
    return z3.Or(direct, in_net, in_ll), z3.ZeroExt(32 - 8 * size, frame.bytes_(where, size))


def _alu(op: int, a: z3.BitVecRef, src: z3.BitVecRef) -> z3.BitVecRef:
    if op == 0x00:
        return a + src
    if op == 0x10:
        return a - src
    if op == 0x20:
        return a * src
    if op == 0x30:
        return z3.UDiv(a, src)
    if op == 0x40:
        return a | src
    if op == 0x50:
        return a & src
    if op == 0x60:
        return a << (src & 31)
    if op == 0x70:
        return z3.LShR(a, src & 31)
    if op == 0x80:
        return -a
    if op == 0x90:
        return z3.URem(a, src)
    if op == 0xA0:
        return a ^ src
    raise Unsupported(f"ALU operation {op:#x}")


def _step(pc: int, insn: Insn, s: State, frame: Frame, kept: list,
          network: int) -> list[tuple[int, State]]:
    code, jt, jf, k = insn
    cls, nxt = code & 0x07, pc + 1
    if cls in (0x00, 0x01):
        return [(nxt, _load_insn(code, k, s, frame, network))]
    if cls in (0x02, 0x03):
        mem = list(s.mem)
        mem[k & 15] = s.a if cls == 0x02 else s.x
        return [(nxt, State(s.cond, s.a, s.x, tuple(mem)))]
    if cls == 0x04:
        src = s.x if code & 0x08 else bv(k)
        guard = s.cond
        if code & 0xF0 in (0x30, 0x90) and code & 0x08:
            guard = z3.And(s.cond, s.x != 0)  # X = 0: return 0
        return [(nxt, State(guard, _alu(code & 0xF0, s.a, src), s.x, s.mem))]
    if cls == 0x05:
        op = code & 0xF0
        if op == 0x00:
            return [(nxt + k, s)]
        src = s.x if code & 0x08 else bv(k)
        test = {0x10: s.a == src, 0x20: z3.UGT(s.a, src), 0x30: z3.UGE(s.a, src),
                0x40: (s.a & src) != 0}.get(op)
        if test is None:
            raise Unsupported(f"jump {code:#x} at {pc}")
        return [(nxt + jt, State(z3.And(s.cond, test), s.a, s.x, s.mem)),
                (nxt + jf, State(z3.And(s.cond, z3.Not(test)), s.a, s.x, s.mem))]
    if cls == 0x06:
        value = {0x00: bv(k), 0x08: s.x, 0x10: s.a}.get(code & 0x18, bv(k))
        kept.append((s.cond, value))
        return []
    if code == 0x07:
        return [(nxt, State(s.cond, s.a, s.a, s.mem))]
    if code == 0x87:
        return [(nxt, State(s.cond, s.x, s.x, s.mem))]
    raise Unsupported(f"opcode {code:#x} at {pc}")


SIZES = {0x00: 4, 0x08: 2, 0x10: 1}


def _load_insn(code: int, k: int, s: State, frame: Frame, network: int) -> State:
    mode, into_x = code & 0xE0, code & 0x07 == 0x01
    if mode == 0x00:
        value = bv(k)
    elif mode == 0x80:
        value = frame.length
    elif mode == 0x60:
        value = s.mem[k & 15]
    elif mode in (0x20, 0x40, 0xA0):
        if mode == 0x20 and k >= 2 ** 31 and k - 2 ** 32 >= SKF_AD_OFF:
            raise Unsupported(f"ancillary load [{k - 2 ** 32}] (SKF_AD_OFF) is not modelled")
        size = 1 if mode == 0xA0 else SIZES.get(code & 0x18, 4)
        at = s.x + k if mode == 0x40 else bv(k)
        ok, value = _load(frame, at, size, network)
        if mode == 0xA0:
            value = (value & 0x0F) * 4
        s = State(z3.And(s.cond, ok), s.a, s.x, s.mem)
    else:
        raise Unsupported(f"load mode {mode:#x}")
    if into_x:
        return State(s.cond, s.a, value, s.mem)
    return State(s.cond, value, s.x, s.mem)


# ----------------------------------------------------------------------------- parsing

_C_LINE = re.compile(r"\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*"
                     r"(0x[0-9a-fA-F]+|\d+)\s*\}")


def parse(data: bytes, fmt: str) -> list[Insn]:
    """The instructions of a program file in ``fmt`` (asm, c, ddd, bin)."""
    if fmt == "bin":
        if len(data) % 8:
            raise ValueError("a bin program is a multiple of 8 bytes (struct sock_filter)")
        return [struct.unpack_from("<HBBI", data, i) for i in range(0, len(data), 8)]
    text = data.decode()
    if fmt == "c":
        return [tuple(int(v, 0) for v in m.groups()) for m in _C_LINE.finditer(text)]
    if fmt == "ddd":
        words = text.replace(",", "\n").split()
        count, rest = int(words[0]), [int(w) for w in words[1:]]
        insns = [tuple(rest[i:i + 4]) for i in range(0, len(rest), 4)]
        if len(insns) != count or any(len(i) != 4 for i in insns):
            raise ValueError(f"ddd program says {count} instructions, holds {len(insns)}")
        return insns
    if fmt == "asm":
        from pfc.prove.targets.cbpf_asm import parse_asm
        return parse_asm(text)
    raise ValueError(f"no cbpf format `{fmt}`")
