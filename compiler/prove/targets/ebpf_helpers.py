"""eBPF helper calls on a symbolic state, as ``net/core/filter.c`` and the map code
compute them (Linux 6.x; packets never ``CHECKSUM_PARTIAL``, always linear).

Map lookups (1) find values in the contents :mod:`pfc.prove.targets.ebpf` gives each map:
arrays by index (NULL past ``max_entries``), LPM tries by longest prefix, hashes by
key, an array of maps (a set's slot) by key 0, whose value looked up in is the inner
map; updates (2) and deletes (3) return 0 and change nothing the verdict reads.
``bpf_skb_load_bytes`` (26) / ``bpf_xdp_load_bytes`` (189) copy frame bytes to the
stack (zeros and -EFAULT past the end), ``bpf_skb_store_bytes`` (9) writes them back,
``bpf_skb_pull_data`` (39) succeeds, ``bpf_l3_csum_replace`` (10) and
``bpf_l4_csum_replace`` (11) update a checksum in place (``csum_replace4``, the
``BPF_F_MARK_MANGLED_0`` rule, -EFAULT at an odd offset or past the packet),
``bpf_csum_diff`` (28) sums ~from and to words with end-around carries.
"""

from __future__ import annotations

import z3

from pfc.prove.formula import prefixes_hold
from pfc.prove.rewrite import csum_add, csum_fold
from pfc.prove.targets import ebpf_calls, ebpf_tables
from pfc.prove.targets.cbpf import Unsupported
from pfc.prove.targets.ebpf_vm import Machine, State, s64, scalar, unusable

EFAULT = -14
BAD = ("bad",)


def call(vm: Machine, pc: int, s: State, helper: int) -> State:
    handler = HELPERS.get(helper)
    if handler is None:
        raise Unsupported(f"helper {helper} (instruction {pc}) is not modelled")
    s, r0 = handler(vm, s)
    regs = list(s.regs)
    regs[0] = r0
    for i in range(1, 6):
        regs[i] = BAD
    return State(s.cond, tuple(regs), s.stack, s.data, s.spills)


def _const(value, what: str) -> int:
    if value[0] != "s":
        raise Unsupported(f"{what} is not a number")
    k = z3.simplify(value[1])
    if not z3.is_bv_value(k):
        raise Unsupported(f"{what} is not a constant")
    return k.as_long()


def _number(s: State, reg: int, what: str) -> z3.BitVecRef:
    """Argument register ``reg`` as a number (the verifier takes only that there)."""
    value = s.reg(reg)
    if value[0] != "s":
        raise unusable(value[0], f"{what} is a {value[0]} value, not a number")
    return value[1]


def _stack_bytes(s: State, ptr, n: int) -> z3.BitVecRef:
    """``n`` stack bytes from ``ptr`` in memory order (first byte most significant)."""
    if ptr[0] != "fp":
        raise Unsupported(f"a helper argument points to {ptr[0]}, not the stack")
    parts = [s.stack.get(ptr[1] + i, z3.BitVecVal(0, 8)) for i in range(n)]
    return parts[0] if n == 1 else z3.Concat(*parts)


def _lookup(vm: Machine, s: State):
    m = s.reg(1)
    if m[0] == "val" and vm.maps[m[1]].kind == "array_of_maps":  # the map in the slot
        m = ("map", vm.maps[m[1]].contents[bytes(4)].decode())
    if m[0] != "map":
        raise Unsupported("bpf_map_lookup_elem on something that is not a map")
    info = vm.maps[m[1]]
    key = _stack_bytes(s, s.reg(2), info.key_size)
    return s, ("val", info.name, key, 0, _found(info, key))


def _found(info, key: z3.BitVecRef) -> z3.BoolRef:
    if info.kind == "zero":  # the flow cache when the artifact does not declare it
        return z3.BoolVal(True)
    if info.kind in ebpf_tables.ARRAYS:
        return z3.ULT(ebpf_tables.array_index(key), info.entries)
    if info.kind == "lpm_trie":
        addr, plen = ebpf_tables.lpm_key(info, key)
        return _lpm(addr, plen, [ebpf_tables.lpm_net(k) for k in info.contents])
    return z3.Or(*[key == int.from_bytes(k, "big") for k in info.contents]) \
        if info.contents else z3.BoolVal(False)


def _lpm(addr: z3.BitVecRef, plen: z3.BitVecRef, nets) -> z3.BoolRef:
    """Some prefix no longer than the key's length holds the address. A constant
    length (pfc's keys: the full address) gives one interval set, the form the
    policy's own address lists take: the solver then meets the same terms."""
    full = addr.size()
    known = z3.simplify(plen)
    if z3.is_bv_value(known):
        within = [n for n in nets if n.prefixlen <= known.as_long()]
        return prefixes_hold(addr, within) if within else z3.BoolVal(False)
    by_length: dict[int, list] = {}
    for n in nets:
        by_length.setdefault(n.prefixlen, []).append(n)
    terms = []
    for length, group in by_length.items():
        held = prefixes_hold(addr, group)
        terms.append(held if length == full else z3.And(z3.UGE(plen, length), held))
    return z3.Or(*terms) if terms else z3.BoolVal(False)


def _noop(vm: Machine, s: State):
    return s, scalar(s64(0))


def _load_bytes(vm: Machine, s: State):
    """Copy ``len`` frame bytes to the stack; a length known only symbolically (the
    socket filter's ``min(skb->len, 128)``) copies each byte the buffer can hold
    when it lies below the length."""
    off, to, count = s.reg(2), s.reg(3), s.reg(4)
    if off[0] != "s" or to[0] != "fp" or count[0] != "s":
        raise Unsupported("bpf_skb_load_bytes with a non-numeric offset or length, or a "
                          "buffer not on the stack")
    start, n = z3.Extract(31, 0, off[1]), z3.Extract(31, 0, count[1])
    known = z3.simplify(n)
    room = known.as_long() if z3.is_bv_value(known) else -to[1]
    ok = z3.And(z3.ULE(start, 0x7FFFFFFF), z3.ULE(n, 0x7FFFFFFF),
                z3.ULE(start + n, vm.frame.length))
    stack = dict(s.stack)
    for i in range(room):
        byte = z3.If(ok, z3.Select(s.data, start + i), z3.BitVecVal(0, 8))
        slot = to[1] + i
        stack[slot] = byte if z3.is_bv_value(known) else z3.If(
            z3.ULT(i, n), byte, s.stack.get(slot, z3.BitVecVal(0, 8)))
    spills = {k: v for k, v in s.spills.items() if not to[1] - 8 < k < to[1] + room}
    return State(s.cond, s.regs, stack, s.data, spills), scalar(
        z3.If(ok, s64(0), s64(EFAULT)))


def _store_bytes(vm: Machine, s: State):
    n = _const(s.reg(4), "the length of bpf_skb_store_bytes")
    start = z3.Extract(31, 0, _number(s, 2, "the offset of bpf_skb_store_bytes"))
    ok = z3.And(z3.ULE(start, 0x7FFFFFFF), vm.frame.has(start, n))
    value = _stack_bytes(s, s.reg(3), n)
    data = s.data
    for i in range(n):
        data = z3.Store(data, start + i, z3.Extract(8 * (n - i) - 1, 8 * (n - i - 1), value))
    return State(s.cond, s.regs, s.stack, z3.If(ok, data, s.data), s.spills), scalar(
        z3.If(ok, s64(0), s64(EFAULT)))


def _sum16_at(s: State, at: z3.BitVecRef) -> z3.BitVecRef:
    """The u16 at ``at`` as a little-endian load reads it."""
    return z3.Concat(z3.Select(s.data, at + 1), z3.Select(s.data, at))


def _put16(data: z3.ArrayRef, at: z3.BitVecRef, value: z3.BitVecRef) -> z3.ArrayRef:
    data = z3.Store(data, at, z3.Extract(7, 0, value))
    return z3.Store(data, at + 1, z3.Extract(15, 8, value))


def _csum_replace(vm: Machine, s: State, l4: bool):
    off = z3.Extract(31, 0, _number(s, 2, "a checksum helper's offset"))
    flags = s.reg(5)
    if flags[0] != "s":
        raise Unsupported("checksum helper flags is not a number")
    size = _const(("s", flags[1] & 0xF), "checksum helper size")
    # BPF_F_MARK_MANGLED_0 may depend on the frame (tc's `zero = pr == 17 ? ... : 0`)
    mangled = z3.simplify(flags[1] & 0x20 != 0)
    fr, to = _number(s, 3, "a checksum helper's from"), _number(s, 4, "its to")
    ok = z3.And(z3.ULE(off, 0xFFFF), off & 1 == 0, vm.frame.has(off, 2))
    old = _sum16_at(s, off)
    if size == 0:
        new = csum_fold(csum_add(z3.Extract(31, 0, to), ~z3.ZeroExt(16, old)))
    elif size in (2, 4):
        width = 8 * size
        f32 = z3.ZeroExt(32 - width, z3.Extract(width - 1, 0, fr))
        t32 = z3.ZeroExt(32 - width, z3.Extract(width - 1, 0, to))
        if size == 2 and not l4:  # csum_replace2: 16-bit arithmetic
            new = ~_add16(_add16(~old, ~z3.Extract(15, 0, f32)), z3.Extract(15, 0, t32))
        else:
            new = csum_fold(csum_add(csum_add(~z3.ZeroExt(16, old), ~f32), t32))
    else:
        raise Unsupported(f"checksum helper size {size}")
    skip = z3.BoolVal(False)
    if l4 and not z3.is_false(mangled):
        skip = z3.And(mangled, old == 0)
        new = z3.If(z3.And(mangled, new == 0), z3.BitVecVal(0xFFFF, 16), new)
    write = z3.And(ok, z3.Not(skip))
    data = z3.If(write, _put16(s.data, off, new), s.data)
    return State(s.cond, s.regs, s.stack, data, s.spills), scalar(
        z3.If(ok, s64(0), s64(EFAULT)))


def _add16(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    total = a + b
    return total + z3.If(z3.ULT(total, b), z3.BitVecVal(1, 16), z3.BitVecVal(0, 16))


def _csum_diff(vm: Machine, s: State):
    from_size = _const(s.reg(2), "bpf_csum_diff's from size")
    to_size = _const(s.reg(4), "bpf_csum_diff's to size")
    seed = z3.Extract(31, 0, s.reg(5)[1]) if s.reg(5)[0] == "s" else z3.BitVecVal(0, 32)
    total = seed
    for ptr, size, flip in ((s.reg(1), from_size, True), (s.reg(3), to_size, False)):
        for i in range(0, size, 4):
            raw = _stack_bytes(s, (ptr[0], ptr[1] + i) if ptr[0] == "fp" else ptr, 4)
            word = z3.Concat(*[z3.Extract(8 * j + 7, 8 * j, raw) for j in range(4)])
            total = csum_add(total, ~word if flip else word)
    return s, scalar(z3.ZeroExt(32, total))


HELPERS = {1: _lookup, 2: _noop, 3: _noop, 26: _load_bytes, 189: _load_bytes,
           39: _noop, 9: _store_bytes, 28: _csum_diff, 181: ebpf_calls.bpf_loop,
           10: lambda vm, s: _csum_replace(vm, s, False),
           11: lambda vm, s: _csum_replace(vm, s, True)}
