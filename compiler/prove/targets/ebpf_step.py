"""One eBPF instruction on a symbolic state (:mod:`pfc.prove.targets.ebpf_vm`): ALU and ALU64,
jumps (64- and 32-bit compares), memory loads and stores, ``ld_imm64`` of a map or a
data section, helper calls and ``exit``. Semantics as the kernel's interpreter:
division by zero gives 0, modulo by zero leaves the register, shifts are masked."""

from __future__ import annotations

import z3

from pfc.prove.frame import Behaviour, Frame
from pfc.prove.targets import ebpf_calls, ebpf_helpers
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.ebpf_vm import (
    CTX_FIELDS,
    SIZES,
    Machine,
    State,
    behaviour,
    s64,
    scalar,
    unusable,
)

BAD = ("bad",)


def step(vm: Machine, pc: int, insn, s: State) -> list[tuple[int, State]]:
    op, dst, src, off, imm = insn
    cls = op & 0x07
    if cls in (0x04, 0x07):
        return [(pc + 1, _alu(s.at(vm.frame.length), op, dst, src, imm, cls == 0x07))]
    if cls in (0x05, 0x06):
        return _jump(vm, pc, s, op, dst, src, off, imm, cls == 0x06)
    if op == 0x18:
        return [(pc + 2, _ld_imm64(vm, pc, s, dst, src, imm))]
    if cls == 0x01 and op & 0xE0 == 0x60:
        base = s.reg(src)
        size = SIZES[op & 0x18]
        if base[0] == "ctx":
            return [(pc + 1, s.with_reg(dst, _ctx(vm, base[1] + off)))]
        if base[0] in ("bad", "mixed"):
            raise unusable(base[0], f"a load through a {base[0]} value at instruction {pc}")
        got = vm.load(s, base, off, size)
        return [(pc + 1, s.with_reg(dst, got if isinstance(got, tuple) else scalar(got)))]
    if cls in (0x02, 0x03) and op & 0xE0 in (0x60, 0xC0):
        size = SIZES[op & 0x18]
        if op & 0xE0 == 0xC0 and imm != 0:  # atomics other than add
            raise Unsupported(f"atomic operation {imm:#x} at {pc}")
        if cls == 0x03 and s.reg(src)[0] != "s" and size == 8 and s.reg(dst)[0] == "fp":
            return [(pc + 1, vm.spill(s, s.reg(dst)[1] + off, s.reg(src)))]
        value = s64(imm) if cls == 0x02 else _scalar(s.reg(src), pc)
        if op & 0xE0 == 0xC0:
            value = vm.load(s, s.reg(dst), off, size) + value
        return [(pc + 1, vm.store(s, s.reg(dst), off, size, value))]
    raise Unsupported(f"opcode {op:#x} at instruction {pc}")  # the judge asks the kernel


def _scalar(v, pc: int) -> z3.BitVecRef:
    if v[0] != "s":
        raise unusable(v[0], f"a {v[0]} value used as a number at instruction {pc}")
    return v[1]


def _ctx(vm: Machine, off: int):
    name = CTX_FIELDS[vm.hook].get(off)
    f = vm.frame
    if name == "data":
        return ("pkt", s64(0))
    if name == "end":
        return ("end",)
    if name == "len":
        return scalar(z3.ZeroExt(32, f.length))
    if name == "protocol":  # skb->protocol as it lies (network order) in a u32 load
        return scalar(z3.ZeroExt(48, z3.Concat(f.byte(13), f.byte(12))))
    raise Unsupported(f"context field at offset {off} of the {vm.hook} hook")


def _ld_imm64(vm: Machine, pc: int, s: State, dst: int, src: int, imm: int) -> State:
    if pc in vm.program.funcs:  # BPF_PSEUDO_FUNC: a callback's address
        return s.with_reg(dst, ("func", vm.program.funcs[pc]))
    target = vm.program.relocations.get(pc)
    if target is None:
        high = vm.program.insns[pc + 1][4]
        return s.with_reg(dst, scalar(s64((imm & 0xFFFFFFFF) | (high & 0xFFFFFFFF) << 32)))
    if target in vm.program.rodata:
        return s.with_reg(dst, ("ro", target, imm & 0xFFFFFFFF))
    if target not in vm.maps:
        raise Unsupported(f"map `{target}` is not known (not pfc's counters, ready flag, "
                          "or a map of the maps file)")
    return s.with_reg(dst, ("map", target))


# ------------------------------------------------------------------------------- ALU

def _alu(s: State, op: int, dst: int, src: int, imm: int, wide: bool) -> State:
    code = op & 0xF0
    if code == 0xD0:
        return s.with_reg(dst, _endian(s.reg(dst), op & 0x08, imm))
    other = s.reg(src) if op & 0x08 else scalar(s64(imm))
    mine = s.reg(dst)
    if code == 0xB0:  # mov
        if not wide and other[0] == "s":
            return s.with_reg(dst, scalar(z3.ZeroExt(32, z3.Extract(31, 0, other[1]))))
        return s.with_reg(dst, other)
    if wide and code in (0x00, 0x10):
        pointer = _pointer_arith(mine, other, code, s64(0) + z3.ZeroExt(32, s.length))
        if pointer is not None:
            return s.with_reg(dst, pointer)
    if mine[0] != "s" or other[0] != "s":
        return s.with_reg(dst, BAD)
    a, b = mine[1], other[1]
    if not wide:
        a, b = z3.Extract(31, 0, a), z3.Extract(31, 0, b)
    out = _arith(code, a, b, wide)
    return s.with_reg(dst, scalar(out if wide else z3.ZeroExt(32, out)))


def _arith(code: int, a, b, wide: bool):
    bits = 63 if wide else 31
    zero = z3.BitVecVal(0, a.size())
    ops = {0x00: lambda: a + b, 0x10: lambda: a - b, 0x20: lambda: a * b,
           0x30: lambda: z3.If(b == 0, zero, z3.UDiv(a, b)), 0x40: lambda: a | b,
           0x50: lambda: a & b, 0x60: lambda: a << (b & bits),
           0x70: lambda: z3.LShR(a, b & bits), 0x80: lambda: -a,
           0x90: lambda: z3.If(b == 0, a, z3.URem(a, b)), 0xA0: lambda: a ^ b,
           0xC0: lambda: a >> (b & bits)}
    if code not in ops:
        raise Unsupported(f"ALU operation {code:#x}")
    return ops[code]()


def _pointer_arith(mine, other, code: int, length):
    """Pointer +/- scalar, and the distance between packet pointers (a scalar)."""
    kind = mine[0]
    place = {"pkt": lambda v: v[1], "end": lambda v: length}
    if kind in place and other[0] in place and code == 0x10:
        return scalar(place[kind](mine) - place[other[0]](other))
    if kind == "s" and code == 0x00 and other[0] in ("pkt", "fp", "fpx", "val", "ro"):
        mine, other, kind = other, mine, other[0]
    if other[0] != "s":
        return BAD if kind != "s" else None
    delta = other[1] if code == 0x00 else -other[1]
    if kind == "pkt":
        return ("pkt", mine[1] + delta)
    if kind in ("fp", "val", "ro"):
        k = z3.simplify(delta)
        if not z3.is_bv_value(k):
            if kind == "fp":  # an index into a stack buffer (the socket filter's window)
                return ("fpx", s64(mine[1]) + delta)
            if kind == "val":  # an index into a map value (a bitmap leaf's words)
                at = mine[3]
                return ("val", mine[1], mine[2], (s64(at) if isinstance(at, int) else at)
                        + delta, mine[4])
            return BAD
        step = k.as_signed_long()
        if kind == "val" and not isinstance(mine[3], int):
            return ("val", mine[1], mine[2], mine[3] + step, mine[4])
        if kind == "fp":
            return ("fp", mine[1] + step)
        if kind == "ro":
            return ("ro", mine[1], mine[2] + step)
        return ("val", mine[1], mine[2], mine[3] + step, mine[4])
    if kind == "fpx":
        return ("fpx", mine[1] + delta)
    if kind == "s":
        return None
    return BAD


def _endian(v, to_be: int, bits: int):
    if v[0] != "s":
        return BAD
    x = z3.Extract(bits - 1, 0, v[1])
    if to_be and bits > 8:
        x = z3.Concat(*[z3.Extract(8 * i + 7, 8 * i, x) for i in range(bits // 8)])
    return scalar(z3.ZeroExt(64 - bits, x))


# ----------------------------------------------------------------------------- jumps

_TESTS = {0x10: lambda a, b: a == b, 0x20: z3.UGT, 0x30: z3.UGE,
          0x40: lambda a, b: (a & b) != 0, 0x50: lambda a, b: a != b,
          0x60: lambda a, b: a > b, 0x70: lambda a, b: a >= b, 0xA0: z3.ULT,
          0xB0: z3.ULE, 0xC0: lambda a, b: a < b, 0xD0: lambda a, b: a <= b}


def _jump(vm: Machine, pc: int, s: State, op, dst, src, off, imm, narrow: bool):
    code = op & 0xF0
    if code == 0x00:
        return [(pc + 1 + off, s)]
    if code == 0x90:
        if vm.depth:  # a function's return
            vm.returns[-1].append(s)
            return []
        r0 = _scalar(s.reg(0), pc)
        vm.result.exits.append((s.cond, r0, s.data))
        return []
    if code == 0x80 and src == 1:
        return [(pc + 1, ebpf_calls.subprogram(vm, pc, s))]
    if code == 0x80:
        return [(pc + 1, ebpf_helpers.call(vm, pc, s, imm))]
    other = s.reg(src) if op & 0x08 else scalar(s64(imm))
    test = _compare(vm, s.reg(dst), other, _TESTS[code], narrow, pc)
    known = vm.values.constant(test)
    if known is not None:  # a branch never taken is dead, as the verifier knows it
        return [(pc + 1 + off if known else pc + 1, s)]
    taken, fell = s.guarded(test), s.guarded(z3.Not(test))
    if s.reg(dst)[0] == "val" and not op & 0x08 and imm == 0 and code in (0x10, 0x50):
        null = scalar(s64(0))  # where a lookup's result is NULL it is the number 0
        if code == 0x10:
            taken = taken.with_reg(dst, null)
        else:
            fell = fell.with_reg(dst, null)
    return [(pc + 1 + off, taken), (pc + 1, fell)]


def _compare(vm: Machine, a, b, test, narrow: bool, pc: int) -> z3.BoolRef:
    if a[0] == "s" and b[0] == "s":
        x, y = a[1], b[1]
        if narrow:
            x, y = z3.Extract(31, 0, x), z3.Extract(31, 0, y)
        return test(x, y)
    length = z3.ZeroExt(32, vm.frame.length)
    offsets = {"pkt": lambda v: v[1], "end": lambda v: length}
    if a[0] in offsets and b[0] in offsets:
        return test(offsets[a[0]](a), offsets[b[0]](b))
    if a[0] == "val" and b[0] == "s":
        return test(z3.If(a[4], s64(1), s64(0)), b[1])  # NULL or not, against 0
    kind = "bad" if "bad" in (a[0], b[0]) else a[0]
    raise unusable(kind, f"a compare of {a[0]} with {b[0]} at instruction {pc}")


def run(program, maps, hook: str, frame: Frame, count_rules: frozenset[int]) -> Behaviour:
    """The program's behaviour on ``frame`` as ``hook`` shows it."""
    result = Machine(program, maps, hook, frame, count_rules, step).run()
    return behaviour(result, hook, frame, count_rules)
