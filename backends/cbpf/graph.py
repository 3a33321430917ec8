"""The classic BPF backend's own graph: tests on symbolic values, and returns.

A policy becomes a DAG of :class:`Node` (``cbpf_cfg``); the optimiser (``cbpf_opt``)
rewrites its edges; the assembler (``cbpf_asm``) lays it out as instructions.

A test compares what the accumulator A holds (a :data:`Value`: a short straight-line
computation such as ``ldh [16]; add #14``) with a constant or with the index register
X, which holds one of a few well-known quantities (:class:`XState`). Values and X
states are symbolic, so the optimiser can tell that two tests read the same thing and
the assembler can skip a load whose result A or X already holds.

Classic BPF (Linux ``net/core/filter.c``, ``bpf_check_classic``): 32-bit A and X,
forward jumps only, 8-bit conditional jump offsets, at most ``BPF_MAXINSNS`` = 4096
instructions; a load beyond the packet ends the program with return value 0.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import StrEnum

ETH_HLEN = 14
MAX_INSNS = 4096  # BPF_MAXINSNS, include/uapi/linux/bpf_common.h
PASS_RET = 0x40000  # the whole frame, as libpcap's default snap length (262144)
DROP_RET = 0


@dataclass(frozen=True)
class Link:
    """Where the packet a program reads starts (``pfc compile --link``), as libpcap's
    link types: ``ether`` (DLT_EN10MB), the Ethernet header, as packet sockets and tc
    show it; ``ip`` (DLT_RAW, ``tcpdump -y RAW``), the IP header, as iptables' ``-m
    bpf`` (xt_bpf) shows it. ``l3`` is where the IP header starts."""

    name: str
    l3: int


ETHER = Link("ether", ETH_HLEN)
RAW_IP = Link("ip", 0)
LINKS = {link.name: link for link in (ETHER, RAW_IP)}


class XState(StrEnum):
    """What X holds (L3: where the IP header starts, ``Link.l3``). Each is a function
    of the packet alone, so facts about values computed with X stay true wherever the
    same X state is set up again."""

    IHL = "ihl"  # 4*([L3]&0xf): IPv4 header length (ldxb 4*([14]&0xf) on Ethernet)
    LEN = "len"  # the packet length (ldx #pktlen)
    TCP4 = "tcp4"  # IPv4 header length + TCP data offset * 4 (TCP payload over IPv4)
    TCP6 = "tcp6"  # TCP data offset * 4 (TCP payload over IPv6, fixed header)


@dataclass(frozen=True, slots=True)
class Step:
    """One straight-line instruction that computes A.

    ``ld`` (size, k): absolute load; ``ldx`` (size, k): load at X + k; ``len``: the
    packet length; ``add sub and rsh lsh`` (k): ALU with a constant; ``addx subx``:
    ALU with X.
    """

    op: str
    k: int = 0
    size: int = 0

    @property
    def uses_x(self) -> bool:
        return self.op in ("ldx", "addx", "subx")

    @property
    def is_load(self) -> bool:
        return self.op in ("ld", "ldx")


Value = tuple[Step, ...]


def load(size: int, offset: int) -> Value:
    return (Step("ld", offset, size),)


def load_x(size: int, offset: int) -> Value:
    return (Step("ldx", offset, size),)


LEN: Value = (Step("len"),)


def width_max(value: Value) -> int:
    """The largest number ``value`` can be (a bare load of n bytes: 2**(8n) - 1)."""
    if len(value) == 1 and value[0].is_load:
        return (1 << (8 * value[0].size)) - 1
    return 0xFFFFFFFF


_FACT_KEYS: dict[object, int] = {}


def _fact_key(key: object) -> int:
    """A small integer per distinct key (the optimiser's facts are dicts of them)."""
    return _FACT_KEYS.setdefault(key, len(_FACT_KEYS))


@dataclass(frozen=True, eq=False)
class Test:
    """``A op k`` (or ``A op X`` when ``k`` is None) after A = ``value``.

    ``x`` is the X state the value or the comparison needs (None: X unused).
    ``guard``: a presence check (the packet is long enough for loads that follow);
    its false edge means "a field is absent", and the optimiser may drop it where
    the load itself ending the program with 0 gives the same verdict.

    Equal tests are equal by their fields; the hash and ``fact`` (an integer naming
    what the optimiser keeps facts about: the value and its X state for ``A op k``,
    the whole comparison for ``A op X``) are computed once, because the optimiser
    asks for them millions of times on a large policy.
    """

    value: Value
    op: str  # jeq jgt jge jset
    k: int | None
    x: XState | None = None
    guard: bool = False
    fact: int = field(init=False, repr=False)
    top: int = field(init=False, repr=False)  # the largest value A can hold
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        fields = (self.value, self.op, self.k, self.x, self.guard)
        key = (self.value, self.x if any(s.uses_x for s in self.value) else None)
        fact = _fact_key(key) if self.k is not None else _fact_key((key, self.op, self.x))
        object.__setattr__(self, "fact", fact)
        object.__setattr__(self, "top", width_max(self.value))
        object.__setattr__(self, "_hash", hash(fields))

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Test) and self._hash == other._hash and
            (self.value, self.op, self.k, self.x, self.guard) ==
            (other.value, other.op, other.k, other.x, other.guard))

    def __hash__(self) -> int:
        return self._hash


_ids = itertools.count()


@dataclass(eq=False)
class Node:
    """A test with two successors, or a leaf returning ``ret``."""

    test: Test | None = None
    jt: Node | None = None
    jf: Node | None = None
    ret: int | None = None
    rule: int | None = None  # the rule index whose test this is (for listings)
    nid: int = field(default_factory=lambda: next(_ids))

    @property
    def is_leaf(self) -> bool:
        return self.test is None

    def succ(self, outcome: bool) -> Node:
        return self.jt if outcome else self.jf

    def set_succ(self, outcome: bool, node: Node) -> None:
        if outcome:
            self.jt = node
        else:
            self.jf = node

    def __repr__(self) -> str:
        if self.is_leaf:
            return f"<ret {self.ret:#x}>"
        t = self.test
        operand = "x" if t.k is None else f"#{t.k:#x}"
        return (f"<{self.nid} {'; '.join(s.op for s in t.value)} {t.op} {operand} "
                f"-> {self.jt.nid}/{self.jf.nid}>")


@dataclass
class Graph:
    """The program: a root and the two leaves every path ends in, for a ``link``."""

    root: Node
    passed: Node
    dropped: Node
    link: Link = ETHER


def leaves() -> tuple[Node, Node]:
    return Node(ret=PASS_RET), Node(ret=DROP_RET)


def reachable(root: Node) -> list[Node]:
    """Every node reachable from ``root``, in a topological order (each node before
    its successors): reverse post-order of a depth-first walk, false edge first."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node.nid in seen:
            continue
        seen.add(node.nid)
        stack.append((node, True))
        if not node.is_leaf:
            for nxt in (node.jt, node.jf):
                if nxt.nid not in seen:
                    stack.append((nxt, False))
    order.reverse()
    return order


def predecessors(order: list[Node]) -> dict[int, list[tuple[Node, bool]]]:
    preds: dict[int, list[tuple[Node, bool]]] = {n.nid: [] for n in order}
    for node in order:
        if not node.is_leaf:
            preds[node.jt.nid].append((node, True))
            preds[node.jf.nid].append((node, False))
    return preds
