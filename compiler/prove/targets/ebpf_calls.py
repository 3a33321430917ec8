"""BPF-to-BPF calls and ``bpf_loop`` on a symbolic state (:mod:`.ebpf_vm`).

A call (``call`` with src 1: a static subprogram or a global function, which the
verifier checks on its own but which runs the same) is inlined: the callee runs from
the caller's state with its own frame (r10 a fresh stack below the caller's, so a
pointer into the caller's stack that the callee writes through is the same memory),
r1-r5 its arguments, r6-r9 unset until it writes them; its exits are merged into one
state, whose r0 is the return value; the caller's r6-r10 are restored, r1-r5 unset,
the callee's stack dropped.

``bpf_loop(n, callback, ctx, 0)`` (helper 181, ``kernel/bpf/bpf_iter.c``): for i = 0,
1, ... while i < n, ``callback(i, ctx)``, stopping after the first that returns non
zero; r0 is the number of calls made (-E2BIG when n > 2**23, which no path here can
reach without being seen). ``n`` may be a formula of the frame: the loop is unrolled,
each iteration under the condition that it runs, until that condition is false; a
solver decides it when simplification cannot (the classifier's candidate count is a
popcount of a word read from its maps, at most 64).
"""

from __future__ import annotations

import z3

from pfc.prove.frame import check
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.ebpf_vm import Machine, State, merge, s64, scalar

BAD = ("bad",)
FRAME = 512  # MAX_BPF_STACK: each call depth's stack lies below its caller's
MAX_DEPTH = 8  # MAX_CALL_FRAMES
MAX_LOOPS = 1 << 23  # BPF_MAX_LOOPS
E2BIG = -7


def call(vm: Machine, pc: int, s: State, target: int, args: tuple) -> State:
    """Run the function at ``target`` with r1-r5 = ``args``: the merged state after it."""
    if vm.depth + 1 >= MAX_DEPTH:
        raise Unsupported(f"calls nested deeper than {MAX_DEPTH} at instruction {pc}")
    regs = [BAD] * 11
    regs[1:6] = args
    regs[10] = ("fp", -FRAME * (vm.depth + 1))
    vm.depth += 1
    vm.returns.append([])
    try:
        vm.body(target, State(s.cond, tuple(regs), s.stack, s.data, s.spills))
        exits = vm.returns[-1]
    finally:
        vm.depth -= 1
        vm.returns.pop()
    if not exits:
        raise Unsupported(f"the function at instruction {target} never returns")
    done = merge(exits)
    floor = -FRAME * (vm.depth + 1)  # the callee's frame and below: gone
    stack = {k: v for k, v in done.stack.items() if k >= floor}
    spills = {k: v for k, v in done.spills.items() if k >= floor}
    out = list(s.regs)
    out[0] = done.regs[0]
    out[1:6] = [BAD] * 5
    return State(done.cond, tuple(out), stack, done.data, spills)


def subprogram(vm: Machine, pc: int, s: State) -> State:
    target = vm.program.calls.get(pc)
    if target is None:
        raise Unsupported(f"instruction {pc} calls a function the object does not hold")
    return call(vm, pc, s, target, s.regs[1:6])


def bpf_loop(vm: Machine, s: State):
    """(the state after the loop, r0)."""
    n, fn, ctx, flags = s.reg(1), s.reg(2), s.reg(3), s.reg(4)
    if n[0] != "s" or fn[0] != "func" or flags[0] != "s":
        raise Unsupported("bpf_loop with a count that is no number or no callback")
    if not z3.is_true(z3.simplify(flags[1] == 0)):
        raise Unsupported("bpf_loop with flags")
    count = z3.Extract(31, 0, n[1])
    big = z3.UGT(count, MAX_LOOPS)
    ended: list[tuple[State, z3.BitVecRef]] = [(s.guarded(big), s64(E2BIG))]
    going, i = s.guarded(z3.Not(big)), 0
    most = vm.values.bound(count)
    while True:
        more = z3.ULT(z3.BitVecVal(i, 32), count)
        ended.append((going.guarded(z3.Not(more)), s64(i)))
        if most is not None and i >= most:
            break  # the count is never larger: no more calls
        if most is None and not _possible(z3.And(going.cond, more)):
            break
        if i > 64:
            raise Unsupported("bpf_loop runs more than 65 times on some path: not modelled")
        after = call(vm, -1, going.guarded(more), fn[1], (scalar(s64(i)), ctx, BAD, BAD, BAD))
        r0 = after.regs[0]
        if r0[0] != "s":
            raise Unsupported("a bpf_loop callback returns no number")
        stop = z3.Extract(31, 0, r0[1]) != 0  # the callback returns long; 0 goes on
        ended.append((after.guarded(stop), s64(i + 1)))
        going = after.guarded(z3.Not(stop))
        i += 1
    live = [(st, r) for st, r in ended if vm.values.constant(st.cond) != 0]
    out = merge([st for st, _ in live])
    value = live[-1][1]
    for st, r in reversed(live[:-1]):
        value = z3.If(st.cond, r, value)
    regs = list(out.regs)
    regs[6:11] = s.regs[6:11]
    return State(out.cond, tuple(regs), out.stack, out.data, out.spills), scalar(value)


def _possible(cond: z3.BoolRef) -> bool:
    """Whether ``cond`` can hold: simplification first, then the solver (given a few
    seconds; when it cannot tell, the iteration is kept: a superset of the paths)."""
    cond = z3.simplify(cond)
    if z3.is_false(cond):
        return False
    if z3.is_true(cond):
        return True
    solver = z3.Solver()
    solver.set("timeout", 20000)
    solver.add(cond)
    return check(solver) != z3.unsat
