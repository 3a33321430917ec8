"""Reading ``tcpdump -d`` text (libpcap's ``bpf_image``) back into instructions.

Every form ``bpf_image`` prints is read (jump targets are absolute instruction
numbers there), plus pfc's ``ldx #pktlen`` for libpcap's ``unimp 0x81``; a line with
or without its ``(NNN)`` number. Anything else is a ValueError naming the line.
"""

from __future__ import annotations

import re

Insn = tuple[int, int, int, int]
_LINE = re.compile(r"^\s*(?:\((\d+)\)\s*)?(\w+)\s*(.*?)\s*$")
_JUMP_TAIL = re.compile(r"^(\S+)\s+jt\s+(\d+)\s+jf\s+(\d+)$")
_SIZE = {"ld": 0x00, "ldh": 0x08, "ldb": 0x10, "ldx": 0x01, "ldxb": 0x11}
_ALU = {"add": 0x00, "sub": 0x10, "mul": 0x20, "div": 0x30, "or": 0x40, "and": 0x50,
        "lsh": 0x60, "rsh": 0x70, "mod": 0x90, "xor": 0xA0}
_JUMPS = {"jeq": 0x10, "jgt": 0x20, "jge": 0x30, "jset": 0x40}


def _num(text: str) -> int:
    return int(text.lstrip("#"), 0) & 0xFFFFFFFF


def parse_asm(text: str) -> list[Insn]:
    insns = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"line {n}: not a classic BPF instruction: {line.strip()!r}")
        try:
            insns.append(_insn(m.group(2), m.group(3), len(insns)))
        except (ValueError, KeyError) as exc:
            raise ValueError(f"line {n}: cannot read {line.strip()!r}: {exc}") from None
    return insns


def _insn(op: str, arg: str, i: int) -> Insn:
    arg = arg.replace(" ", "")
    if op in ("ld", "ldh", "ldb", "ldx", "ldxb"):
        return _load(op, arg)
    if op in ("st", "stx"):
        return (0x02 if op == "st" else 0x03, 0, 0, int(arg[2:-1]))
    if op in _ALU:
        return ((0x0C if arg == "x" else 0x04) | _ALU[op], 0, 0, 0 if arg == "x" else _num(arg))
    if op == "neg":
        return (0x84, 0, 0, 0)
    if op == "ja":
        return (0x05, 0, 0, int(arg) - i - 1)
    if op in _JUMPS:
        m = _JUMP_TAIL.match(arg.replace("jt", " jt ").replace("jf", " jf "))
        if m is None:
            raise ValueError("a conditional jump needs `jt N jf N`")
        src, jt, jf = m.group(1), int(m.group(2)), int(m.group(3))
        code = 0x05 | _JUMPS[op] | (0x08 if src == "x" else 0)
        return (code, jt - i - 1, jf - i - 1, 0 if src == "x" else _num(src))
    if op == "ret":
        if arg in ("a", "A"):
            return (0x16, 0, 0, 0)
        if arg in ("x", "X"):
            return (0x0E, 0, 0, 0)
        return (0x06, 0, 0, _num(arg))
    if op == "tax":
        return (0x07, 0, 0, 0)
    if op == "txa":
        return (0x87, 0, 0, 0)
    if op == "unimp" and _num(arg) == 0x81:
        return (0x81, 0, 0, 0)
    raise ValueError(f"unknown operation `{op}`")


def _load(op: str, arg: str) -> Insn:
    cls_size = _SIZE[op]
    if op == "ldxb":
        m = re.fullmatch(r"4\*\(\[(\w+)\]&0xf\)", arg)
        if m is None:
            raise ValueError("ldxb takes 4*([k]&0xf)")
        return (0xB1, 0, 0, _num(m.group(1)))
    if arg == "#pktlen" or arg == "#len":
        return (cls_size | 0x80, 0, 0, 0)
    if arg.startswith("#"):
        return (cls_size, 0, 0, _num(arg))
    if arg.startswith("M["):
        return (cls_size | 0x60, 0, 0, int(arg[2:-1]))
    m = re.fullmatch(r"\[x\+(\w+)\]", arg)
    if m is not None:
        return (cls_size | 0x40, 0, 0, _num(m.group(1)))
    m = re.fullmatch(r"\[(\w+)\]", arg)
    if m is not None:
        return (cls_size | 0x20, 0, 0, _num(m.group(1)))
    raise ValueError(f"unknown operand `{arg}`")
