"""eBPF instructions executed symbolically, states merged where paths meet.

Registers hold typed values, as the verifier tracks them: scalars (64-bit), the
context pointer, packet pointers (an offset from the frame's first byte), the packet
end, stack pointers, map pointers and map value pointers (which may be NULL), and
pointers into read-only data sections. Memory is little-endian. Where paths meet,
values of one kind are merged with ``If``; values of different kinds become unusable
(a program using one is refused). A bounded loop (a back edge clang kept) is unrolled
in rounds (:meth:`Machine.body`); calls and ``bpf_loop`` are in
:mod:`pfc.prove.targets.ebpf_calls`.

What a hook gives the program: XDP ``xdp_md.data``/``data_end`` (offsets 0 and 4);
tc and socket filters ``__sk_buff.len`` (0), ``data`` (76), ``data_end`` (80) over the
frame from its Ethernet header (linear: ``bpf_skb_pull_data`` succeeds and changes
nothing). Helpers (:mod:`pfc.prove.targets.ebpf_helpers`): map lookups on the contents of
:mod:`pfc.prove.targets.ebpf`'s maps, ``bpf_skb_load_bytes``/``bpf_xdp_load_bytes``,
``bpf_skb_store_bytes``, ``bpf_l3_csum_replace``, ``bpf_l4_csum_replace``,
``bpf_csum_diff`` as the kernel computes them (non-``CHECKSUM_PARTIAL`` packets).

Verdicts: XDP 2 passes and 1 drops, tc 0 passes and 2 drops, a socket filter keeps
the frame when it returns its length and drops it on 0; any other return value is a
difference from the policy. A store to a ``pfc_counters`` entry counts that entry's
rule (packets only; the byte count is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from pfc.prove.frame import Behaviour, Frame
from pfc.prove.targets import ebpf_tables, ebpf_values
from pfc.prove.targets.cbpf import Invalid, Unsupported

BV64 = z3.BitVecSort(64)
TRUE = z3.BoolVal(True)
CTX_FIELDS = {"xdp": {0: "data", 4: "end"},
              "tc": {0: "len", 76: "data", 80: "end", 16: "protocol"},
              "socket": {0: "len", 76: "data", 80: "end", 16: "protocol"}}
VERDICTS = {"xdp": (2, 1), "tc": (0, 2)}  # (pass, drop)
MAX_ROUNDS = 130  # iterations of one loop (the classifier's: at most 64 per word)
HEAVY = 64  # entries of an array whose reads make terms too big for z3.simplify
SIZES = {0x00: 4, 0x08: 2, 0x10: 1, 0x18: 8}
Value = tuple


def s64(x: int) -> z3.BitVecRef:
    return z3.BitVecVal(x, 64)


def scalar(v: z3.BitVecRef) -> Value:
    return ("s", v)


@dataclass
class State:
    cond: z3.BoolRef
    regs: tuple[Value, ...]
    stack: dict[int, z3.BitVecRef]
    data: z3.ArrayRef
    spills: dict[int, Value] = field(default_factory=dict)  # pointers saved on the stack

    length = None  # the frame's length, for pointer differences (``at``)

    def at(self, length: z3.BitVecRef) -> State:
        self.length = length
        return self

    def reg(self, n: int) -> Value:
        return self.regs[n]

    def with_reg(self, n: int, v: Value) -> State:
        regs = list(self.regs)
        regs[n] = v
        return State(self.cond, tuple(regs), self.stack, self.data, self.spills)

    def guarded(self, c: z3.BoolRef) -> State:
        return State(z3.And(self.cond, c), self.regs, self.stack, self.data, self.spills)


def _pick(conds: list[z3.BoolRef], values: list):
    out = values[-1]
    for c, v in zip(reversed(conds[:-1]), reversed(values[:-1]), strict=True):
        if not v.eq(out):
            out = z3.If(c, v, out)
    return out


def _merge_values(conds: list[z3.BoolRef], values: list[Value]) -> Value:
    """One value for a register (or spill slot) where paths meet. A path on which it
    is unset (``bad``) is left out: the program is one the verifier took (else there
    is nothing to prove), so no path it reads the register on has it unset (a jump
    target moved by one: the verifier, tracking constants, knows the path is dead)."""
    kept = [(c, v) for c, v in zip(conds, values, strict=True) if v[0] != "bad"]
    if not kept:
        return ("bad",)
    conds, values = [c for c, _ in kept], [v for _, v in kept]
    kinds = {v[0] for v in values}
    if len(kinds) != 1:
        return ("mixed",)
    kind = values[0][0]
    if kind in ("s", "pkt"):
        return (kind, _pick(conds, [v[1] for v in values]))
    if kind == "val":
        if len({v[1] for v in values}) != 1 or len({v[2].size() for v in values}) != 1:
            return ("mixed",)
        ats = [v[3] for v in values]
        if any(not isinstance(a, int) for a in ats) or len(set(ats)) != 1:
            ats = _pick(conds, [s64(a) if isinstance(a, int) else a for a in ats])
        else:
            ats = ats[0]
        return ("val", values[0][1], _pick(conds, [v[2] for v in values]), ats,
                _pick(conds, [v[4] for v in values]))
    if len(set(values)) == 1:
        return values[0]
    return ("mixed",)


def unusable(kind: str, what: str) -> Unsupported:
    """The error for a value of ``kind`` used where it cannot be: a register no path
    set (``bad``: unset, or clobbered by a call) is one the verifier refuses to read."""
    if kind == "bad":
        return Invalid(what + " (a register never set there: the verifier refuses it)")
    return Unsupported(what)


def merge(states: list[State]) -> State:
    if len(states) == 1:
        return states[0]
    conds = [s.cond for s in states]
    regs = tuple(_merge_values(conds, [s.regs[i] for s in states]) for i in range(11))
    stack = {}
    for slot in set().union(*[s.stack for s in states]):
        stack[slot] = _pick(conds, [s.stack.get(slot, z3.BitVecVal(0, 8)) for s in states])
    data = _pick(conds, [s.data for s in states])
    spills = {}
    for slot in set().union(*[s.spills for s in states]):
        having = [s for s in states if slot in s.spills]
        spills[slot] = _merge_values([s.cond for s in having],
                                     [s.spills[slot] for s in having])
    return State(z3.Or(*conds), regs, stack, data, spills)


@dataclass
class Result:
    exits: list[tuple[z3.BoolRef, z3.BitVecRef, z3.ArrayRef]] = field(default_factory=list)
    counted: dict[int, list[z3.BoolRef]] = field(default_factory=dict)


class Machine:
    def __init__(self, program, maps, hook: str, frame: Frame, count_rules: frozenset[int],
                 step):
        self.program, self.maps, self.hook, self.frame = program, maps, hook, frame
        self.step = step  # pfc.prove.targets.ebpf_step.step
        self.count_rules = count_rules
        self.result = Result()

    depth = 0  # the BPF-to-BPF call depth of the function being run
    returns: list[list[State]]  # per call depth above 0: the states its exits return

    def run(self) -> Result:
        regs = [("bad",)] * 11
        regs[1], regs[10] = ("ctx", 0), ("fp", 0)
        self.returns, self._cfgs = [], {}
        self.values = ebpf_values.Values()
        self.body(0, State(TRUE, tuple(regs), {}, self.frame.data))
        return self.result

    def body(self, start: int, state: State) -> None:
        """Run the function that starts at ``start`` from ``state``: its instructions in
        topological order, paths merged where they meet; a state that takes a back
        edge (a bounded loop clang kept) waits for the next *round*, which runs the
        loop's body again, until no state is left (each round one more iteration)."""
        order, back = self.cfg(start)
        pending, n = {start: [state]}, len(self.program.insns)
        for _ in range(MAX_ROUNDS):
            if not pending:
                return
            incoming, pending = pending, {}
            for pc in order:
                if pc not in incoming:
                    continue
                for target, nxt in self.step(self, pc, self.program.insns[pc],
                                             merge(incoming.pop(pc))):
                    if not 0 <= target < n:
                        raise Invalid(f"instruction {pc} jumps outside the program")
                    if (pc, target) not in back:
                        incoming.setdefault(target, []).append(nxt)
                    elif self.values.constant(nxt.cond) != 0:
                        pending.setdefault(target, []).append(nxt)
        raise Unsupported(f"a loop at instruction {start} runs more than {MAX_ROUNDS} "
                          "times on some path: not modelled")

    def cfg(self, start: int):
        if start not in self._cfgs:
            self._cfgs[start] = topological(self.program.insns, start)
        return self._cfgs[start]

    # ------------------------------------------------------------------ memory

    def load(self, s: State, base: Value, off: int, size: int) -> z3.BitVecRef:
        kind = base[0]
        if kind == "pkt":
            at = z3.Extract(31, 0, base[1] + off)
            return _le(z3.Concat(*[z3.Select(s.data, at + i) for i in range(size)][::-1])
                       if size > 1 else z3.Select(s.data, at), size)
        if kind == "fp":
            at = base[1] + off
            if size == 8 and at in s.spills:
                return s.spills[at]
            parts = [s.stack.get(at + i, z3.BitVecVal(0, 8)) for i in range(size)]
            return _le(z3.Concat(*parts[::-1]) if size > 1 else parts[0], size)
        if kind == "fpx":  # a stack byte at a computed offset
            parts = []
            for i in range(size):
                at, byte = base[1] + off + i, z3.BitVecVal(0, 8)
                for slot, value in s.stack.items():
                    byte = z3.If(at == slot, value, byte)
                parts.append(byte)
            return _le(z3.Concat(*parts[::-1]) if size > 1 else parts[0], size)
        if kind == "val":
            return _le(self.value_bytes(base, off, size), size)
        if kind == "ro":
            raw = self.program.rodata[base[1]][base[2] + off:base[2] + off + size]
            return s64(int.from_bytes(raw.ljust(size, b"\0"), "little"))
        raise unusable(kind, f"a load through a {kind} value")

    def store(self, s: State, base: Value, off: int, size: int, value: z3.BitVecRef) -> State:
        value = z3.Extract(8 * size - 1, 0, value)
        parts = [z3.Extract(8 * i + 7, 8 * i, value) for i in range(size)]
        kind = base[0]
        if kind == "fp":
            stack, at = dict(s.stack), base[1] + off
            for i, p in enumerate(parts):
                stack[at + i] = p
            spills = {k: v for k, v in s.spills.items() if not at - 8 < k < at + size}
            return State(s.cond, s.regs, stack, s.data, spills)
        if kind == "pkt":
            at, data = z3.Extract(31, 0, base[1] + off), s.data
            for i, p in enumerate(parts):
                data = z3.Store(data, at + i, p)
            return State(s.cond, s.regs, s.stack, data, s.spills)
        if kind == "val":
            self.map_store(s, base, off)
            return s
        raise unusable(kind, f"a store through a {kind} value")

    def value_bytes(self, base: Value, off: int, size: int) -> z3.BitVecRef:
        """``size`` bytes at ``off`` into the value a lookup found (little-endian as a
        load reads them): the map's contents, zero where it holds nothing."""
        info = self.maps[base[1]]
        if info.kind in ebpf_tables.ARRAYS and len(info.contents) > HEAVY:
            self.values.heavy = True
        return ebpf_tables.read(info, base[2], base[3] + off, size, self.values)

    def spill(self, s: State, at: int, value: Value) -> State:
        """A pointer saved on the stack (8 bytes at ``at``), given back by a load."""
        stack = {k: v for k, v in s.stack.items() if not at <= k < at + 8}
        spills = {k: v for k, v in s.spills.items() if not at - 8 < k < at + 8}
        return State(s.cond, s.regs, stack, s.data, spills | {at: value})

    def map_store(self, s: State, base: Value, off: int) -> None:
        name, key = base[1], base[2]
        info = self.maps.get(name)
        if info is None or not info.counts or not _is_zero(base[3] + off):
            return
        index = ebpf_tables.array_index(key)
        for rule in self.count_rules:
            self.result.counted.setdefault(rule, []).append(
                z3.And(s.cond, base[4], index == rule))


def successors(pc: int, insn) -> list[int]:
    op, _, _, off, _ = insn
    cls, code = op & 0x07, op & 0xF0
    if op == 0x18:
        return [pc + 2]
    if cls in (0x05, 0x06):
        if code == 0x90:
            return []
        if code == 0x00:
            return [pc + 1 + off]
        if code != 0x80:
            return [pc + 1 + off, pc + 1]
    return [pc + 1]


def topological(insns, start: int = 0) -> tuple[list[int], set[tuple[int, int]]]:
    """The instructions of the function at ``start`` (calls step over their callee),
    each after all its predecessors along forward edges, and the back edges (a depth-
    first search's edges to an instruction on its stack: the loops)."""
    seen, back, on_stack = set(), set(), set()
    work = [(start, iter(successors(start, insns[start])))]
    seen.add(start)
    on_stack.add(start)
    while work:
        pc, succ = work[-1]
        t = next(succ, None)
        if t is None:
            work.pop()
            on_stack.discard(pc)
            continue
        if not 0 <= t < len(insns):
            continue
        if t in on_stack:
            back.add((pc, t))
        elif t not in seen:
            seen.add(t)
            on_stack.add(t)
            work.append((t, iter(successors(t, insns[t]))))
    indegree = {pc: 0 for pc in seen}
    for pc in seen:
        for t in successors(pc, insns[pc]):
            if t in indegree and (pc, t) not in back:
                indegree[t] += 1
    ready, order = [start], []
    while ready:
        pc = ready.pop()
        order.append(pc)
        for t in successors(pc, insns[pc]):
            if t in indegree and (pc, t) not in back:
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
    return order, back


def _is_zero(at) -> bool:
    return at == 0 if isinstance(at, int) else z3.is_true(z3.simplify(at == 0))


def _le(value: z3.BitVecRef, size: int) -> z3.BitVecRef:
    return z3.ZeroExt(64 - 8 * size, value)


def behaviour(result: Result, hook: str, frame: Frame,
              count_rules: frozenset[int]) -> Behaviour:
    """What the exits mean for the hook (module doc)."""
    length = z3.Extract(31, 0, z3.ZeroExt(32, frame.length))
    passes, invalid, out = [], [], frame.data
    for cond, r0, data in reversed(result.exits):
        ret = z3.Extract(31, 0, r0)
        if hook == "socket":
            ok, bad = ret == length, z3.And(ret != 0, ret != length)
        else:
            good, drop = VERDICTS[hook]
            ok, bad = ret == good, z3.And(ret != good, ret != drop)
        passes.append(z3.And(cond, ok))
        invalid.append(z3.And(cond, bad))
        out = out if data.eq(out) else z3.If(z3.And(cond, ok), data, out)
    counted = {i: z3.Or(*c) for i, c in result.counted.items()}
    for rule in set(count_rules) - set(counted):
        counted[rule] = z3.BoolVal(False)
    return Behaviour(z3.Or(*passes) if passes else z3.BoolVal(False),
                     None if hook == "socket" else out, counted,
                     z3.Not(z3.Or(*invalid)) if invalid else TRUE)
