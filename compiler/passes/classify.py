"""Lowering for large policies (issue 16): a first-match list of many different rules
as a few lookups of disjoint regions, for targets with verdict maps (nft).

Input: a policy whose IP rules have one family each (after ``split_families``).
Output: :func:`classify` returns the policy's rules in order, with each run of at
least ``MIN_RUN`` *mappable* rules replaced by one :class:`Block` per family. A rule is
mappable when its action is ``drop``/``pass``/``count``, its family IPv4 or IPv6 and its
matches only ``src``, ``dst``, ``proto``, ``sport``, ``dport`` (negated or not; lists
of at most ``MAX_PIECES`` boxes: a long list keeps its named set); every
other rule (redirect, ttl, len, flags, icmp-type, frag, payload, protocol ``all``)
stays a rule of the ordered chain, in place, between blocks.

A rule is a box: per field the values that let it hold (a field it does not name: all
of them, absent too). What a frame has decides which *world* of the block it meets
(semantics.md "Reading a frame"), and in each world every field the rules name is
present, so a rule that does not name a key field holds for all of it:

- ``dport``: the transport header pfc reads (IPv4 header the kernel accepts, first
  fragment; IPv6 without extension header; TCP or UDP) with its destination port, so
  also its source port and the whole fixed IP header: *every* rule of the block;
- ``sport``: the same with only the source port (a header cut after 2-3 bytes): the
  rules not naming ``dport``; made only when one of them names ``sport``;
- ``ip``: any other frame with the whole fixed IP header (IPv4 20 bytes, IPv6 40): the
  rules without a transport match;
- ``short``: a frame shorter than that: the rules without ``dst`` nor a transport match
  (the only ones that can hold there), kept as chain rules.

Each world is a list of :class:`Group` s looked up in order (``Grouping``): a group is
the disjoint regions (``regions.split``) of consecutive rules, each region with its
outcome (the count rules that hold there before the first terminal rule, and that
rule, or none: counts only, the next group is looked up). A rule joins the current
group unless that would cut more than ``MAX_NEW`` new regions (a wide rule after
narrow ones: its box minus theirs); then it starts the next group. Groups keep the
rules' order, so first match, the count rules before the decider and every rule's
counter are the ordered list's.

Policies of fewer than ``MIN_RULES`` rules, and shorter runs, are left as they are
(today's output, the goldens). ``tests/backends/test_classify.py`` reads the blocks as
the nft chain does and compares with the interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.matches import complement_ranges as complement
from pfc.frontend.matches import intersect_ranges, merge_ranges
from pfc.passes import regions as rg

MIN_RULES = 64  # smaller policies keep the ordered chain (tests force it lower)
MIN_RUN = 64  # a shorter run of mappable rules stays in the chain
MIN_GROUP = 4  # a smaller group is emitted as chain rules
MAX_NEW = 64  # a rule that would add more regions to its group opens a new one
MAX_PIECES = 16  # a rule whose lists make more boxes stays in the chain (named sets)
FIELDS = ("src", "dst", "proto", "sport", "dport")
TRANSPORT = ("sport", "dport")
TOP = {"proto": 255, "sport": 65535, "dport": 65535}

Intervals = tuple[tuple[int, int], ...]
Box = dict[str, Intervals]


class NotMappable(ValueError):
    """A rule no group can hold (the module doc)."""


@dataclass(frozen=True)
class Group:
    """One lookup: disjoint ``regions`` (one interval per key field, in ``key``
    order) with their outcome."""

    key: tuple[str, ...]  # in FIELDS order
    rules: tuple[ir.Rule, ...]  # in order
    regions: tuple[tuple[tuple[tuple[int, int], ...], rg.Outcome], ...]


@dataclass(frozen=True)
class Block:
    """A run of mappable rules of one family (module doc): per kind of frame the
    groups to look up in order, and the rules for frames shorter than the fixed IP
    header."""

    version: int  # 4 | 6
    rules: tuple[ir.Rule, ...]
    dport: tuple[Group, ...]  # transport frames with a destination port: every rule
    sport: tuple[Group, ...]  # ... with only a source port: rules not naming dport
    ip: tuple[Group, ...]  # other frames with the fixed IP header: no transport match
    short: tuple[ir.Rule, ...]  # frames without it: the rules that can hold there


Item = ir.Rule | Block


def addr_top(version: int) -> int:
    return 2**32 - 1 if version == 4 else 2**128 - 1


def box(rule: ir.Rule) -> Box:
    """The rule's fields as value sets (module doc); NotMappable otherwise. A field
    with no value left (the rule never holds) is ``()``."""
    if rule.family not in (ir.Family.IP4, ir.Family.IP6) or isinstance(
            rule.action, ir.Redirect) or rule.action.name not in ("drop", "pass", "count"):
        raise NotMappable("action or family")
    if rule.limit is not None or getattr(rule.action, "audit", False):
        raise NotMappable("limit or audit: a rule of its own in the chain")
    version = 4 if rule.family is ir.Family.IP4 else 6
    out: Box = {}
    if rule.proto is not None:
        out["proto"] = ((rule.proto, rule.proto),)
    for m in rule.matches:
        if m.field in ("src", "dst") and isinstance(m, ir.AddrMatch):
            iv = merge_ranges([(int(p.network_address), int(p.broadcast_address))
                               for p in m.prefixes if p.version == version])
            top = addr_top(version)
        elif m.field in ("proto", "sport", "dport") and isinstance(m, ir.IntMatch):
            iv, top = tuple(m.ranges), TOP[m.field]
        else:
            raise NotMappable(f"match `{m.field}`")
        iv = complement(iv, top) if m.negated else iv
        if m.field in out:  # `tcp proto 6`: both must hold
            iv = tuple(intersect_ranges(out[m.field], iv))
        out[m.field] = iv
    if not out:
        raise NotMappable("no field")
    pieces = 1
    for iv in out.values():
        pieces *= max(1, len(iv))
    if pieces > MAX_PIECES:  # a large list: its own named set in the chain is cheaper
        raise NotMappable("list")
    return out


def mappable(rule: ir.Rule) -> Box | None:
    try:
        return box(rule)
    except NotMappable:
        return None


def classify(policy: ir.Policy, regions: bool = True) -> list[Item]:
    """The policy's rules in order, long runs of mappable rules as groups (module doc);
    ``regions=False``: the blocks without their groups (iptables' tree needs only the
    runs and their rules)."""
    if len(policy.rules) < MIN_RULES:
        return list(policy.rules)
    out: list[Item] = []
    run: list[tuple[ir.Rule, Box]] = []
    for rule in policy.rules:
        b = mappable(rule)
        if b is not None:
            run.append((rule, b))
            continue
        out += lower_run(run, regions)
        run = []
        out.append(rule)
    return out + lower_run(run, regions)


def lower_run(run: list[tuple[ir.Rule, Box]], regions: bool = True) -> list[Item]:
    if len(run) < MIN_RUN:
        return [r for r, _ in run]
    out: list[Item] = []
    for version in (4, 6):
        members = [(r, b) for r, b in run if version_of(r) == version]
        if len(members) < MIN_GROUP:
            out += [r for r, _ in members]
        else:
            out.append(block(version, members) if regions else
                       Block(version, tuple(r for r, _ in members), (), (), (), ()))
    return out


def version_of(rule: ir.Rule) -> int:
    return 4 if rule.family is ir.Family.IP4 else 6


def block(version: int, members: list[tuple[ir.Rule, Box]]) -> Block:
    plain = [(r, b) for r, b in members if not any(f in b for f in TRANSPORT)]
    no_dport = [(r, b) for r, b in members if "dport" not in b]
    sport = len(no_dport) > len(plain)  # some rule names only the source port
    return Block(version, tuple(r for r, _ in members), Grouping(version).run(members),
                 Grouping(version).run(no_dport) if sport else (),
                 Grouping(version).run(plain),
                 tuple(r for r, b in plain if "dst" not in b))


class Grouping:
    """Rules of one family into groups of disjoint regions, in order: a rule joins the
    latest group unless it would add more than ``MAX_NEW`` regions to it (a wide rule
    after narrow ones would cut the group into many regions): then it opens a new
    group, looked up after the others. The rules' fields not named are their whole
    range (the frames looked up have them: module doc)."""

    def __init__(self, version: int) -> None:
        self.tops = {**TOP, "src": addr_top(version), "dst": addr_top(version)}
        self.shifts = tuple(64 if version == 6 and f in ("src", "dst") else 0
                            for f in FIELDS)
        self.store = rg.Store(len(FIELDS), self.shifts)
        self.members: list[tuple[ir.Rule, Box]] = []
        self.done: list[Group] = []

    def run(self, members: list[tuple[ir.Rule, Box]]) -> tuple[Group, ...]:
        for rule, b in members:
            self.add(rule, b)
        self.close()
        return tuple(self.done)

    def add(self, rule: ir.Rule, b: Box) -> None:
        fields = tuple(b.get(f, ((0, self.tops[f]),)) for f in FIELDS)
        parts = rg.pieces(fields)
        found = [self.store.candidates(p) for p in parts]
        todo = [rg.uncovered(self.store, p, f, MAX_NEW) for p, f in
                zip(parts, found, strict=True)]
        if self.members and (None in todo or sum(rg.cost(self.store, f, t) for f, t in
                                                 zip(found, todo, strict=True)) > MAX_NEW):
            self.close()
            found, todo = [[] for _ in parts], [[p] for p in parts]
        self.members.append((rule, b))
        for n, p in enumerate(parts):
            if n:  # the pieces before cut some regions: look again
                found[n] = self.store.candidates(p)
                todo[n] = rg.uncovered(self.store, p, found[n])
            rg.insert(self.store, p, rule, 0, found[n], todo[n])

    def close(self) -> None:
        """The current group is complete: keep it, start an empty one."""
        if not self.members:
            return
        key = tuple(f for f in FIELDS if any(f in b for _, b in self.members))
        at = [FIELDS.index(f) for f in key]
        regions = tuple((tuple(bx[i] for i in at), out)
                        for bx, out in self.store.regions(0))
        self.done.append(Group(key, tuple(r for r, _ in self.members), regions))
        self.members = []
        self.store = rg.Store(len(FIELDS), self.shifts)
