"""IR → a DAG of classic BPF tests, one rule after the other (first match wins).

Each rule becomes a conjunction of tests whose ``yes`` exit is the rule's verdict and
whose ``no`` exit is the next rule (the last one's is ``default``). The frame is read
as a packet socket sees it: Ethernet header at 0 (the outer VLAN tag already removed
by the kernel), L3 at 14. Per family the tests are, in order:

1. the EtherType (``ldh [12]``): 0x0800 or 0x86DD (a rule of both families tries IPv4,
   then IPv6);
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

The tests that every rule shares (EtherType, guards, header validity) come first so
the optimiser can answer them once for all rules (``cbpf_opt``).
"""

from __future__ import annotations

from pfc.backends.cbpf import match as cm
from pfc.backends.cbpf.graph import (
    ETH_HLEN,
    LEN,
    Graph,
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

ETHER = {4: Test(load(2, 12), "jeq", 0x0800), 6: Test(load(2, 12), "jeq", 0x86DD)}
# IP fields: (offset in the frame, size) per family (L3 at 14).
IP_FIELDS = {
    4: {"src": (26, 4), "dst": (30, 4), "ttl": (22, 1), "len": (16, 2), "proto": (23, 1),
        "frag": (20, 2)},
    6: {"src": (22, 16), "dst": (38, 16), "ttl": (21, 1), "len": (18, 2), "proto": (20, 1)},
}
# Transport fields: (offset into the transport header, size).
L4_FIELDS = {"sport": (0, 2), "dport": (2, 2), "flags": (13, 1), "icmp-type": (0, 1)}
IP6_L4 = ETH_HLEN + 40  # the transport header of IPv6 (no extension headers in v1)
UDP_HLEN = 8
TCP_DOFF = 12  # the data offset byte of the TCP header
# An accepted IPv4 header needs 14 + 20 bytes (4*IHL >= 20, total >= 4*IHL, total <= len
# - 14): a transport rule's guard asks for them at once, which covers what the validity
# tests read and every IPv4 field, and is the same bound for every such rule.
IP4_VALID_END = ETH_HLEN + 20


class Builder:
    """Makes nodes, sharing identical ones (same test, same successors)."""

    def __init__(self, l4_base: int = 0) -> None:
        self._memo: dict[tuple[Test, int, int], Node] = {}
        self.rule: int | None = None
        self.l4_base = l4_base  # the transport guard every IPv4 rule asks for first

    def make(self, test: Test, jt: Node, jf: Node) -> Node:
        if jt is jf:
            return jt
        key = (test, jt.nid, jf.nid)
        node = self._memo.get(key)
        if node is None:
            node = self._memo[key] = Node(test, jt, jf, rule=self.rule)
        return node


def build(policy: ir.Policy) -> Graph:
    """The whole policy; ``count``/``redirect`` rules must have been refused before."""
    passed, dropped = leaves()
    builder = Builder(l4_base(policy))
    target = passed if policy.default is ir.Verdict.PASS else dropped
    for rule in reversed(policy.rules):
        if isinstance(rule.action, (ir.Count, ir.Redirect)):
            raise ValueError(f"cbpf cannot express `{rule.action.name}` (rule at line "
                             f"{rule.line}); capability_errors refuses it first")
        builder.rule = rule.index
        action = dropped if isinstance(rule.action, ir.Drop) else passed
        target = rule_block(builder, rule)(action, target)
    return Graph(target, passed, dropped)


def rule_block(builder: Builder, rule: ir.Rule) -> cm.Block:
    if rule.family is ir.Family.ANY:
        if rule.matches or rule.proto is not None:
            raise ValueError(f"rule at line {rule.line}: family `any` with matches")
        return cm.always
    make = builder.make
    families = {v: cm.conjunction([_test(make, ETHER[v])] +
                                  family_blocks(make, rule, v, builder.l4_base))
                for v in sorted(rule.family.versions)}
    if len(families) == 1:
        return next(iter(families.values()))
    return lambda yes, no: families[4](yes, families[6](yes, no))


def _test(make: cm.MakeNode, test: Test, sense: bool = True) -> cm.Block:
    """A block of one test; ``sense=False``: the test being true means ``no``."""
    def build(yes: Node, no: Node) -> Node:
        return make(test, yes, no) if sense else make(test, no, yes)
    return build


def l4_base(policy: ir.Policy) -> int:
    """The transport bytes every IPv4 rule with transport fields needs (the least of
    their needs): tested early by each, so the rules share it with the header tests;
    a rule that needs more tests its own bound later, just before its transport fields.
    """
    needs = [ETH_HLEN + l4_end(r) for r in policy.rules
             if 4 in r.family.versions and r.family is not ir.Family.ANY and
             any(ir.FIELDS[m.field].layer is ir.Layer.TRANSPORT for m in r.matches)]
    return min(needs, default=0)


def family_blocks(make: cm.MakeNode, rule: ir.Rule, version: int,
                  base: int = 0) -> list[cm.Block]:
    """The tests of ``rule`` for one family, after the EtherType (module doc); ``base``
    is the transport guard IPv4 rules share (``l4_base``)."""
    transport = [m for m in rule.transport_matches if not isinstance(m, ir.PayloadMatch)]
    payloads = [m for m in rule.matches if isinstance(m, ir.PayloadMatch)]
    has_l4 = bool(transport or payloads)
    blocks: list[cm.Block] = []
    need = ETH_HLEN + l4_end(rule)
    if has_l4 and version == 4:
        blocks.append(_guard(make, IP4_VALID_END))
        blocks += validity(make, min(need, base or need), version)
    elif has_l4:  # one guard: IPv6 fields and transport bytes lie at fixed offsets
        blocks.append(_guard(make, IP6_L4 + l4_end(rule)))
        blocks += validity(make, 0, version)
    else:
        blocks.append(_guard(make, ip_end(rule, version)))
    if rule.proto is not None:
        blocks.append(_test(make, Test(load(1, IP_FIELDS[version]["proto"][0]), "jeq",
                                       rule.proto)))
    for match in rule.matches:
        if ir.FIELDS[match.field].layer is ir.Layer.IP:
            blocks.append(ip_match(make, match, version))
    if has_l4 and version == 4 and need > min(need, base or need):
        blocks.append(_test(make, Test(REL, "jge", need, XState.IHL, guard=True)))
    blocks += [l4_match(make, m, version) for m in transport]
    if payloads:
        blocks += payload_blocks(make, rule, version, payloads)
    return blocks


def _guard(make: cm.MakeNode, end: int) -> cm.Block:
    """``len >= end``, or nothing when every frame a packet socket sees has that."""
    if end <= ETH_HLEN:
        return cm.always
    return _test(make, Test(LEN, "jge", end, guard=True))


# ------------------------------------------------------------------------------- extents

def ip_end(rule: ir.Rule, version: int) -> int:
    """One past the farthest IP header byte ``rule`` reads (protocol byte, IP fields).
    With transport fields an accepted header covers them all (``IMPLICATIONS``)."""
    fields = IP_FIELDS[version]
    ends = [ETH_HLEN]
    if rule.proto is not None:
        ends.append(fields["proto"][0] + 1)
    for m in rule.matches:
        if m.field in fields:
            offset, size = fields[m.field]
            ends.append(offset + size)
    return max(ends)


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

TOTAL = load(2, 16)
REL = LEN + (Step("subx"),)  # len - X
V4_TOTAL_LOW = Test(TOTAL, "jge", None, XState.IHL)  # total >= 4*IHL
V4_TOTAL_HIGH = Test(TOTAL + (Step("add", ETH_HLEN),), "jgt", None, XState.LEN)  # > len
V4_VERSION_LOW = Test(load(1, 14), "jge", 0x45)  # version 4 and IHL >= 5: 0x45..0x4f
V4_VERSION_HIGH = Test(load(1, 14), "jgt", 0x4F)
V4_FIRST_FRAGMENT = Test(load(2, 20), "jset", 0x1FFF)
V6_VERSION_LOW = Test(load(1, 14), "jge", 0x60)
V6_VERSION_HIGH = Test(load(1, 14), "jgt", 0x6F)
V6_PAYLOAD_HIGH = Test(load(2, 18) + (Step("add", IP6_L4),), "jgt", None, XState.LEN)
# What an accepted header says about the length, which the tests alone do not show:
# IHL >= 5 and 4*IHL <= total <= len - 14 give len >= 34; 54 + payload length <= len
# gives len >= 54. The optimiser uses them to answer later rules' length guards.
IMPLICATIONS = (
    (((V4_TOTAL_HIGH, False), (V4_TOTAL_LOW, True), (V4_VERSION_LOW, True),
      (V4_VERSION_HIGH, False)), Test(LEN, "jge", ETH_HLEN + 20, guard=True)),
    (((V6_PAYLOAD_HIGH, False),), Test(LEN, "jge", IP6_L4, guard=True)),
)


def validity(make: cm.MakeNode, l4_need: int, version: int) -> list[cm.Block]:
    """The header the kernel would accept, and (IPv4) ``len - 4*IHL >= l4_need``."""
    if version == 6:
        return [_test(make, V6_VERSION_LOW), _test(make, V6_VERSION_HIGH, False),
                _test(make, V6_PAYLOAD_HIGH, False)]
    return [
        _test(make, Test(REL, "jge", l4_need, XState.IHL, guard=True)),
        _test(make, V4_TOTAL_LOW),
        _test(make, V4_TOTAL_HIGH, False),
        _test(make, V4_VERSION_LOW),
        _test(make, V4_VERSION_HIGH, False),
        _test(make, V4_FIRST_FRAGMENT, False),
    ]


# ------------------------------------------------------------------------------- matches

def ip_match(make: cm.MakeNode, match: ir.Match, version: int) -> cm.Block:
    if isinstance(match, ir.AddrMatch):
        return cm.address_block(make, match, version)
    if isinstance(match, ir.FragMatch):
        return cm.negate(cm.frag_block(make), match.negated)
    offset, size = IP_FIELDS[version][match.field]
    ranges = match.ranges
    if match.field == "len" and version == 6:  # 40 + payload length
        ranges = tuple((lo - 40, hi - 40) for lo, hi in ranges)
    top = (1 << (8 * size)) - 1
    return cm.negate(cm.interval_block(make, load(size, offset), None, ranges, top),
                     match.negated)


def _l4_value(version: int, offset: int, size: int) -> tuple[Value, XState | None]:
    if version == 4:
        return load_x(size, ETH_HLEN + offset), XState.IHL
    return load(size, IP6_L4 + offset), None


def l4_match(make: cm.MakeNode, match: ir.Match, version: int) -> cm.Block:
    offset, size = L4_FIELDS[match.field]
    value, x = _l4_value(version, offset, size)
    if isinstance(match, ir.FlagsMatch):
        block = cm.flags_block(make, value, x, match.set, match.clear)
    else:
        block = cm.interval_block(make, value, x, match.ranges, (1 << (8 * size)) - 1)
    return cm.negate(block, match.negated)


def payload_blocks(make: cm.MakeNode, rule: ir.Rule, version: int,
                   payloads: list[ir.PayloadMatch]) -> list[cm.Block]:
    """UDP: bytes after the 8-byte header (covered by the transport guard). TCP: data
    offset >= 5, then X = where the payload starts, a guard for the farthest byte,
    and the bytes relative to X."""
    if rule.proto == ir.UDP:
        blocks = []
        for m in payloads:
            if version == 4:
                block = cm.bytes_block(make, ETH_HLEN + UDP_HLEN + m.offset, m.data,
                                       XState.IHL)
            else:
                block = cm.bytes_block(make, IP6_L4 + UDP_HLEN + m.offset, m.data, None)
            blocks.append(cm.negate(block, m.negated))
        return blocks
    doff, _ = _l4_value(version, TCP_DOFF, 1)
    xstate = XState.TCP4 if version == 4 else XState.TCP6
    base = ETH_HLEN if version == 4 else IP6_L4
    end = base + max(m.offset + len(m.data) for m in payloads)
    rel = LEN + (Step("subx"),)
    blocks = [_test(make, Test(doff, "jge", 0x50, XState.IHL if version == 4 else None)),
              _test(make, Test(rel, "jge", end, xstate, guard=True))]
    if version == 4:  # 4*IHL + 4*data offset can pass the packet's end: len - X wraps
        blocks.append(_test(make, Test(rel, "jset", 0x80000000, xstate), False))
    for m in payloads:
        blocks.append(cm.negate(cm.bytes_block(make, base + m.offset, m.data, xstate),
                                m.negated))
    return blocks
