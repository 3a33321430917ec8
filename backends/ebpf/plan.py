"""The eBPF backends' view of a policy: plain data the C templates print.

Nothing here decides what a rule means: it reads the IR and lays each match out as
offsets, sizes, masks and constants (semantics.md, "Reading a frame"), so that the
template is a printer. Offsets are relative to a *cursor*: ``ip`` (the byte after the
Ethernet header and, in XDP, a skipped VLAN tag) or ``l4`` (the transport header, set
only when the IP header is one the kernel accepts and the packet is a first fragment).

Every integer that reaches C is an ``int`` formatted by the template, every comment is
built from IR values (numbers, addresses, hex bytes): nothing a user typed is pasted
into the C source as text.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace

from pfc.backends.base import rule_features
from pfc.backends.ebpf import counters, firewall, flowplan
from pfc.backends.ebpf.comment import describe
from pfc.frontend import ir

# Field layout per IP version: (offset from the IP header, size in bytes).
IP_FIELDS = {
    4: {"src": (12, 4), "dst": (16, 4), "proto": (9, 1), "ttl": (8, 1), "len": (2, 2)},
    6: {"src": (8, 16), "dst": (24, 16), "proto": (6, 1), "ttl": (7, 1), "len": (4, 2)},
}
LEN_BIAS = {4: 0, 6: 40}  # IPv6 `len` is 40 + payload length
L4_FIELDS = {"sport": (0, 2), "dport": (2, 2), "icmp-type": (0, 1), "icmp-code": (1, 1)}
TCP_FLAGS_OFF, TCP_DOFF_OFF, UDP_HLEN = 13, 12, 8
WIDTHS = {1: "U8", 2: "U16", 4: "U32"}
# The largest constant offset a payload match reads with direct packet access; beyond
# it a load helper reads the bytes (the verifier refuses packet ranges past 0xffff).
DIRECT_PAYLOAD_MAX = 32768
# An address list with more prefixes of one family than this is looked up in an
# LPM_TRIE map filled at load time (:mod:`pfc.backends.ebpf.maps`) instead of tested
# one prefix at a time in the code.
INLINE_PREFIXES_MAX = 32
# An IPv4 list with more (collapsed) prefixes than this uses two array maps (a /24
# bitmap) instead of an LPM_TRIE: ~1-3 ns a lookup instead of ~65 ns at 100k entries,
# for ~6 MB of kernel memory per set, whatever its size (docs/ebpf.md).
BITMAP_MIN_PREFIXES = 1024


@dataclass(frozen=True)
class Word:
    """``(U32(cursor, off) & mask) == value``, host byte order."""

    off: int
    mask: int
    value: int


@dataclass(frozen=True)
class Chunk:
    """``Un(cursor, off) == value`` for n = size bytes, host byte order."""

    off: int
    size: int
    value: int


@dataclass(frozen=True)
class SetMap:
    """A large address list of one family, looked up in maps filled at load time
    (:mod:`pfc.backends.ebpf.maps`) from the collapsed, disjoint ``prefixes``:

    - ``lpm``: one ``LPM_TRIE`` (key ``{u32 prefixlen; address bytes in network
      order}``, value u8 1);
    - ``bitmap`` (IPv4, more than ``BITMAP_MIN_PREFIXES``): two arrays, ``name`` with
      one entry per 64 /24s (which are wholly in the set, which partly, and where the
      partial ones' 256-bit bitmaps start in ``leaf``) and ``leaf``: two array
      lookups the verifier inlines instead of a trie walk (docs/ebpf.md, measured).

    One set per (rule, match, family), named ``pfc_r<rule>_<field><family>`` (BPF
    object names keep 15 characters: enough up to rule 99999, 9999 for ``inner``).
    ``name`` is an ``ARRAY_OF_MAPS`` of one slot holding the set's map (``inner``): a
    live change (``pfc set``) fills a new inner map and swaps it in with one update
    (docs/operate.md). ``source``: the ``set``/``define`` whose contents these are
    exactly (None: a list written in the rule, or merged with others)."""

    name: str
    version: int
    prefixes: tuple[tuple[int, int], ...]  # (network address as an integer, length)
    kind: str = "lpm"  # lpm | bitmap
    source: str | None = None

    @property
    def key_size(self) -> int:
        return 4 + (4 if self.version == 4 else 16)

    @property
    def words(self) -> int:
        """The address as u32 words in the key."""
        return 1 if self.version == 4 else 4

    @property
    def inner(self) -> str:
        return self.name + "i"

    @property
    def partial(self) -> int:
        """bitmap: how many /24s the set holds only part of (leaf entries, at least 1:
        an array cannot be empty)."""
        return max(1, len({a >> 8 for a, n in self.prefixes if n > 24}))

    @property
    def capacity(self) -> int:
        """bitmap: leaf entries the inner array has room for, with headroom for live
        changes (an inner array's size is fixed: the verifier inlines its lookups)."""
        return leaf_capacity(self.partial)


def leaf_capacity(partial: int) -> int:
    """Room for ``partial`` leaves and half as many more (at least 1024), rounded up to
    a multiple of 1024."""
    return (max(partial + partial // 2, 1024) + 1023) // 1024 * 1024


@dataclass(frozen=True)
class MatchPlan:
    kind: str  # addr | int | flags | frag | payload
    field: str
    negated: bool
    base: str  # ip | l4
    have: int  # bytes from ``base`` that must be in the frame
    off: int = 0  # where the value is read
    size: int = 0
    bias: int = 0  # added to the value read (IPv6 len)
    alternatives: tuple[tuple[Word, ...], ...] = ()  # addr: OR of ANDs
    setmap: SetMap | None = None  # addr: a large list, looked up in maps instead
    ranges: tuple[tuple[int, int], ...] = ()  # int
    maximum: int = 0  # int: largest value the field can hold
    mask: int = 0  # flags
    bits: int = 0  # flags
    proto: int = 0  # payload: tcp or udp
    chunks: tuple[Chunk, ...] = ()  # payload, compared in place
    octets: tuple[int, ...] = ()  # payload, compared in a copy
    length: int = 0  # payload
    direct: bool = True  # payload: direct packet access (else a load helper)


@dataclass(frozen=True)
class Branch:
    """A rule's test for one IP version: EtherType, protocol byte, matches.

    All of a rule's tests must hold and each needs its field present, so one presence
    test of the farthest byte a branch reads from ``ip`` (``ip_need``) or from ``l4``
    (``l4_need``, payload apart) stands for all of them: the meaning is the same, the
    program tests each bound once, as a hand-written one would."""

    version: int
    proto: int | None
    ip_matches: tuple[MatchPlan, ...]
    l4_matches: tuple[MatchPlan, ...]
    ip_need: int = 0
    l4_need: int = 0


@dataclass(frozen=True)
class RedirectPlan:
    """The new destination (and port). The L4 checksum is updated for any TCP or UDP
    packet whose transport header is accepted (the protocol byte says which, at run
    time: a ``redirect ip`` rule rewrites TCP and UDP alike); the port only when the
    rule's protocol is TCP or UDP and the target has one."""

    version: int
    words: tuple[int, ...]  # the new destination address as host-order u32 words
    addr_off: int
    proto_off: int  # where the protocol byte / Next Header lies
    port: int | None


@dataclass(frozen=True)
class RulePlan:
    index: int
    line: int
    action: str  # drop | pass | count | redirect | log | reject | mark
    comment: str
    branches: tuple[Branch, ...]  # empty: the rule holds for every frame (or meta)
    redirect: RedirectPlan | None = None
    slot: int = 0  # its entry in pfc_counters
    flow: flowplan.RuleFlow | None = None  # log, limit, audit
    meta: tuple[firewall.MetaPlan, ...] = ()  # link-layer and hook matches, tested first
    reject: firewall.RejectPlan | None = None
    mark: int = 0  # `mark ... to N`: the new mark


@dataclass
class ProgramPlan:
    hook: str  # xdp | tc | socket | nfbpf | cgroup (tc-egress: tc, egress=True)
    default: str  # drop | pass
    rules: list[RulePlan]
    slots: counters.Slots
    l4_versions: frozenset[int]  # IP versions whose transport header a rule reads
    need: int  # bytes from the frame start the program may read directly (tc pull)
    features: frozenset[str] = frozenset()  # base.FEATURES the rules use
    far_payload: bool = False  # a payload match beyond DIRECT_PAYLOAD_MAX
    sets: tuple[SetMap, ...] = ()
    direct_max: int = DIRECT_PAYLOAD_MAX
    flow: flowplan.ProgramFlow | None = None  # events, buckets, clock
    ifaces: tuple[tuple[str, ...], ...] = ()  # iif/oif name lists (bits of pfc_ifaces)
    egress: bool = False  # tc: attached at clsact egress; cgroup: cgroup_skb/egress
    program: str = ""  # the program's (function's) name

    @property
    def has_meta(self) -> bool:
        return any(r.meta for r in self.rules)

    @property
    def reject_versions(self) -> frozenset[int]:
        """The IP versions some ``reject`` rule may answer."""
        return frozenset(v for r in self.rules if r.reject is not None
                         for v in ([b.version for b in r.branches] or [4, 6]))


# ------------------------------------------------------------------------------ matches

def _u32_words(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[int]:
    raw = address.packed
    return [int.from_bytes(raw[i:i + 4], "big") for i in range(0, len(raw), 4)]


def prefix_words(net: ir.IPNetwork, off: int) -> tuple[Word, ...]:
    """A prefix as word tests on the address at ``off``; () for /0 (always holds)."""
    words = []
    bits = net.prefixlen
    for i, value in enumerate(_u32_words(net.network_address)):
        take = max(0, min(32, bits - 32 * i))
        if take == 0:
            break
        mask = (0xFFFFFFFF << (32 - take)) & 0xFFFFFFFF
        words.append(Word(off + 4 * i, mask, value & mask))
    return tuple(words)


def collapse(nets: list[ir.IPNetwork]) -> tuple[tuple[int, int], ...]:
    """Prefixes of one family as the fewest disjoint prefixes covering the same
    addresses (nested, overlapping and adjacent ones merged), sorted, as (network
    address as an integer, prefix length). Integer arithmetic: ``ipaddress``'s
    ``collapse_addresses`` takes seconds on 100k prefixes."""
    if not nets:
        return ()
    bits = nets[0].max_prefixlen
    out: list[tuple[int, int]] = []
    for lo, hi in intervals(nets, bits):
        while lo <= hi:
            size = lo & -lo if lo else 1 << bits  # the largest block aligned at lo
            while lo + size - 1 > hi:
                size >>= 1
            out.append((lo, bits + 1 - size.bit_length()))
            lo += size
    return tuple(out)


def intervals(nets: list[ir.IPNetwork], bits: int) -> list[tuple[int, int]]:
    """Prefixes as sorted inclusive (first, last) address ranges, overlapping and
    adjacent ones merged."""
    spans = sorted((a, a | ((1 << (bits - n.prefixlen)) - 1))
                   for n in nets for a in (int(n.network_address),))
    out: list[tuple[int, int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def set_name(rule: int, field: str, version: int, repeat: int = 0) -> str:
    """The map of a rule's address match on one family; ``repeat`` counts earlier
    matches of the rule on the same field (``src $a src $b``)."""
    return f"pfc_r{rule}_{field}{version}" + (f"_{repeat}" if repeat else "")


def addr_plan(m: ir.AddrMatch, version: int, name: str) -> MatchPlan:
    """Inline word tests for a short list (as written, or once merged: 100k adjacent
    hosts are 22 prefixes); maps named after ``name`` for a long one."""
    off, size = IP_FIELDS[version][m.field]
    nets = [n for n in m.prefixes if n.version == version]
    if len(nets) > INLINE_PREFIXES_MAX:
        prefixes = collapse(nets)
        if len(prefixes) > INLINE_PREFIXES_MAX:
            kind = "bitmap" if version == 4 and len(prefixes) > BITMAP_MIN_PREFIXES else "lpm"
            return MatchPlan("addr", m.field, m.negated, "ip", off + size, off, size,
                             setmap=SetMap(name, version, prefixes, kind, m.set_name))
        net_type = ipaddress.IPv4Network if version == 4 else ipaddress.IPv6Network
        nets = [net_type(p) for p in prefixes]
    alternatives = tuple(prefix_words(n, off) for n in nets)
    return MatchPlan("addr", m.field, m.negated, "ip", off + size, off, size,
                     alternatives=alternatives)


def int_plan(m: ir.IntMatch, version: int) -> MatchPlan:
    if m.field in L4_FIELDS:
        off, size = L4_FIELDS[m.field]
        base = "l4"
    else:
        off, size = IP_FIELDS[version][m.field]
        base = "ip"
    bias = LEN_BIAS[version] if m.field == "len" else 0
    maximum = (1 << (8 * size)) - 1 + bias
    return MatchPlan("int", m.field, m.negated, base, off + size, off, size, bias=bias,
                     ranges=m.ranges, maximum=maximum)


def flags_plan(m: ir.FlagsMatch) -> MatchPlan:
    return MatchPlan("flags", "flags", m.negated, "l4", TCP_FLAGS_OFF + 1, TCP_FLAGS_OFF, 1,
                     mask=m.set | m.clear, bits=m.set)


def frag_plan(m: ir.FragMatch) -> MatchPlan:
    return MatchPlan("frag", "frag", m.negated, "ip", 8, 6, 2, mask=0x3FFF)


def payload_chunks(data: bytes) -> tuple[Chunk, ...]:
    out, pos = [], 0
    while pos < len(data):
        size = next(s for s in (4, 2, 1) if pos + s <= len(data))
        out.append(Chunk(pos, size, int.from_bytes(data[pos:pos + size], "big")))
        pos += size
    return tuple(out)


def payload_plan(m: ir.PayloadMatch, proto: int) -> MatchPlan:
    return MatchPlan("payload", "payload", m.negated, "l4", 0, m.offset, len(m.data),
                     proto=proto, chunks=payload_chunks(m.data), octets=tuple(m.data),
                     length=len(m.data), direct=m.offset <= DIRECT_PAYLOAD_MAX)


def match_plan(m: ir.Match, version: int, proto: int | None, name: str = "") -> MatchPlan:
    if isinstance(m, ir.AddrMatch):
        return addr_plan(m, version, name)
    if isinstance(m, ir.IntMatch):
        return int_plan(m, version)
    if isinstance(m, ir.FlagsMatch):
        return flags_plan(m)
    if isinstance(m, ir.FragMatch):
        return frag_plan(m)
    if isinstance(m, ir.PayloadMatch):
        if proto not in (ir.TCP, ir.UDP):
            raise ValueError("payload match without tcp/udp (the checker forbids it)")
        return payload_plan(m, proto)
    raise TypeError(f"unknown match {m!r}")


# -------------------------------------------------------------------------------- rules

def branch(rule: ir.Rule, version: int) -> Branch:
    """One IP version's test. A ``redirect`` rule also needs the destination address
    present: with nothing to rewrite it does not hold (the interpreter's step 4)."""
    plans = [match_plan(m, version, rule.proto, name)
             for m, name in zip(rule.matches, _set_names(rule, version), strict=True)
             if not firewall.is_meta(m)]
    if version == 6 and any(p.kind == "frag" for p in plans):
        raise ValueError("`frag` on an IPv6 rule (the checker forbids it)")
    ip_plans = tuple(p for p in plans if p.base == "ip")
    l4_plans = tuple(p for p in plans if p.base == "l4")
    needs = [IP_FIELDS[version]["proto"][0] + 1 if rule.proto is not None else 0]
    if isinstance(rule.action, ir.Redirect):
        needs.append(sum(IP_FIELDS[version]["dst"]))
    return Branch(version, rule.proto, ip_plans, l4_plans,
                  max(needs + [p.have for p in ip_plans]),
                  max([0] + [p.have for p in l4_plans if p.kind != "payload"]))


def _set_names(rule: ir.Rule, version: int) -> list[str]:
    """The map name each match would use if it is a large address list."""
    seen: dict[str, int] = {}
    names = []
    for m in rule.matches:
        field = getattr(m, "field", "")
        names.append(set_name(rule.index, field, version, seen.get(field, 0)))
        seen[field] = seen.get(field, 0) + 1
    return names


def redirect_plan(rule: ir.Rule) -> RedirectPlan:
    action = rule.action
    assert isinstance(action, ir.Redirect)
    version = action.address.version
    port = action.port if rule.proto in (ir.TCP, ir.UDP) else None
    return RedirectPlan(version, tuple(_u32_words(action.address)),
                        IP_FIELDS[version]["dst"][0], IP_FIELDS[version]["proto"][0], port)


def rule_plan(rule: ir.Rule, slot: int = 0, flow: flowplan.RuleFlow | None = None,
              lists: tuple[tuple[str, ...], ...] = ()) -> RulePlan:
    versions = sorted(rule.family.versions) if rule.family is not ir.Family.ANY else []
    branches = tuple(branch(rule, v) for v in versions)
    redirect = redirect_plan(rule) if isinstance(rule.action, ir.Redirect) else None
    mark = rule.action.value if isinstance(rule.action, ir.Mark) else 0
    return RulePlan(rule.index, rule.line, rule.action.name, describe(rule),
                    branches, redirect, slot, flow, firewall.rule_meta(rule, lists),
                    firewall.reject_plan(rule), mark)


# ------------------------------------------------------------------------------ program

def reach(plan: RulePlan, l2: int) -> int:
    """How many bytes from the frame start this rule may read or write directly:
    Ethernet (and a tag: ``l2``) + IPv4 header with options (60) + what it reads of L4."""
    far = l2 + 60
    for b in plan.branches:
        for m in b.l4_matches:
            extent = m.have
            if m.kind == "payload":
                extent = (60 if m.proto == ir.TCP else UDP_HLEN) + m.off + m.length \
                    if m.direct else 60
            far = max(far, l2 + 60 + extent)
    if plan.redirect is not None:
        far = max(far, l2 + 60 + 18)
    return far


def program_plan(policy: ir.Policy, hook: str, program: str = "") -> ProgramPlan:
    """The program for ``hook`` (``nfbpf``: a netfilter program, named ``program``).
    Every rule and the default count the packets they decide (count rules: those they
    held on) in ``pfc_counters``; a program with sets (maps filled at load time) also
    has the ready map and its ``not_ready`` slot. A netfilter program reads the
    devices' names at run time (no ``pfc_ifaces``: ``firewall.name_words``)."""
    flows = flowplan.rule_flows(policy)
    flow = flowplan.program_flow(policy, flows)
    lists = firewall.iface_lists(policy)
    rules = [rule_plan(r, n, flows.get(r.index), lists) for n, r in enumerate(policy.rules)]
    l4_versions = frozenset(b.version for r in rules for b in r.branches if b.l4_matches) | {
        r.redirect.version for r in rules if r.redirect}
    features = frozenset().union(*(rule_features(r) for r in policy.rules))
    far = any(m.kind == "payload" and not m.direct
              for r in rules for b in r.branches for m in b.l4_matches)
    if hook == "socket" and "redirect" in features:
        raise ValueError("a socket filter cannot rewrite packets (`redirect`)")
    program = program or f"pfc_{hook.replace('-', '_')}"
    egress = hook in ("tc-egress", "cgroup-egress")
    hook = {"tc-egress": "tc", "cgroup-ingress": "cgroup", "cgroup-egress": "cgroup"}.get(
        hook, hook)
    copied = hook in ("socket", "nfbpf", "cgroup")  # read through a copy, not the packet
    lists = () if hook == "nfbpf" else lists
    l2 = 18 if hook == "xdp" else 0 if hook in ("nfbpf", "cgroup") else 14  # tc: no tag
    need = max((reach(r, l2) for r in rules), default=l2)
    sets = tuple(m.setmap for r in rules for b in r.branches for m in b.ip_matches
                 if m.setmap is not None)
    slots = counters.slots(policy, bool(sets or lists), bool(flow and flow.events))
    rules = [replace(r, slot=slots.rules[r.index]) if r.index in slots.rules else r
             for r in rules]
    return ProgramPlan(hook, policy.default.value, rules, slots, l4_versions, need,
                       features, far and not copied, sets=sets, flow=flow,
                       ifaces=lists, egress=egress, program=program)
