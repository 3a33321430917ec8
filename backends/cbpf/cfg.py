"""IR → a DAG of classic BPF tests, one rule after the other (first match wins).

Each rule becomes a conjunction of tests whose ``yes`` exit is the rule's verdict and
whose ``no`` exit is the next rule (the last one's is ``default``). Offsets below are
for the Ethernet link (``--link ether``): the frame as a packet socket sees it,
Ethernet header at 0 (the outer VLAN tag already removed by the kernel), L3 at 14. For
``--link ip`` (the packet from its IP header, as iptables' ``-m bpf`` sees it) every
offset is 14 less, and the family is the IP version nibble. Per family the tests are,
in order:

1. the family: EtherType (``ldh [12]``) 0x0800 or 0x86DD; on ``--link ip`` the first
   byte in 0x40..0x4f or 0x60..0x6f (a rule of both families tries IPv4, then IPv6);
2. a **guard** ``len >= N``: all of a rule's fields must be present for it to hold, so
   the farthest bound stands for all (a failing guard means "a field is absent": the
   rule fails). Without transport fields N is one past the farthest IP header byte
   the rule reads; IPv4 with transport fields: 34, what an accepted header needs anyway
   (the same bound for every such rule); IPv6 with them: 54 + the transport bytes;
3. with transport fields, the header the kernel would accept (semantics.md):
   IPv4: ``len - 4*IHL >= 14 + n`` (a guard for transport bytes, X = 4*IHL: n is the
   least any IPv4 rule of the policy needs, ``l4_base``, so the rules share it; a rule
   that needs more tests its own bound just before its transport fields), total length
   >= 4*IHL, total length + 14 <= len, version 4 and IHL >= 5 (``[14]`` in 0x45..0x4f),
   fragment offset 0; IPv6: version 6, 54 + payload length <= len;
4. the protocol byte, the IP matches, the transport matches, the payload matches.

The tests that every rule shares (family, guards, header validity) come first so the
optimiser can answer them once for all rules (``cbpf_opt``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pfc.backends.cbpf import match as cm
from pfc.backends.cbpf.graph import (
    ETHER,
    LEN,
    Graph,
    Link,
    Node,
    Step,
    Test,
    Value,
    XState,
    leaves,
    load,
    load_x,
)
from pfc.frontend import ir

# IP fields: (offset from the IP header, size) per family.
IP_FIELDS = {
    4: {"src": (12, 4), "dst": (16, 4), "ttl": (8, 1), "len": (2, 2), "proto": (9, 1),
        "frag": (6, 2)},
    6: {"src": (8, 16), "dst": (24, 16), "ttl": (7, 1), "len": (4, 2), "proto": (6, 1)},
}
# Transport fields: (offset into the transport header, size).
L4_FIELDS = {"sport": (0, 2), "dport": (2, 2), "flags": (13, 1), "icmp-type": (0, 1)}
IP6_HLEN = 40  # the transport header of IPv6 (no extension headers in v1)
IP4_HLEN = 20  # the least IPv4 header
UDP_HLEN = 8
TCP_DOFF = 12  # the data offset byte of the TCP header


# ------------------------------------------------------------------------------ layout

@dataclass(frozen=True)
class Layout:
    """The tests that depend on where the IP header starts (``link.l3``): the family,
    the header validity tests, and what an accepted header says about the length,
    which the tests alone do not show (``implications``: IHL >= 5 and 4*IHL <= total
    <= len - L3 give len >= L3 + 20; L3 + 40 + payload length <= len gives len >= L3 +
    40); the optimiser uses them to answer later rules' length guards."""

    link: Link
    family: dict[int, tuple[tuple[Test, bool], ...]]
    total: Value
    v4_total_low: Test  # total >= 4*IHL
    v4_total_high: Test  # total + L3 > len
    v4_version_low: Test  # version 4 and IHL >= 5: [L3] in 0x45..0x4f
    v4_version_high: Test
    v4_first_fragment: Test
    v6_version_low: Test
    v6_version_high: Test
    v6_payload_high: Test  # L3 + 40 + payload length > len
    implications: tuple

    @property
    def l3(self) -> int:
        return self.link.l3

    @property
    def l4_6(self) -> int:
        """Where the IPv6 transport header starts."""
        return self.link.l3 + IP6_HLEN


@functools.cache
def layout(link: Link) -> Layout:
    l3 = link.l3
    first = load(1, l3)
    if l3 >= 14:  # the EtherType
        family = {4: ((Test(load(2, l3 - 2), "jeq", 0x0800), True),),
                  6: ((Test(load(2, l3 - 2), "jeq", 0x86DD), True),)}
    else:  # the IP version nibble: [0] in 0x40..0x4f or 0x60..0x6f
        family = {v: ((Test(first, "jge", v << 4), True),
                      (Test(first, "jgt", v << 4 | 0xF), False)) for v in (4, 6)}
    total = load(2, l3 + 2)
    low = Test(total, "jge", None, XState.IHL)
    high = Test(total + ((Step("add", l3),) if l3 else ()), "jgt", None, XState.LEN)
    v4_low, v4_high = Test(first, "jge", 0x45), Test(first, "jgt", 0x4F)
    v6_high = Test(load(2, l3 + 4) + (Step("add", l3 + IP6_HLEN),), "jgt", None,
                   XState.LEN)
    implications = (
        (((high, False), (low, True), (v4_low, True), (v4_high, False)),
         Test(LEN, "jge", l3 + IP4_HLEN, guard=True)),
        (((v6_high, False),), Test(LEN, "jge", l3 + IP6_HLEN, guard=True)),
    )
    return Layout(link, family, total, low, high, v4_low, v4_high,
                  Test(load(2, l3 + 6), "jset", 0x1FFF), Test(first, "jge", 0x60),
                  Test(first, "jgt", 0x6F), v6_high, implications)


def implications(link: Link = ETHER) -> tuple:
    return layout(link).implications


IMPLICATIONS = implications(ETHER)


# ------------------------------------------------------------------------------- graph

class Builder:
    """Makes nodes, sharing identical ones (same test, same successors)."""

    def __init__(self, l4_base: int = 0, link: Link = ETHER) -> None:
        self._memo: dict[tuple[Test, int, int], Node] = {}
        self.rule: int | None = None
        self.l4_base = l4_base  # the transport guard every IPv4 rule asks for first
        self.lay = layout(link)

    def make(self, test: Test, jt: Node, jf: Node) -> Node:
        if jt is jf:
            return jt
        key = (test, jt.nid, jf.nid)
        node = self._memo.get(key)
        if node is None:
            node = self._memo[key] = Node(test, jt, jf, rule=self.rule)
        return node


def build(policy: ir.Policy, link: Link = ETHER) -> Graph:
    """The whole policy; ``count``/``redirect`` rules must have been refused before."""
    passed, dropped = leaves()
    builder = Builder(l4_base(policy, link.l3), link)
    target = passed if policy.default is ir.Verdict.PASS else dropped
    for rule in reversed(policy.rules):
        if isinstance(rule.action, (ir.Count, ir.Redirect)):
            raise ValueError(f"cbpf cannot express `{rule.action.name}` (rule at line "
                             f"{rule.line}); capability_errors refuses it first")
        builder.rule = rule.index
        action = dropped if isinstance(rule.action, ir.Drop) else passed
        target = rule_block(builder, rule)(action, target)
    return Graph(target, passed, dropped, link)


def rule_block(builder: Builder, rule: ir.Rule) -> cm.Block:
    if rule.family is ir.Family.ANY:
        if rule.matches or rule.proto is not None:
            raise ValueError(f"rule at line {rule.line}: family `any` with matches")
        return cm.always
    make, lay = builder.make, builder.lay
    families = {v: cm.conjunction([_test(make, t, sense) for t, sense in lay.family[v]] +
                                  family_blocks(make, rule, v, builder.l4_base, lay))
                for v in sorted(rule.family.versions)}
    if len(families) == 1:
        return next(iter(families.values()))
    return lambda yes, no: families[4](yes, families[6](yes, no))


def _test(make: cm.MakeNode, test: Test, sense: bool = True) -> cm.Block:
    """A block of one test; ``sense=False``: the test being true means ``no``."""
    def build(yes: Node, no: Node) -> Node:
        return make(test, yes, no) if sense else make(test, no, yes)
    return build


def l4_base(policy: ir.Policy, l3: int = ETHER.l3) -> int:
    """The transport bytes every IPv4 rule with transport fields needs (the least of
    their needs): tested early by each, so the rules share it with the header tests;
    a rule that needs more tests its own bound later, just before its transport fields.
    """
    needs = [l3 + l4_end(r) for r in policy.rules
             if 4 in r.family.versions and r.family is not ir.Family.ANY and
             any(ir.FIELDS[m.field].layer is ir.Layer.TRANSPORT for m in r.matches)]
    return min(needs, default=0)


def family_blocks(make: cm.MakeNode, rule: ir.Rule, version: int, base: int = 0,
                  lay: Layout | None = None) -> list[cm.Block]:
    """The tests of ``rule`` for one family, after the family test (module doc);
    ``base`` is the transport guard IPv4 rules share (``l4_base``)."""
    lay = lay or layout(ETHER)
    transport = [m for m in rule.transport_matches if not isinstance(m, ir.PayloadMatch)]
    payloads = [m for m in rule.matches if isinstance(m, ir.PayloadMatch)]
    has_l4 = bool(transport or payloads)
    blocks: list[cm.Block] = []
    need = lay.l3 + l4_end(rule)
    if has_l4 and version == 4:
        blocks.append(_guard(make, lay.l3 + IP4_HLEN, lay.l3))
        blocks += validity(make, min(need, base or need), version, lay)
    elif has_l4:  # one guard: IPv6 fields and transport bytes lie at fixed offsets
        blocks.append(_guard(make, lay.l4_6 + l4_end(rule), lay.l3))
        blocks += validity(make, 0, version, lay)
    else:
        blocks.append(_guard(make, ip_end(rule, version, lay.l3), lay.l3))
    if rule.proto is not None:
        proto = lay.l3 + IP_FIELDS[version]["proto"][0]
        blocks.append(_test(make, Test(load(1, proto), "jeq", rule.proto)))
    for match in rule.matches:
        if ir.FIELDS[match.field].layer is ir.Layer.IP:
            blocks.append(ip_match(make, match, version, lay.l3))
    if has_l4 and version == 4 and need > min(need, base or need):
        blocks.append(_test(make, Test(REL, "jge", need, XState.IHL, guard=True)))
    blocks += [l4_match(make, m, version, lay.l3) for m in transport]
    if payloads:
        blocks += payload_blocks(make, rule, version, payloads, lay.l3)
    return blocks


def _guard(make: cm.MakeNode, end: int, l3: int) -> cm.Block:
    """``len >= end``, or nothing when every packet the program sees has that: a
    packet socket sees at least the Ethernet header, xt_bpf at least an IP header."""
    if end <= l3:
        return cm.always
    return _test(make, Test(LEN, "jge", end, guard=True))


# ------------------------------------------------------------------------------- extents

def ip_end(rule: ir.Rule, version: int, l3: int = ETHER.l3) -> int:
    """One past the farthest IP header byte ``rule`` reads (protocol byte, IP fields).
    With transport fields an accepted header covers them all (``implications``)."""
    fields = IP_FIELDS[version]
    ends = [0]
    if rule.proto is not None:
        ends.append(fields["proto"][0] + 1)
    for m in rule.matches:
        if m.field in fields:
            offset, size = fields[m.field]
            ends.append(offset + size)
    return l3 + max(ends)


def l4_end(rule: ir.Rule) -> int:
    """One past the farthest transport byte the rule reads, from the transport header
    (UDP payload included; for TCP payload only the data offset byte)."""
    ends = [0]
    for m in rule.transport_matches:
        if isinstance(m, ir.PayloadMatch):
            if rule.proto == ir.UDP:
                ends.append(UDP_HLEN + m.offset + len(m.data))
            else:
                ends.append(TCP_DOFF + 1)
        else:
            offset, size = L4_FIELDS[m.field]
            ends.append(offset + size)
    return max(ends)


# ------------------------------------------------------------------------------ validity

REL = LEN + (Step("subx"),)  # len - X


def validity(make: cm.MakeNode, l4_need: int, version: int,
             lay: Layout) -> list[cm.Block]:
    """The header the kernel would accept, and (IPv4) ``len - 4*IHL >= l4_need``."""
    if version == 6:
        return [_test(make, lay.v6_version_low), _test(make, lay.v6_version_high, False),
                _test(make, lay.v6_payload_high, False)]
    return [
        _test(make, Test(REL, "jge", l4_need, XState.IHL, guard=True)),
        _test(make, lay.v4_total_low),
        _test(make, lay.v4_total_high, False),
        _test(make, lay.v4_version_low),
        _test(make, lay.v4_version_high, False),
        _test(make, lay.v4_first_fragment, False),
    ]


# ------------------------------------------------------------------------------- matches

def ip_match(make: cm.MakeNode, match: ir.Match, version: int,
             l3: int = ETHER.l3) -> cm.Block:
    if isinstance(match, ir.AddrMatch):
        return cm.address_block(make, match, version, l3)
    if isinstance(match, ir.FragMatch):
        return cm.negate(cm.frag_block(make, l3), match.negated)
    offset, size = IP_FIELDS[version][match.field]
    ranges = match.ranges
    if match.field == "len" and version == 6:  # 40 + payload length
        ranges = tuple((lo - IP6_HLEN, hi - IP6_HLEN) for lo, hi in ranges)
    top = (1 << (8 * size)) - 1
    return cm.negate(cm.interval_block(make, load(size, l3 + offset), None, ranges, top),
                     match.negated)


def _l4_value(version: int, offset: int, size: int, l3: int) -> tuple[Value, XState | None]:
    if version == 4:
        return load_x(size, l3 + offset), XState.IHL
    return load(size, l3 + IP6_HLEN + offset), None


def l4_match(make: cm.MakeNode, match: ir.Match, version: int,
             l3: int = ETHER.l3) -> cm.Block:
    offset, size = L4_FIELDS[match.field]
    value, x = _l4_value(version, offset, size, l3)
    if isinstance(match, ir.FlagsMatch):
        block = cm.flags_block(make, value, x, match.set, match.clear)
    else:
        block = cm.interval_block(make, value, x, match.ranges, (1 << (8 * size)) - 1)
    return cm.negate(block, match.negated)


def payload_blocks(make: cm.MakeNode, rule: ir.Rule, version: int,
                   payloads: list[ir.PayloadMatch], l3: int = ETHER.l3) -> list[cm.Block]:
    """UDP: bytes after the 8-byte header (covered by the transport guard). TCP: data
    offset >= 5, then X = where the payload starts, a guard for the farthest byte,
    and the bytes relative to X."""
    base = l3 if version == 4 else l3 + IP6_HLEN  # where X + offsets start
    xstate = XState.IHL if version == 4 else None
    if rule.proto == ir.UDP:
        return [cm.negate(cm.bytes_block(make, base + UDP_HLEN + m.offset, m.data, xstate),
                          m.negated) for m in payloads]
    doff, _ = _l4_value(version, TCP_DOFF, 1, l3)
    xstate = XState.TCP4 if version == 4 else XState.TCP6
    end = base + max(m.offset + len(m.data) for m in payloads)
    blocks = [_test(make, Test(doff, "jge", 0x50, XState.IHL if version == 4 else None)),
              _test(make, Test(REL, "jge", end, xstate, guard=True))]
    if version == 4:  # 4*IHL + 4*data offset can pass the packet's end: len - X wraps
        blocks.append(_test(make, Test(REL, "jset", 0x80000000, xstate), False))
    for m in payloads:
        blocks.append(cm.negate(cm.bytes_block(make, base + m.offset, m.data, xstate),
                                m.negated))
    return blocks
