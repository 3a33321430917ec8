"""The optimiser: plain functions over the test graph, run to a fixed point.

- :func:`thread_jumps` (redundant-test removal): for every edge, the facts known on
  it (what every path to it has tested: ranges, excluded values, known-zero and
  known-set bits, per value: ``cbpf.facts``) decide later tests, and the edge is
  moved past them (nodes last to first, runs of ``jeq`` crossed in one step). A
  policy checks the EtherType, a length and the IPv4 header once, not once per rule.
  Facts come only from tests that ran, so they are true of every packet on the edge;
  moving an edge only adds packets to a node that its facts already describe.
  *Implications* add what the domain knows and the tests do not show (an accepted
  IPv4 header proves the frame holds 34 bytes: ``cbpf_cfg.IMPLICATIONS``).
- :func:`skip_useless` (dead tests): a test whose two edges meet is bypassed.
- :func:`merge_equal`: nodes with the same test and successors become one.
- dead code: only nodes reachable from the root are ever laid out.
- :func:`fuse_words` (after the fixed point): two equality tests in a row on one
  4-byte word, failing to the same node, become one masked word compare.
- :func:`drop_guards` (last, once): a length guard whose false edge is ``drop`` is
  bypassed when every path from its true edge to ``pass`` loads a byte at or past the
  guard's bound, or passes tests that prove the length (an accepted IPv4 header is
  34 bytes long): a packet that fails the guard then meets that load, which ends the
  program with 0 (drop) in the kernel and libpcap alike, or fails the tests, or
  reaches ``drop``. Every packet that failed the guard was bound for ``drop``.

Redundant loads are removed later, by the assembler (``cbpf_asm``), which knows what A
and X hold on every edge.
"""

from __future__ import annotations

import bisect

from pfc.backends.cbpf.facts import Facts, Implication, decide, facts_in, learn
from pfc.backends.cbpf.graph import (
    LEN,
    Graph,
    Node,
    Step,
    Test,
    XState,
    load,
    predecessors,
    reachable,
)

MAX_ROUNDS = 50
INF = 1 << 40


# ------------------------------------------------------------------------------- passes

def thread_jumps(graph: Graph, implications: tuple[Implication, ...] = ()) -> bool:
    """Move every edge past the tests its facts decide. True if anything moved.

    Nodes are taken from the last to the first, so an edge's walk goes through
    successors whose own edges already skip what they decide: it meets only tests its
    own facts settle. A walk that knows a value exactly crosses a run of ``jeq`` tests
    on it in one step (:class:`_Run`): a policy of n rules ``drop udp dport P sport Q``
    would otherwise walk every later rule's port test from every rule, n²/2 steps."""
    order = reachable(graph.root)
    known = facts_in(order, implications)
    runs: dict[int, tuple[_Run, int]] = {}
    changed = False
    for node in reversed(order):
        base = known[node.nid]
        if node.is_leaf or base is None:
            continue
        for outcome in (True, False):
            edge = learn(base, node.test, outcome, implications)
            if edge is None:
                continue
            target = _follow(edge, node.succ(outcome), runs)
            if target is not node.succ(outcome):
                node.set_succ(outcome, target)
                changed = True
        _Run.extend(runs, node)
    return changed


def _follow(edge: Facts, target: Node, runs: dict[int, tuple[_Run, int]]) -> Node:
    """Where an edge with facts ``edge`` aimed at ``target`` can go instead."""
    while not target.is_leaf:
        at = runs.get(target.nid)
        fact = edge.get(target.test.fact) if at is not None else None
        if fact is not None and fact.lo == fact.hi:
            target = at[0].after(at[1], fact.lo)
            continue
        answer = decide(edge, target.test)
        if answer is None:
            break
        target = target.succ(answer)
    return target


class _Run:
    """``jeq`` tests on one value, each the false successor of the one before: for a
    value known exactly, the walk through them ends at the true successor of the first
    that tests that value, or past the last. ``nodes`` is kept last first, so a run
    grows at its head as the pass moves up; ``index[k]``: where ``jeq #k`` stands."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.index: dict[int, list[int]] = {}

    @staticmethod
    def extend(runs: dict[int, tuple[_Run, int]], node: Node) -> None:
        """Put ``node`` (its edges final) at the head of its false successor's run."""
        test = node.test
        if test.op != "jeq" or test.k is None:
            return
        at = runs.get(node.jf.nid)
        run = at[0] if at is not None and node.jf.test.fact == test.fact and \
            at[1] == len(at[0].nodes) - 1 else _Run()
        runs[node.nid] = (run, len(run.nodes))
        run.index.setdefault(test.k, []).append(len(run.nodes))
        run.nodes.append(node)

    def after(self, position: int, value: int) -> Node:
        """Where a walk entering the run at ``position`` with A = ``value`` goes."""
        places = self.index.get(value, ())
        i = bisect.bisect_right(places, position) - 1
        return self.nodes[places[i]].jt if i >= 0 else self.nodes[0].jf


def _rewrite(graph: Graph, replace_of: dict[int, Node]) -> None:
    def final(node: Node) -> Node:
        while node.nid in replace_of:
            node = replace_of[node.nid]
        return node
    for node in reachable(graph.root):
        if not node.is_leaf:
            node.jt, node.jf = final(node.jt), final(node.jf)
    graph.root = final(graph.root)


def skip_useless(graph: Graph) -> bool:
    """Bypass tests whose edges go to the same node (only while every load is guarded)."""
    useless = {n.nid: n.jt for n in reachable(graph.root) if not n.is_leaf and n.jt is n.jf}
    _rewrite(graph, useless)
    return bool(useless)


def merge_equal(graph: Graph) -> bool:
    """One node per (test, successors), merging from the leaves up."""
    canon: dict[tuple, Node] = {}
    replace_of: dict[int, Node] = {}

    def final(node: Node) -> Node:
        return replace_of.get(node.nid, node)
    for node in reversed(reachable(graph.root)):
        if node.is_leaf:
            continue
        key = (node.test, final(node.jt).nid, final(node.jf).nid)
        if key in canon and canon[key] is not node:
            replace_of[node.nid] = canon[key]
        else:
            canon[key] = node
    _rewrite(graph, replace_of)
    return bool(replace_of)


def optimise(graph: Graph, implications: tuple[Implication, ...] = ()) -> Graph:
    """All passes to a fixed point, then the guards (module doc). ``implications``
    are facts of the domain the tests alone do not show (``cbpf_cfg.IMPLICATIONS``)."""
    for _ in range(MAX_ROUNDS):
        changed = thread_jumps(graph, implications)
        changed = skip_useless(graph) or changed
        changed = merge_equal(graph) or changed
        if not changed:
            break
    while fuse_words(graph, implications):
        pass
    drop_guards(graph, implications)
    merge_equal(graph)
    return graph


# --------------------------------------------------------------------------- fusing

Equality = tuple[int, int, int, int, Node, Node]  # offset, size, mask, value, go on, fail


def equality(node: Node) -> Equality | None:
    """(offset, size, mask, value, go-on, fail) when the node continues only if
    ``[offset:offset+size] & mask == value`` (an absolute load; ``jeq``, or ``jset``
    continuing when the bits are clear)."""
    t = node.test
    if node.is_leaf or t.k is None or t.value[0].op != "ld" or len(t.value) > 2 or \
            (len(t.value) == 2 and t.value[1].op != "and"):
        return None
    offset, size = t.value[0].k, t.value[0].size
    full = (1 << (8 * size)) - 1
    mask = t.value[1].k & full if len(t.value) == 2 else full
    if t.op == "jeq" and t.k & ~mask == 0:
        return offset, size, mask, t.k, node.jt, node.jf
    if t.op == "jset" and len(t.value) == 1:
        return offset, size, t.k & full, 0, node.jf, node.jt
    return None


def fuse_words(graph: Graph, implications: tuple[Implication, ...] = ()) -> bool:
    """Two equality tests in a row on bytes of one 4-byte word, failing to the same
    place, become one masked word compare (``ld [20]; and #0x1fff00ff; jeq #0x11``:
    first fragment and UDP). Only where the facts show the whole word is present, and
    the second test has no other way in. Every pair of the graph in one pass (a fusion
    changes which packets reach no other node, so the facts stay true); True if a pair
    was fused (the fused test may pair with its new successor: run again)."""
    order = reachable(graph.root)
    preds = predecessors(order)
    known = facts_in(order, implications)
    fused: set[int] = set()
    for node in order:
        a = equality(node)
        if a is None or known[node.nid] is None or node.nid in fused:
            continue
        b = equality(a[4])
        if b is None or b[5] is not a[5] or len(preds[a[4].nid]) != 1:
            continue
        word = _fused(a, b, known[node.nid])
        if word is not None:
            fused.update((node.nid, a[4].nid))
            node.test, node.jt, node.jf = word, b[4], a[5]
    return bool(fused)


def _fused(a: Equality, b: Equality, facts: Facts) -> Test | None:
    """The one word compare meaning both ``a`` and ``b``, or None."""
    end = max(a[0] + a[1], b[0] + b[1])
    if end - 4 > min(a[0], b[0]) or end < 4 or \
            decide(facts, Test(LEN, "jge", end)) is not True:
        return None
    mask = value = 0
    for offset, size, m, v, *_ in (a, b):
        shift = 8 * (end - offset - size)
        if (value ^ (v << shift)) & mask & (m << shift):
            return None  # the two tests contradict each other: leave them
        mask, value = mask | (m << shift), value | (v << shift)
    word = load(4, end - 4) + (() if mask == 0xFFFFFFFF else (Step("and", mask),))
    return Test(word, "jeq", value)


# ------------------------------------------------------------------------------- guards

def x_setup_ends(x: XState, l3: int) -> tuple[int, dict[XState, int]]:
    """How far setting up X reaches (``cbpf_asm.x_setup``, the IP header at ``l3``):
    absolute, and relative to the X state it computes with."""
    return {XState.IHL: (l3 + 1, {}), XState.LEN: (0, {}),
            XState.TCP4: (l3 + 1, {XState.IHL: l3 + 13}),
            XState.TCP6: (l3 + 53, {})}[x]


def load_ends(test: Test, l3: int = 14) -> tuple[int, dict[XState, int]]:
    """How far the node's loads reach: absolute, and relative to each X state."""
    absolute, relative = x_setup_ends(test.x, l3) if test.x else (0, {})
    relative = dict(relative)
    for step in test.value:
        if step.op == "ld":
            absolute = max(absolute, step.k + step.size)
        elif step.op == "ldx":
            relative[test.x] = max(relative.get(test.x, 0), step.k + step.size)
    return absolute, relative


def witnesses(graph: Graph, implications: tuple[Implication, ...] = ()):
    """Per node, how far every path from it to ``pass`` is known to reach: the largest
    N such that a packet shorter than N meets a load that ends the program first, or
    fails a test on the way (``implications``: tests that, all passed, prove a length).

    Returns (absolute, relative): ``absolute[nid][mask]`` for each set (bit mask) of
    implication conditions already passed on the way to the node; ``relative[nid]``
    per X state, for loads at X + k. Computed from the leaves up, once for all guards.
    """
    conditions = [c for conds, _ in implications for c in conds]
    bit = {c: 1 << i for i, c in enumerate(conditions)}
    masks = range(1 << len(conditions))

    def implied(mask: int) -> int:
        out, at = 0, 0
        for conds, consequence in implications:
            need = sum(1 << (at + i) for i in range(len(conds)))
            at += len(conds)
            if mask & need == need:
                out = max(out, consequence.k)
        return out

    absolute: dict[int, list[int]] = {}
    relative: dict[int, dict[XState, int]] = {}
    for node in reversed(reachable(graph.root)):
        if node.is_leaf:
            dropped = node is graph.dropped
            absolute[node.nid] = [INF if dropped else implied(m) for m in masks]
            relative[node.nid] = {s: INF for s in XState} if dropped else {}
            continue
        own_abs, own_rel = load_ends(node.test, graph.link.l3)
        at, af = absolute[node.jt.nid], absolute[node.jf.nid]
        bt, bf = bit.get((node.test, True), 0), bit.get((node.test, False), 0)
        absolute[node.nid] = [max(own_abs, min(at[m | bt], af[m | bf])) for m in masks]
        rt, rf = relative[node.jt.nid], relative[node.jf.nid]
        relative[node.nid] = {s: max(own_rel.get(s, 0), min(rt.get(s, 0), rf.get(s, 0)))
                              for s in XState}
    return absolute, relative


def drop_guards(graph: Graph, implications: tuple[Implication, ...] = ()) -> int:
    """Bypass the guards the program's own loads and tests make redundant (module
    doc). Only loads and the implications' tests count as proof, never another guard:
    guards may go away together."""
    absolute, relative = witnesses(graph, implications)
    gone: dict[int, Node] = {}
    for node in reachable(graph.root):
        test = node.test
        if node.is_leaf or not test.guard or node.jf is not graph.dropped:
            continue
        reach = absolute[node.jt.nid][0] if test.x is None else \
            relative[node.jt.nid].get(test.x, 0)
        if reach >= test.k:
            gone[node.nid] = node.jt
    _rewrite(graph, gone)
    return len(gone)
