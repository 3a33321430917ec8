"""The values a term can take, when they are few: dead branches and loop bounds.

The symbolic executor asks, at every conditional jump, whether the test is constant
(the verifier prunes such branches too), and, at ``bpf_loop``, how many times the
callback can run. ``z3.simplify`` answers the first on small terms, but the
classifier's terms read its maps (trees of a table's values, conditions on the
frame), and simplifying them again at each jump cost more than the proof. Here a term
is evaluated to the set of values it can take: a constant is itself, an ``If`` is the
union of its branches (of one, when its condition is constant), an operation is
applied to every combination; anything reading the frame (a free variable) is
*unknown*. Every subterm's set is remembered across calls (the terms are shared), so
each map tree is walked once. The sets over-approximate: a test whose every value is
false is dead; the largest count bounds a loop.
"""

from __future__ import annotations

import itertools

import z3

MAX_VALUES = 256  # a larger set is unknown
MAX_PAIRS = 8192  # combinations tried for one operation


def _mask(bits: int) -> int:
    return (1 << bits) - 1


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


_BINARY = {
    z3.Z3_OP_BADD: lambda a, b, n: a + b, z3.Z3_OP_BSUB: lambda a, b, n: a - b,
    z3.Z3_OP_BMUL: lambda a, b, n: a * b, z3.Z3_OP_BAND: lambda a, b, n: a & b,
    z3.Z3_OP_BOR: lambda a, b, n: a | b, z3.Z3_OP_BXOR: lambda a, b, n: a ^ b,
    z3.Z3_OP_BSHL: lambda a, b, n: a << b if b < n else 0,
    z3.Z3_OP_BLSHR: lambda a, b, n: a >> b if b < n else 0,
    z3.Z3_OP_BASHR: lambda a, b, n: _signed(a, n) >> min(b, n - 1),
    z3.Z3_OP_BUDIV: lambda a, b, n: a // b if b else _mask(n),
    z3.Z3_OP_BUDIV_I: lambda a, b, n: a // b if b else _mask(n),
    z3.Z3_OP_BUREM: lambda a, b, n: a % b if b else a,
    z3.Z3_OP_BUREM_I: lambda a, b, n: a % b if b else a,
    z3.Z3_OP_EQ: lambda a, b, n: int(a == b), z3.Z3_OP_ULT: lambda a, b, n: int(a < b),
    z3.Z3_OP_ULEQ: lambda a, b, n: int(a <= b), z3.Z3_OP_UGT: lambda a, b, n: int(a > b),
    z3.Z3_OP_UGEQ: lambda a, b, n: int(a >= b),
    z3.Z3_OP_SLT: lambda a, b, n: int(_signed(a, n) < _signed(b, n)),
    z3.Z3_OP_SLEQ: lambda a, b, n: int(_signed(a, n) <= _signed(b, n)),
    z3.Z3_OP_SGT: lambda a, b, n: int(_signed(a, n) > _signed(b, n)),
    z3.Z3_OP_SGEQ: lambda a, b, n: int(_signed(a, n) >= _signed(b, n)),
    z3.Z3_OP_DISTINCT: lambda a, b, n: int(a != b),
}
_FOLD = {z3.Z3_OP_BADD, z3.Z3_OP_BMUL, z3.Z3_OP_BAND, z3.Z3_OP_BOR, z3.Z3_OP_BXOR,
         z3.Z3_OP_AND, z3.Z3_OP_OR}


class Values:
    """One cache of subterms' value sets (one per symbolic run)."""

    def __init__(self):
        self.memo: dict[int, frozenset | None] = {}
        self.keep: list = []  # the terms whose ids the memo holds (ids are reused)
        self.heavy = False  # big map tables were read: z3.simplify is too slow here

    def constant(self, e: z3.ExprRef):
        """The one value ``e`` takes, or None: from the value sets, and from
        ``z3.simplify`` while no big table was read."""
        got = self.of(e)
        if got is not None and len(got) == 1:
            return next(iter(got))
        if self.heavy:
            return None
        k = z3.simplify(e)
        if z3.is_true(k) or z3.is_false(k):
            return int(z3.is_true(k))
        return k.as_long() if z3.is_bv_value(k) else None

    def of(self, e: z3.ExprRef) -> frozenset | None:
        """The values ``e`` can take (booleans as 0 and 1), or None: unknown."""
        self.keep.append(e)
        ctx = e.ctx.ref()
        memo = self.memo
        stack = [e.as_ast()]
        while stack:
            top = stack[-1]
            key = A.Z3_get_ast_id(ctx, top)
            if key in memo:
                stack.pop()
                continue
            todo = [c for c in self._inputs(ctx, top) if A.Z3_get_ast_id(ctx, c) not in memo]
            if todo:
                stack += todo
                continue
            stack.pop()
            memo[key] = self._eval(ctx, top)
        return memo[A.Z3_get_ast_id(ctx, e.as_ast())]

    def bound(self, e: z3.ExprRef) -> int | None:
        """The largest value ``e`` can take, or None. The sets do not relate two uses
        of one subterm (a popcount reads its word several times: 5 possible words
        of at most 5 bits give counts up to 96), so the shared subterm with the
        fewest values is enumerated, each value substituted, and the results joined."""
        got = self.of(e)
        if got is None:
            return None
        shared = self._shared(e)
        if shared is None:
            return max(got)
        node, values = shared
        best = 0
        for v in values:
            k = self.of(z3.substitute(e, (node, z3.BitVecVal(v, node.size()))))
            if k is None:
                return max(got)
            best = max(best, max(k))
        return min(best, max(got))

    def _shared(self, e):
        ctx, memo = e.ctx.ref(), self.memo
        parents: dict[int, int] = {}
        nodes, stack = {}, [e.as_ast()]
        while stack:
            a = stack.pop()
            for c in self._inputs(ctx, a):
                key = A.Z3_get_ast_id(ctx, c)
                vals = memo.get(key)
                if vals is None or len(vals) < 2 or _bits(ctx, c) == 1:
                    continue
                parents[key] = parents.get(key, 0) + 1
                if key not in nodes:
                    nodes[key] = c
                    stack.append(c)
        best = min((k for k, n in parents.items() if n > 1),
                   key=lambda k: len(memo[k]), default=None)
        if best is None:
            return None
        return z3.BitVecRef(nodes[best], e.ctx), memo[best]

    def _inputs(self, ctx, a) -> list:
        if A.Z3_get_ast_kind(ctx, a) != z3.Z3_APP_AST:
            return []
        n = A.Z3_get_app_num_args(ctx, a)
        if n == 3 and _kind(ctx, a) == z3.Z3_OP_ITE:
            c = A.Z3_get_app_arg(ctx, a, 0)
            cond = self.memo.get(A.Z3_get_ast_id(ctx, c), False)
            if cond is False:
                return [c]
            if cond == ONE:
                return [A.Z3_get_app_arg(ctx, a, 1)]
            if cond == ZERO:
                return [A.Z3_get_app_arg(ctx, a, 2)]
            return [A.Z3_get_app_arg(ctx, a, 1), A.Z3_get_app_arg(ctx, a, 2)]
        return [A.Z3_get_app_arg(ctx, a, i) for i in range(n)]

    def _eval(self, ctx, a) -> frozenset | None:
        kind = A.Z3_get_ast_kind(ctx, a)
        if kind == z3.Z3_NUMERAL_AST:
            return frozenset([int(A.Z3_get_numeral_string(ctx, a))])
        if kind != z3.Z3_APP_AST:
            return None
        op = _kind(ctx, a)
        if op in (z3.Z3_OP_TRUE, z3.Z3_OP_FALSE):
            return ONE if op == z3.Z3_OP_TRUE else ZERO
        n = A.Z3_get_app_num_args(ctx, a)
        if n == 0:
            return None
        memo = self.memo

        def arg(i):
            return memo[A.Z3_get_ast_id(ctx, A.Z3_get_app_arg(ctx, a, i))]
        if op == z3.Z3_OP_ITE:
            cond = arg(0)
            if cond is not None and len(cond) == 1:
                return arg(1 if 1 in cond else 2)
            x, y = arg(1), arg(2)
            return None if x is None or y is None else _cap(x | y)
        args = [arg(i) for i in range(n)]
        if any(x is None for x in args):
            return None
        return _apply(_Node(ctx, a, op), op, args)


A = z3.z3core
ONE, ZERO = frozenset([1]), frozenset([0])


def _kind(ctx, a) -> int:
    return A.Z3_get_decl_kind(ctx, A.Z3_get_app_decl(ctx, a))


def _bits(ctx, a) -> int:
    sort = A.Z3_get_sort(ctx, a)
    if A.Z3_get_sort_kind(ctx, sort) != z3.Z3_BV_SORT:
        return 1
    return A.Z3_get_bv_sort_size(ctx, sort)


class _Node:
    """What :func:`_apply` asks of a term, from the C API (the Python wrappers cost
    more than the evaluation)."""

    def __init__(self, ctx, a, op):
        self.ctx, self.a, self.op = ctx, a, op

    def size(self) -> int:
        return _bits(self.ctx, self.a)

    def arg_size(self, i: int) -> int:
        return _bits(self.ctx, A.Z3_get_app_arg(self.ctx, self.a, i))

    def num_args(self) -> int:
        return A.Z3_get_app_num_args(self.ctx, self.a)

    def params(self) -> tuple[int, int]:
        decl = A.Z3_get_app_decl(self.ctx, self.a)
        return (A.Z3_get_decl_int_parameter(self.ctx, decl, 0),
                A.Z3_get_decl_int_parameter(self.ctx, decl, 1))


def _apply(e, kind, args) -> frozenset | None:
    bits, width = e.size(), e.arg_size(0)
    mask = _mask(bits)
    if kind == z3.Z3_OP_NOT:
        return frozenset(1 - a for a in args[0])
    if kind == z3.Z3_OP_BNOT:
        return frozenset(~a & mask for a in args[0])
    if kind == z3.Z3_OP_BNEG:
        return frozenset(-a & mask for a in args[0])
    if kind == z3.Z3_OP_EXTRACT:
        hi, lo = e.params()
        return frozenset((a >> lo) & _mask(hi - lo + 1) for a in args[0])
    if kind in (z3.Z3_OP_ZERO_EXT,):
        return args[0]
    if kind == z3.Z3_OP_SIGN_EXT:
        return frozenset(_signed(a, width) & mask for a in args[0])
    if kind == z3.Z3_OP_CONCAT:
        sizes = [e.arg_size(i) for i in range(e.num_args())]
        return _combine(args, lambda vs: _concat(vs, sizes))
    if kind in (z3.Z3_OP_AND, z3.Z3_OP_OR):
        op = min if kind == z3.Z3_OP_AND else max
        return _combine(args, op)
    if kind in _BINARY and (len(args) == 2 or kind in _FOLD):
        f = _BINARY[kind]

        def fold(vs):
            out = vs[0]
            for v in vs[1:]:
                out = f(out, v, width) & mask
            return out
        return _combine(args, fold)
    return None


def _concat(vs, sizes) -> int:
    out = 0
    for v, n in zip(vs, sizes, strict=True):
        out = out << n | v
    return out


def _combine(args, f) -> frozenset | None:
    total = 1
    for a in args:
        total *= len(a)
        if total > MAX_PAIRS:
            return None
    return _cap(frozenset(f(list(vs)) for vs in itertools.product(*args)))


def _cap(values: frozenset) -> frozenset | None:
    return values if len(values) <= MAX_VALUES else None
