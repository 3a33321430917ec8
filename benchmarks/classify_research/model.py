"""A policy of 5-tuple rules as the classifiers see it: per rule, per field, the set of
values that let it hold, with "absent" a value of its own (semantics.md).

Every prototype (lbvs, tss, dtree) is built from this one model, and every one reads a
frame into the same key (``common.h``, mirrored here by :func:`key` for tests):

- ``fp``: the frame's class and protocol byte in one number: 0 for a frame that is not
  IPv4/IPv6 (after one skipped VLAN tag at XDP), ``1 + p`` for IPv4 with protocol byte
  ``p`` (L3+9), ``258 + p`` for IPv6 with Next Header ``p`` (L3+6), and ``p`` = 256 when
  that byte is missing (a truncated frame). The rule's family and protocol keyword and
  a ``proto`` match are all a set of ``fp`` values;
- ``src``, ``dst``: the IPv4 address where it lies (present iff IPv4 and its 4 bytes are
  in the frame; header validity is not checked, as semantics.md says);
- ``sport``, ``dport``: present iff the transport header is one the kernel accepts
  (IPv4: version 4, IHL >= 5, IHL*4 <= total length <= len(L3), fragment offset 0;
  IPv6: version 6, 40 + payload length <= len(L3)) and the 2 bytes are in the frame.
  The rule's protocol (tcp/udp) is required through ``fp``.

A constrained field is "present and the value is in these intervals": a negated match
``!dport 53`` is present and in [0, 52] u [54, 65535]. An absent field therefore fails
every constrained match, negated or not, and a rule that does not name a field holds
for every value of it, absent included.

Supported: rules of any action, protocol keyword (``all ip tcp udp icmp``), ``proto``,
IPv4 ``src``/``dst`` (lists too), ``sport``/``dport`` (lists too), each negated or not.
Other matches (ttl, len, flags, icmp-type, frag, payload, IPv6 addresses) raise
:class:`Unsupported`: docs/scale.md says how they fold in.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend import ir
from pfc.oracle import packets

FP_SIZE = 515  # 0 non-IP, 1..257 IPv4, 258..514 IPv6
PORT_ABSENT = 65536
ADDR_TOP = 2**32 - 1
ACTIONS = {"drop": 0, "pass": 1, "count": 2, "redirect": 3}
Intervals = tuple[tuple[int, int], ...]


class Unsupported(ValueError):
    """A rule the prototypes do not model."""


@dataclass(frozen=True)
class Cond:
    """One rule as the classifiers see it. ``None``: the field is not constrained
    (every value, absent too); else the value must be present and inside."""

    index: int
    action: str
    fp: frozenset[int] | None
    src: Intervals | None
    dst: Intervals | None
    sport: Intervals | None
    dport: Intervals | None

    @property
    def terminal(self) -> bool:
        return self.action != "count"

    def field(self, name: str) -> Intervals | None:
        if name == "fp":
            return None if self.fp is None else _to_intervals(sorted(self.fp))
        return getattr(self, name)


FIELDS = ("fp", "src", "dst", "sport", "dport")
TOPS = {"fp": FP_SIZE - 1, "src": ADDR_TOP, "dst": ADDR_TOP, "sport": 65535,
        "dport": 65535}


def _to_intervals(values: list[int]) -> Intervals:
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][1] == v - 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return tuple((a, b) for a, b in out)


def normalize(intervals: list[tuple[int, int]]) -> Intervals:
    """Sorted, merged, inclusive intervals."""
    out: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def complement(intervals: Intervals, top: int) -> Intervals:
    out, at = [], 0
    for lo, hi in intervals:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= top:
        out.append((at, top))
    return tuple(out)


def _fp_values(rule: ir.Rule) -> set[int] | None:
    versions = {ir.Family.ANY: None, ir.Family.IP: (4, 6), ir.Family.IP4: (4,),
                ir.Family.IP6: (6,)}[rule.family]
    if versions is None and rule.proto is None:
        return None
    base = {4: 1, 6: 258}
    if rule.proto is None:
        return {base[v] + p for v in versions for p in range(257)}
    return {base[v] + rule.proto for v in versions}


def _field_set(match: ir.Match, top: int) -> Intervals:
    if isinstance(match, ir.AddrMatch):
        if any(p.version != 4 for p in match.prefixes):
            raise Unsupported("IPv6 addresses")
        iv = normalize([(int(p.network_address), int(p.broadcast_address))
                        for p in match.prefixes])
    else:
        iv = normalize(list(match.ranges))
    return complement(iv, top) if match.negated else iv


def cond(rule: ir.Rule) -> Cond:
    """The rule as per-field value sets; Unsupported for what the model lacks."""
    fields: dict[str, Intervals | None] = {n: None for n in ("src", "dst", "sport", "dport")}
    fp = _fp_values(rule)
    for m in rule.matches:
        if m.field == "proto" and isinstance(m, ir.IntMatch):
            allowed = _field_set(m, 255)
            protos = {p for lo, hi in allowed for p in range(lo, hi + 1)}
            fp = {v for v in (fp or set(range(1, FP_SIZE))) if 0 < v and (v - 1) % 257 in
                  protos and (v - 1) % 257 != 256}
            continue
        if m.field not in fields or fields[m.field] is not None:
            raise Unsupported(f"match `{m.field}`")
        fields[m.field] = _field_set(m, TOPS[m.field])
    if isinstance(rule.action, ir.Redirect):
        raise Unsupported("redirect")
    return Cond(rule.index, rule.action.name, None if fp is None else frozenset(fp),
                **fields)


def conds(policy: ir.Policy) -> list[Cond]:
    return [cond(r) for r in policy.rules]


# ------------------------------------------------------------------ the key of a frame

@dataclass(frozen=True)
class Key:
    fp: int
    src: int | None
    dst: int | None
    sport: int | None
    dport: int | None
    nbytes: int


def key(frame: bytes, skip_tag: bool = True) -> Key:
    """What ``common.h`` reads from a frame (the module doc), from the oracle's reader."""
    view = packets.read_frame(frame, skip_tag)
    nbytes = packets.counted_bytes(view)
    if view.version is None:
        return Key(0, None, None, None, None, nbytes)
    p = 256 if view.l4proto is None else view.l4proto
    fp = (1 if view.version == 4 else 258) + p
    src = dst = None
    if view.version == 4:
        raw = packets.ip_field_bytes(view, "src")
        src = int.from_bytes(raw, "big") if raw else None
        raw = packets.ip_field_bytes(view, "dst")
        dst = int.from_bytes(raw, "big") if raw else None
    ports = [None, None]
    if view.l4 is not None:
        for i in (0, 1):
            at = view.l4 + 2 * i
            if at + 2 <= len(view.data):
                ports[i] = int.from_bytes(view.data[at:at + 2], "big")
    return Key(fp, src, dst, ports[0], ports[1], nbytes)


def holds(c: Cond, k: Key) -> bool:
    """Whether the rule holds on the key: the reference the tables are checked with."""
    if c.fp is not None and k.fp not in c.fp:
        return False
    for name in ("src", "dst", "sport", "dport"):
        allowed, value = getattr(c, name), getattr(k, name)
        if allowed is None:
            continue
        if value is None or not any(lo <= value <= hi for lo, hi in allowed):
            return False
    return True


def classify(cs: list[Cond], k: Key) -> tuple[int | None, list[int]]:
    """(index of the first terminal rule that holds or None, count rules before it)."""
    counted = []
    for c in cs:
        if holds(c, k):
            if c.terminal:
                return c.index, counted
            counted.append(c.index)
    return None, counted
