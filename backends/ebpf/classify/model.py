"""A policy's rules as the classifier sees them: per rule, per field, the values that
let the rule hold (semantics.md "Reading a frame"), "absent" being a value of none.

The program reads a frame into five fields, each a number or absent:

- ``fp``: the frame's family and protocol byte in one number: 0 for a frame that is not
  IPv4/IPv6 (after one skipped VLAN tag at XDP), ``1 + p`` for IPv4 with protocol byte
  ``p`` (L3+9), ``258 + p`` for IPv6 with Next Header ``p`` (L3+6), ``p`` = 256 when
  that byte is missing. Never absent. A rule's family, protocol keyword and ``proto``
  match are one set of ``fp`` values;
- ``src``, ``dst``: one number space for both families: an IPv4 address ``a`` is ``a``,
  an IPv6 address ``a`` is ``2**32 + a``. Present when the frame is IPv4/IPv6 and the
  address's bytes are in it (header validity not checked);
- ``sport``, ``dport``: present when the transport header is one the kernel accepts
  (IPv4: version 4, IHL >= 5, IHL*4 <= total length <= len(L3), first fragment; IPv6:
  version 6, 40 + payload length <= len(L3)) and the 2 bytes are in the frame. A rule
  naming ports always names tcp or udp, which ``fp`` requires.

A constrained field holds when the value is present and inside its intervals: ``!dport
53`` is [0, 52] u [54, 65535], so an absent field fails every constrained match, negated
or not; a field a rule does not name holds for every value, absent included. A
``redirect`` rule also needs the destination of its target's family present: its
``dst`` is cut to that family's part of the space (the interpreter's step 4).

Rules with other matches (ttl, len, flags, icmp-type, frag, payload) are not modelled:
:func:`conds` returns None and the policy keeps the linear program.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.matches import complement_ranges, intersect_ranges, merge_ranges

FP_SIZE = 515  # 0 non-IP, 1..257 IPv4, 258..514 IPv6
PORT_ABSENT = 65536
V6_BASE = 1 << 32
TOPS = {"fp": FP_SIZE - 1, "src": V6_BASE + (1 << 128) - 1, "dst": V6_BASE + (1 << 128) - 1,
        "sport": 65535, "dport": 65535}
FIELDS = ("fp", "src", "dst", "sport", "dport")
SPACES = {4: (0, V6_BASE - 1), 6: (V6_BASE, V6_BASE + (1 << 128) - 1)}
Intervals = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Cond:
    """One rule: ``fields[name]`` None when the rule does not constrain the field,
    else the sorted, disjoint intervals of values that let it hold."""

    index: int
    terminal: bool
    fields: dict[str, Intervals | None]


def complement(intervals: Intervals, space: Intervals) -> Intervals:
    """``space`` (sorted, disjoint) minus ``intervals``, split where ``space`` is."""
    return tuple(intersect_ranges(space, complement_ranges(intervals, space[-1][1])))


def _fp_values(rule: ir.Rule) -> set[int] | None:
    versions = {ir.Family.ANY: None, ir.Family.IP: (4, 6), ir.Family.IP4: (4,),
                ir.Family.IP6: (6,)}[rule.family]
    if versions is None:
        return None if rule.proto is None else {1 + rule.proto, 258 + rule.proto}
    base = {4: 1, 6: 258}
    if rule.proto is None:
        return {base[v] + p for v in versions for p in range(257)}
    return {base[v] + rule.proto for v in versions}


def _addr_set(m: ir.AddrMatch) -> Intervals:
    iv = merge_ranges([(int(p.network_address) + (V6_BASE if p.version == 6 else 0),
                     int(p.broadcast_address) + (V6_BASE if p.version == 6 else 0))
                    for p in m.prefixes])
    return complement(iv, (SPACES[4], SPACES[6])) if m.negated else iv


def _int_set(m: ir.IntMatch, top: int) -> Intervals:
    iv = merge_ranges(list(m.ranges))
    return complement(iv, ((0, top),)) if m.negated else iv


def _and(current: Intervals | None, more: Intervals) -> Intervals:
    return more if current is None else tuple(intersect_ranges(current, more))


def cond(rule: ir.Rule) -> Cond | None:
    """The rule as per-field value sets; None if it has a match the model lacks, or
    options the classifier does not carry (``log``, a ``limit``, an audited drop)."""
    if isinstance(rule.action, ir.Log) or rule.limit is not None or \
            getattr(rule.action, "audit", False):
        return None
    fields: dict[str, Intervals | None] = dict.fromkeys(FIELDS)
    fp = _fp_values(rule)
    for m in rule.matches:
        if isinstance(m, ir.IntMatch) and m.field == "proto":
            protos = {p for lo, hi in _int_set(m, 255) for p in range(lo, hi + 1)}
            fp = {v for v in (fp if fp is not None else range(1, FP_SIZE))
                  if v > 0 and (v - 1) % 257 in protos}
        elif isinstance(m, ir.AddrMatch):
            fields[m.field] = _and(fields[m.field], _addr_set(m))
        elif isinstance(m, ir.IntMatch) and m.field in ("sport", "dport"):
            fields[m.field] = _and(fields[m.field], _int_set(m, 65535))
        else:
            return None
    if isinstance(rule.action, ir.Redirect):
        space = (SPACES[rule.action.address.version],)
        fields["dst"] = _and(fields["dst"], space)
    if fp is not None:
        fields["fp"] = merge_ranges([(v, v) for v in fp])
    return Cond(rule.index, rule.terminal, fields)


def conds(policy: ir.Policy) -> list[Cond] | None:
    """Every rule's Cond, or None when one rule cannot be modelled."""
    out = []
    for rule in policy.rules:
        c = cond(rule)
        if c is None:
            return None
        out.append(c)
    return out
