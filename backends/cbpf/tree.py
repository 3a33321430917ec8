"""Many different rules (issue 16): worlds, binary searches and chains.

A policy of ``MIN_RULES`` IPv4 rules or more is not one chain: the program first sorts
the frame into a *world* by the tests every rule would make anyway (so they are made
once, not once per rule), then runs the world's rules as *segments* in order:

- a **group** (``Segments``): consecutive rules that each name ``dst`` (or each
  ``src``) as one interval, the intervals of different rules equal or disjoint. A
  binary search (``jge`` on the sorted lows, then the interval's bounds) finds the one
  interval the address lies in; its rules are tested in order, their address test
  already decided (the optimiser threads past it); no interval, or no rule that
  holds: the next segment. Rules of other intervals cannot hold, so the first rule
  that holds is the list's. A packet meets log2(k) compares for k intervals.
- a **chain**: the rules in order, as today.

Worlds (semantics.md "Reading a frame"; the tests are ``cbpf_cfg``'s):

- not IPv4 (EtherType, or the version nibble on ``--link ip``): the rules of IPv6 or
  of both families, as today's chain;
- IPv4 shorter than the fixed header (``len < L3 + 20``): the rules that read neither
  ``dst`` nor the transport header, as a chain;
- IPv4 with the header the kernel accepts and the transport bytes every transport rule
  needs (``cbpf_cfg.validity`` with ``l4_base``; its length compare first, so X holds
  4*IHL for every later transport load): every IPv4 rule;
- other IPv4 frames with the fixed header: the rules without transport matches (the
  others cannot hold there).

In these the rules' family, length and header tests are left out (the world made
them); a rule that needs more transport bytes than ``l4_base`` keeps its own bound.
:func:`plan` estimates the size before any graph is built, so a policy far beyond
4096 instructions is refused at once; ``plan(groups=False)`` makes chains only, the
smaller program (a search costs about a compare more per interval than a chain's run
of ``jeq``), which the backend tries when the searches do not fit.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass

from pfc.backends.cbpf import cfg
from pfc.backends.cbpf import match as cm
from pfc.backends.cbpf.graph import LEN, Graph, Node, Test, Value, XState, leaves, load
from pfc.frontend import ir

MIN_RULES = 128  # smaller policies keep the chain (today's output; tests force it lower)
MIN_GROUP = 8  # a group of fewer intervals is a chain

Interval = tuple[int, int]


KEYS = {"dst": 16, "src": 12}  # the IPv4 address fields a group can search
TOP = 0xFFFFFFFF


@dataclass
class Group:
    """Rules whose values of ``key`` are one interval each, the intervals of different
    rules equal or disjoint: sorted, each with its rules in order."""

    key: str
    spans: list[tuple[int, int, list[ir.Rule]]]


Segment = Group | list[ir.Rule]


def span(rule: ir.Rule, key: str) -> tuple[int, int] | None:
    """The one interval of IPv4 addresses ``rule`` allows in ``key``, if it names the
    field once, unnegated, with prefixes that make one interval."""
    found = [m for m in rule.matches if m.field == key]
    if len(found) != 1 or not isinstance(found[0], ir.AddrMatch) or found[0].negated:
        return None
    iv = cm.merge(cm._spans([p for p in found[0].prefixes if p.version == 4]), TOP)
    return iv[0] if len(iv) == 1 else None


class Segments:
    """The rules of a world, in order, as groups and chains (module doc): a rule joins
    the open group when its interval of the group's key is one of the group's or meets
    none of them; otherwise the group is closed."""

    def __init__(self, groups: bool = True) -> None:
        self.groups = groups  # False: every rule in chains (the smaller program)
        self.out: list[Segment] = []
        self.key: str | None = None
        self.spans: dict[tuple[int, int], list[ir.Rule]] = {}
        self.starts: list[tuple[int, int]] = []  # the intervals of ``spans``, sorted

    def run(self, rules: list[ir.Rule]) -> list[Segment]:
        self.pos = {id(r): i for i, r in enumerate(rules)}
        for rule in rules:
            if not self.join(rule):
                self.close()
                key = next((k for k in KEYS if span(rule, k) is not None), None)
                if key is None:
                    self.chain([rule])
                else:
                    self.key = key
                    self.join(rule)
        self.close()
        return self.out

    def join(self, rule: ir.Rule) -> bool:
        iv = span(rule, self.key) if self.key else None
        if iv is None:
            return False
        if iv not in self.spans:
            i = bisect.bisect_right(self.starts, (iv[1], TOP))
            if i and self.starts[i - 1][1] >= iv[0]:  # the interval below reaches it
                return False
            bisect.insort(self.starts, iv)
        self.spans.setdefault(iv, []).append(rule)
        return True

    def close(self) -> None:
        if self.groups and len(self.spans) >= MIN_GROUP:
            self.out.append(Group(self.key, sorted((lo, hi, rules) for (lo, hi), rules
                                                   in self.spans.items())))
        else:
            self.chain([r for rules in self.spans.values() for r in rules])
        self.key, self.spans, self.starts = None, {}, []

    def chain(self, rules: list[ir.Rule]) -> None:
        """Rules to test in order, after the chain before (they all come later)."""
        rules = sorted(rules, key=lambda r: self.pos[id(r)])
        if not rules:
            return
        if self.out and isinstance(self.out[-1], list):
            self.out[-1].extend(rules)
        else:
            self.out.append(rules)


def estimate(segments: list[Segment]) -> int:
    """About how many instructions the segments take: ``_cost`` per rule, a compare
    per interval of a group (whose rules' address compare is decided)."""
    total = 0
    for seg in segments:
        if isinstance(seg, Group):
            total += sum(1 + sum(_cost(r) - 1 for r in rules) for _, _, rules in seg.spans)
        else:
            total += sum(_cost(r) for r in seg)
    return total


@dataclass
class Plan:
    """The worlds' rules (module doc)."""

    other: list[ir.Rule]  # not IPv4
    short: list[ir.Rule]  # IPv4 without the fixed header
    valid: list[Segment]  # header and transport bytes: every IPv4 rule
    plain: list[Segment]  # the fixed header: rules without transport matches
    size: int  # estimate


def applies(policy: ir.Policy) -> bool:
    """At least ``MIN_RULES`` IPv4 rules (the worlds and searches are IPv4's)."""
    return sum(r.family is not ir.Family.ANY and 4 in r.family.versions
               for r in policy.rules) >= MIN_RULES


def plan(policy: ir.Policy, l3: int, groups: bool = True) -> Plan:
    """The worlds and their segments; ``groups=False``: chains only (no searches)."""
    v4 = [r for r in policy.rules if r.family is ir.Family.ANY or 4 in r.family.versions]
    other = [r for r in policy.rules if r.family is ir.Family.ANY or 6 in r.family.versions]
    short = [r for r in v4 if r.family is ir.Family.ANY or (
        not _has_l4(r) and cfg.ip_end(r, 4, l3) < l3 + cfg.IP4_HLEN)]
    valid = Segments(groups).run(v4) if cfg.l4_base(policy, l3) else []
    plain = Segments(groups).run([r for r in v4 if not _has_l4(r)])
    size = (sum(_cost(r, 6) for r in other) + sum(_cost(r) for r in short) +
            estimate(valid) + estimate(plain) + 12 - _repeated(policy))
    return Plan(other, short, valid, plain, size)


def _repeated(policy: ir.Policy) -> int:
    """What ``estimate`` counts for rules that repeat an earlier rule's matches (they
    never decide: the optimiser removes them)."""
    seen: set = set()
    total = 0
    for rule in policy.rules:
        key = (rule.family, rule.proto, tuple(
            dataclasses.replace(m, span=None) if hasattr(m, "span") else m
            for m in rule.matches))
        try:
            if key in seen:
                total += _cost(rule) * (len(rule.family.versions)
                                        if rule.family is not ir.Family.ANY else 1)
            seen.add(key)
        except TypeError:  # a match that cannot be hashed: counted
            continue
    return total


def _has_l4(rule: ir.Rule) -> bool:
    return any(ir.FIELDS[m.field].layer is ir.Layer.TRANSPORT for m in rule.matches)


def _cost(rule: ir.Rule, version: int = 4) -> int:
    """About how many compares the rule's tests for one family take, loads left out
    (a run of rules often shares them): an estimate low rather than high, so that no
    policy that would fit is refused by it."""
    if rule.family is ir.Family.ANY:
        return 1
    return (rule.proto is not None) + sum(cm.tests_needed(m, (version,))
                                          for m in rule.matches)


# ------------------------------------------------------------------------------ graph

def build(policy: ir.Policy, link, the_plan: Plan) -> Graph:
    """The program of ``the_plan`` (module doc), as cbpf_cfg's graph."""
    passed, dropped = leaves()
    b = cfg.Builder(cfg.l4_base(policy, link.l3), link)
    lay = b.lay
    default = passed if policy.default is ir.Verdict.PASS else dropped
    ends = {"drop": dropped, "pass": passed}

    def chain(rules: list[ir.Rule], blocks, target: Node | None = None) -> Node:
        target = target or default
        for rule in reversed(rules):
            _refuse(rule)
            b.rule = rule.index
            target = blocks(rule)(ends[_verdict(rule)], target)
        return target

    def leaf_blocks(world: str):
        def blocks(rule: ir.Rule) -> cm.Block:
            if rule.family is ir.Family.ANY:
                return cm.always
            return cm.conjunction(_leaf(b, rule, lay, world))
        return blocks

    def search(value: Value, spans, lo: int, hi: int, world: str, nxt: Node) -> Node:
        """Binary search of the sorted ``spans`` for a value known in [lo, hi]."""
        b.rule = None
        if len(spans) > 1:
            mid = len(spans) // 2
            at = spans[mid][0]
            return b.make(Test(value, "jge", at),
                          search(value, spans[mid:], at, hi, world, nxt),
                          search(value, spans[:mid], lo, at - 1, world, nxt))
        first, last, rules = spans[0]
        node = chain(rules, leaf_blocks(world), nxt)
        b.rule = None
        if first == last and (lo, hi) != (first, last):
            return b.make(Test(value, "jeq", first), node, nxt)
        if last < hi:
            node = b.make(Test(value, "jgt", last), nxt, node)
        return b.make(Test(value, "jge", first), node, nxt) if first > lo else node

    def walk(segments: list[Segment], world: str) -> Node:
        nxt = default
        for seg in reversed(segments):
            if isinstance(seg, Group):
                value = load(4, lay.l3 + KEYS[seg.key])
                nxt = search(value, seg.spans, 0, TOP, world, nxt)
            else:
                nxt = chain(seg, leaf_blocks(world), nxt)
        return nxt

    full = lambda rule: cfg.rule_block(b, rule)  # noqa: E731
    other = chain(the_plan.other, full)
    short = chain(the_plan.short, full)
    plain = walk(the_plan.plain, "plain")
    valid = walk(the_plan.valid, "valid")
    b.rule = None
    checks = cm.conjunction([cfg._test(b.make, t, s) for t, s in lay.family[4]])
    header = cfg._test(b.make, Test(LEN, "jge", lay.l3 + cfg.IP4_HLEN, guard=True))
    tests = cfg.validity(b.make, b.l4_base, 4, lay)
    # the length compare (X = len) first, so X holds 4*IHL for the whole tree
    validity = cm.conjunction([tests[2], *tests[:2], *tests[3:]]) if b.l4_base \
        else cm.never
    root = checks(header(validity(valid, plain), short), other)
    return Graph(root, passed, dropped, link)


def _leaf(b: cfg.Builder, rule: ir.Rule, lay: cfg.Layout, world: str) -> list[cm.Block]:
    """The rule's IPv4 tests after the world's: no family, length or header tests."""
    make = b.make
    transport = [m for m in rule.transport_matches if not isinstance(m, ir.PayloadMatch)]
    payloads = [m for m in rule.matches if isinstance(m, ir.PayloadMatch)]
    blocks: list[cm.Block] = []
    if rule.proto is not None:
        proto = lay.l3 + cfg.IP_FIELDS[4]["proto"][0]
        blocks.append(cfg._test(make, Test(load(1, proto), "jeq", rule.proto)))
    for m in rule.matches:
        if ir.FIELDS[m.field].layer is ir.Layer.IP:
            blocks.append(cfg.ip_match(make, m, 4, lay.l3))
    need = lay.l3 + cfg.l4_end(rule)
    if (transport or payloads) and need > b.l4_base:
        blocks.append(cfg._test(make, Test(cfg.REL, "jge", need, XState.IHL, guard=True)))
    blocks += [cfg.l4_match(make, m, 4, lay.l3) for m in transport]
    if payloads:
        blocks += cfg.payload_blocks(make, rule, 4, payloads, lay.l3)
    return blocks


def _verdict(rule: ir.Rule) -> str:
    return "drop" if isinstance(rule.action, ir.Drop) else "pass"


def _refuse(rule: ir.Rule) -> None:
    if isinstance(rule.action, (ir.Count, ir.Redirect)):
        raise ValueError(f"cbpf cannot express `{rule.action.name}` (rule at line "
                         f"{rule.line}); capability_errors refuses it first")
