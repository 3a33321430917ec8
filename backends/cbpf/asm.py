"""The test graph as classic BPF instructions, and the four printed forms.

:func:`assemble` lays the nodes out in a topological order (classic BPF jumps only
forward), the returns last. For every node it knows what A and X hold on entry (the
meet over its incoming edges) and emits only what is missing: the X set-up if X holds
something else, the part of the node's value A does not already hold (``ldh [16]``
already in A makes ``ldh [16]; add #14`` a single ``add #14``), and the conditional
jump. A conditional jump reaches at most 255 instructions ahead (8-bit offsets): a
farther target gets a trampoline right after the jump (``ja``, or a copy of the
``ret`` it aims at), repeated until every jump fits.

Formats (libpcap's ``bpf_dump`` and ``bpf_image``, tcpdump ``-d``/``-dd``/``-ddd``):
``asm`` as ``tcpdump -d`` prints it (libpcap prints ``ldx #pktlen`` as ``unimp 0x81``;
pfc prints ``ldx      #pktlen``), ``c`` as ``-dd``, ``ddd`` as ``-ddd`` (the count,
then ``code jt jf k`` per line: what ``iptables -m bpf --bytecode`` and
``tc ... bpf bytecode`` take, with commas for newlines), ``bin`` as the raw
``struct sock_filter`` array (little-endian ``u16 code, u8 jt, u8 jf, u32 k``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from pfc.backends.cbpf.graph import Graph, Step, Test, Value, XState, reachable

Insn = tuple[int, int, int, int]
SIZE = {4: 0x00, 2: 0x08, 1: 0x10}
ALU = {"add": 0x04, "sub": 0x14, "and": 0x54, "lsh": 0x64, "rsh": 0x74,
       "addx": 0x0C, "subx": 0x1C}
JUMP = {"jeq": 0x15, "jgt": 0x25, "jge": 0x35, "jset": 0x45}
LD_LEN, LDX_LEN, LDX_MSH, TAX, TXA, JA, RET = 0x80, 0x81, 0xB1, 0x07, 0x87, 0x05, 0x06
MAX_JUMP = 255


def step_insn(step: Step) -> Insn:
    if step.op == "ld":
        return (0x20 | SIZE[step.size], 0, 0, step.k)
    if step.op == "ldx":
        return (0x40 | SIZE[step.size], 0, 0, step.k)
    if step.op == "len":
        return (LD_LEN, 0, 0, 0)
    return (ALU[step.op], 0, 0, step.k if step.op in ("add", "sub", "and", "lsh", "rsh")
            else 0)


# A holds (value, the X state its steps used or None); X holds an XState.
AState = tuple[Value, XState | None] | None


def _doff4(l3: int) -> Value:
    return (Step("ldx", l3 + 12, 1), Step("and", 0xF0), Step("rsh", 2), Step("addx"))


def _doff6(l3: int) -> Value:
    return (Step("ld", l3 + 52, 1), Step("and", 0xF0), Step("rsh", 2))


def x_setup(want: XState, x: XState | None,
            l3: int = 14) -> tuple[list[Insn], Value, XState | None]:
    """What makes X hold ``want`` (the IP header at ``l3``): instructions first, then
    (for the TCP payload states) a value to compute in A with X = the returned state,
    then ``tax``."""
    if want is XState.IHL:
        return [(LDX_MSH, 0, 0, l3)], (), None
    if want is XState.LEN:
        return [(LDX_LEN, 0, 0, 0)], (), None
    if want is XState.TCP4:
        return ([] if x is XState.IHL else [(LDX_MSH, 0, 0, l3)]), _doff4(l3), XState.IHL
    return [], _doff6(l3), None


def _tag(value: Value, x: XState | None) -> XState | None:
    return x if any(s.uses_x for s in value) else None


def _compute(value: Value, a: AState, x: XState | None) -> tuple[list[Insn], AState]:
    """Code that leaves ``value`` in A, reusing what A already holds (a prefix)."""
    start = 0
    if a is not None and a[0] == value[:len(a[0])] and a[1] == _tag(a[0], x):
        start = len(a[0])
    return [step_insn(s) for s in value[start:]], (value, _tag(value, x))


def node_code(test: Test, a: AState, x: XState | None,
              l3: int = 14) -> tuple[list[Insn], AState, XState]:
    """The node's straight-line code given what A and X hold on entry."""
    code: list[Insn] = []
    if test.x is not None and x is not test.x:
        setup, value, x_during = x_setup(test.x, x, l3)
        code += setup
        if setup:
            x = x_during
        if value:
            more, a = _compute(value, a, x)
            code += more + [(TAX, 0, 0, 0)]
        x = test.x
    more, a = _compute(test.value, a, x)
    return code + more, a, x


def _meet(states: list[tuple[AState, XState | None]]) -> tuple[AState, XState | None]:
    a, x = states[0]
    for a2, x2 in states[1:]:
        a = a if a == a2 else None
        x = x if x is x2 else None
    return a, x


@dataclass
class Block:
    """Straight-line ``body``, then a conditional ``jump`` (code, k, true label, false
    label), an unconditional ``ja`` to a label, or ``ret``."""

    label: int
    body: list[Insn] = field(default_factory=list)
    jump: tuple[int, int, int, int] | None = None
    ja: int | None = None
    ret: int | None = None

    def __len__(self) -> int:
        return len(self.body) + 1


def blocks_of(graph: Graph) -> list[Block]:
    order = reachable(graph.root)
    tests = [n for n in order if not n.is_leaf]
    rets = [n for n in order if n.is_leaf]
    incoming: dict[int, list[tuple[AState, XState | None]]] = {n.nid: [] for n in order}
    incoming[graph.root.nid].append((None, None))
    blocks = []
    for node in tests:
        a, x = _meet(incoming[node.nid])
        body, a, x = node_code(node.test, a, x, graph.link.l3)
        code = JUMP[node.test.op] | (0x08 if node.test.k is None else 0)
        blocks.append(Block(node.nid, body, (code, node.test.k or 0, node.jt.nid,
                                              node.jf.nid)))
        incoming[node.jt.nid].append((a, x))
        incoming[node.jf.nid].append((a, x))
    return blocks + [Block(n.nid, ret=n.ret) for n in rets]


def resolve(blocks: list[Block]) -> list[Insn]:
    """The blocks as instructions, with trampolines for jumps beyond 255 instructions.

    One pass from the last block to the first. What lies after a block is final when
    the block is placed, so its jump offsets are known exactly; a target out of reach
    is reached through an equivalent already placed within reach (a trampoline an
    earlier-placed jump made, or for a ``ret`` any copy of the same ``ret``), or else
    through a new trampoline right after the jump (offset 0 or 1: always in reach; a
    ``ja`` has a 32-bit offset, a ``ret`` copy none). Placing a trampoline there
    changes no distance between blocks already placed, so one pass always succeeds,
    in time linear in the program. (The earlier layout put trampolines at the far end
    of a jump's reach: any later insertion in between pushed them out again, and two
    jumps could break each other's trampolines forever: fuzz-and-faults.md defect 10.)
    """
    layout = _Layout({b.label: b.ret for b in blocks if b.ret is not None})
    for block in reversed(blocks):
        layout.place(block)
    return layout.emit()


class _Layout:
    """Blocks placed from the end. ``depth[label]`` is how many instructions lie from
    the block's first one to the end of the program: fixed once placed."""

    def __init__(self, rets: dict[int, int]) -> None:
        self.rets = rets
        self.placed: list[Block] = []  # in reverse order
        self.size = 0
        self.depth: dict[int, int] = {}
        self.copies: dict[object, list[int]] = {}  # equivalence class -> labels, nearest last
        self.fresh = -1

    def _class(self, label: int) -> object:
        return ("ret", self.rets[label]) if label in self.rets else label

    def _prepend(self, block: Block, target: int | None = None) -> None:
        self.placed.append(block)
        self.size += len(block)
        self.depth[block.label] = self.size
        key = self._class(block.label) if target is None else self._class(target)
        self.copies.setdefault(key, []).append(block.label)

    def _reach(self, target: int, after: int) -> int | None:
        """A label equivalent to ``target`` that a jump followed by ``after``
        instructions (its new trampolines) reaches, the target itself first."""
        for label in (target, self.copies[self._class(target)][-1]):
            if 0 <= self.size + after - self.depth[label] <= MAX_JUMP:
                return label
        return None

    def place(self, block: Block) -> None:
        if block.jump is None:
            self._prepend(block)
            return
        code, k, jt, jf = block.jump
        targets = list(dict.fromkeys((jt, jf)))
        far: list[int] = []
        while True:  # at most twice: a trampoline only lengthens the other jump
            far_now = [t for t in targets if t in far or self._reach(t, len(far)) is None]
            if far_now == far:
                break
            far = far_now
        via = {t: self._reach(t, len(far)) for t in targets if t not in far}
        for target in reversed(far):
            label, self.fresh = self.fresh, self.fresh - 1
            self._prepend(Block(label, ret=self.rets[target]) if target in self.rets
                          else Block(label, ja=target), target)
            via[target] = label
        block.jump = (code, k, via[jt], via[jf])
        self._prepend(block)

    def emit(self) -> list[Insn]:
        pos = {label: self.size - depth for label, depth in self.depth.items()}
        out = _emit(list(reversed(self.placed)), pos)
        if any(code & 0x07 == 0x05 and code != JA and max(jt, jf) > MAX_JUMP
               for code, jt, jf, _ in out):
            raise RuntimeError("internal error: a conditional jump beyond 255")
        return out


def _emit(blocks: list[Block], pos: dict[int, int]) -> list[Insn]:
    out: list[Insn] = []
    for b in blocks:
        out += b.body
        here = len(out) + 1
        if b.jump is not None:
            code, k, jt, jf = b.jump
            out.append((code, pos[jt] - here, pos[jf] - here, k))
        elif b.ja is not None:
            out.append((JA, 0, 0, pos[b.ja] - here))
        else:
            out.append((RET, 0, 0, b.ret))
    return out


def assemble(graph: Graph) -> list[Insn]:
    return resolve(blocks_of(graph))


# ------------------------------------------------------------------------ kernel memory

OPTMEM_DEFAULT = 131072  # net.core.optmem_max on Linux 6.18 (per network namespace)
OPTMEM_BUDGET = 16362  # eBPF instructions that fit in it (measured, see kernel_size)


def kernel_size(insns: list[Insn]) -> int:
    """The eBPF instructions the kernel turns ``insns`` into (``bpf_convert_filter``),
    as measured on Linux 6.18 x86-64: ``ld``/``ldh [k]`` 14, ``ldb [k]`` 13, any load at
    ``[x + k]`` 9, ``ldxb 4*([k]&0xf)`` 19, ``ret`` 2, a conditional jump 2 when neither
    target is the next instruction (else 1), everything else 1.

    ``SO_ATTACH_FILTER`` charges the converted program to the socket's option memory
    (``sk_filter_charge``: about 8 bytes per eBPF instruction) and fails with ENOMEM
    beyond ``net.core.optmem_max``: with the default 131072 bytes, programs up to
    ``OPTMEM_BUDGET`` = 16362 converted instructions attach (e.g. 1168 ``ldh [12]``
    and a ``ret``, not 1169) — so a long program can need a larger optmem_max well
    before the 4096-instruction limit.
    """
    total = 0
    for code, jt, jf, _ in insns:
        if code in (0x20, 0x28):
            total += 14
        elif code == 0x30:
            total += 13
        elif code in (0x40, 0x48, 0x50):
            total += 9
        elif code == LDX_MSH:
            total += 19
        elif code == RET:
            total += 2
        elif code & 0x07 == 0x05 and code != JA:
            total += 2 if jt and jf else 1
        else:
            total += 1
    return total


# ------------------------------------------------------------------------------ printing

_LOADS = {0x20: "ld", 0x28: "ldh", 0x30: "ldb", 0x40: "ld", 0x48: "ldh", 0x50: "ldb"}
_ALU_NAMES = {v: k.rstrip("x") for k, v in ALU.items()}
_JUMP_NAMES = {v: k for k, v in JUMP.items()}


def image(insn: Insn, i: int) -> str:
    """One instruction as libpcap's ``bpf_image`` prints it (``tcpdump -d``)."""
    code, jt, jf, k = insn
    op, operand = _operands(code, k, i)
    if code & 0x07 == 0x05 and code != JA:
        return f"({i:03d}) {op:<8} {operand:<16} jt {i + 1 + jt}\tjf {i + 1 + jf}"
    return f"({i:03d}) {op:<8} {operand}"


def _operands(code: int, k: int, i: int) -> tuple[str, str]:
    if code in _LOADS:
        where = f"[{k}]" if code < 0x40 else f"[x + {k}]"
        return _LOADS[code], where
    named = {LD_LEN: ("ld", "#pktlen"), LDX_LEN: ("ldx", "#pktlen"),
             LDX_MSH: ("ldxb", f"4*([{k}]&0xf)"), TAX: ("tax", ""), TXA: ("txa", ""),
             RET: ("ret", f"#{k}"), JA: ("ja", f"{i + 1 + k}")}
    if code in named:
        return named[code]
    if code in _ALU_NAMES:
        name = _ALU_NAMES[code]
        if code & 0x08:
            return name, "x"
        return name, f"#0x{k:x}" if name == "and" else f"#{k}"
    if code & ~0x08 in _JUMP_NAMES:
        return _JUMP_NAMES[code & ~0x08], "x" if code & 0x08 else f"#0x{k:x}"
    raise ValueError(f"no printed form for opcode {code:#x}")


def to_asm(insns: list[Insn]) -> str:
    return "".join(image(insn, i) + "\n" for i, insn in enumerate(insns))


def to_c(insns: list[Insn]) -> str:
    return "".join(f"{{ 0x{c:x}, {jt}, {jf}, 0x{k:08x} }},\n" for c, jt, jf, k in insns)


def to_ddd(insns: list[Insn]) -> str:
    return f"{len(insns)}\n" + "".join(f"{c} {jt} {jf} {k}\n" for c, jt, jf, k in insns)


def to_bin(insns: list[Insn]) -> bytes:
    return b"".join(struct.pack("<HBBI", *insn) for insn in insns)


def from_bin(data: bytes) -> list[Insn]:
    return [struct.unpack_from("<HBBI", data, i) for i in range(0, len(data), 8)]
