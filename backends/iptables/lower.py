"""IR rule → iptables match arguments, per IP family.

A rule becomes, for one family, a list of *alternatives*: conjunctions of iptables
matches, pairwise disjoint (no packet satisfies two of them), so that one rule printed as
several lines still counts each packet once. An empty list means the rule cannot match
any packet of that family (it is left out; it is never turned into "match anything").

Choices, each a kernel fact from docs/iptables.md:

- addresses: one prefix is ``-s``/``-d``; more are an ipset (``hash:net``, one per
  family), since ``-s a,b`` cannot be negated;
- the protocol keyword is ``-p`` on IPv4 (the header's protocol byte, nothing parsed) but
  a u32 test of the fixed header's Next Header on IPv6: ip6tables' ``-p`` walks
  extension headers, and iptables-legacy hotdrops a packet whose chain is malformed;
- every IPv4 rule with a transport match gets ``! -f`` (semantics.md fact 4);
- transport fields are u32 tests (or a ``-m bpf`` program where u32 cannot be exact,
  see iptables_u32), never xt_tcpudp/multiport/icmp matches, which hotdrop short headers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pfc.backends.iptables import firewall as fw
from pfc.backends.iptables import u32 as u
from pfc.frontend import ir, values
from pfc.frontend.diagnostics import CompileError, error

MAX_ALTERNATIVES = 64
PROTO_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 58: "ipv6-icmp"}


@dataclass(frozen=True)
class Conj:
    """Matches that must all hold: native arguments, u32 tests, bpf programs."""

    args: tuple[str, ...] = ()
    u32: tuple[u.U32Test, ...] = ()
    bpf: tuple[str, ...] = ()

    def __and__(self, other: Conj) -> Conj:
        return Conj(self.args + other.args, self.u32 + other.u32, self.bpf + other.bpf)

    def argv(self) -> list[str]:
        out = list(self.args) + u.u32_args(self.u32)
        for program in self.bpf:
            out += ["-m", "bpf", "--bytecode", f'"{program}"']
        return out


Alts = list[Conj]
ALWAYS: Alts = [Conj()]


def product(a: Alts, b: Alts, rule: ir.Rule) -> Alts:
    out = [x & y for x, y in itertools.product(a, b)]
    if len(out) > MAX_ALTERNATIVES:
        raise CompileError([error(
            f"target `iptables`: rule at line {rule.line} needs {len(out)} iptables rules "
            f"(more than {MAX_ALTERNATIVES})", rule.span,
            hint="use fewer or shorter lists in one rule", code="too-complex")])
    return out


def tests(location: str, ranges: u.Ranges, size: int = u.U32_MAX_VALUES,
          hexa: bool = False) -> Alts:
    """A value test split into disjoint alternatives of at most ``size`` ranges."""
    if not ranges:
        return []
    return [Conj(u32=(u.U32Test(location, piece, hexa),)) for piece in u.chunks(ranges, size)]


@dataclass(frozen=True)
class IpSet:
    name: str
    family: int
    prefixes: tuple[ir.IPNetwork, ...]


@dataclass
class Lowering:
    """Lowers the rules of one policy; collects the ipsets they need."""

    set_prefix: str
    sets: dict[str, IpSet] = field(default_factory=dict)

    def rule(self, rule: ir.Rule, family: int) -> Alts:
        if family not in rule.family.versions:
            return []
        alts = ALWAYS
        for m in rule.matches:
            if isinstance(m, ir.AddrMatch):
                alts = product(alts, self.address(rule, m, family), rule)
        one_flag_each(rule, alts)
        alts = product(alts, protocol(rule, family), rule)
        if family == 4 and rule.transport_matches:
            alts = product(alts, [Conj(("!", "-f"))], rule)
        for m in rule.matches:
            if not isinstance(m, ir.AddrMatch):
                alts = product(alts, match(rule, m, family), rule)
        return alts

    def address(self, rule: ir.Rule, m: ir.AddrMatch, family: int) -> Alts:
        nets = outermost([p for p in m.prefixes if p.version == family])
        if any(p.prefixlen == 0 for p in nets):
            return [] if m.negated else ALWAYS
        if not nets:
            return ALWAYS if m.negated else []
        neg = ("!",) if m.negated else ()
        flag = "-s" if m.field == "src" else "-d"
        if len(nets) == 1:
            return [Conj(neg + (flag, str(nets[0])))]
        name = self.set_name(rule, m, family)
        if self.sets.get(name, IpSet(name, family, nets)).prefixes != nets:
            name = f"{name}.{len(self.sets)}"  # a second list on the same field
        self.sets[name] = IpSet(name, family, nets)
        return [Conj(("-m", "set") + neg + ("--match-set", name, m.field))]

    def set_name(self, rule: ir.Rule, m: ir.AddrMatch, family: int) -> str:
        """``PREFIX-NAME4`` for a named list (``define``/``set``), else
        ``PREFIX.rINDEX.src4`` (a dot never occurs in a policy name, so the two kinds
        never collide); at most 31 characters (ipset's limit)."""
        name = f"{self.set_prefix}-{m.set_name}{family}" if m.set_name else ""
        if not name or len(name) > 31:
            name = f"{self.set_prefix}.r{rule.index}.{m.field}{family}"
        return name


NATIVE_FLAGS = {"-s": "src", "-d": "dst"}


def one_flag_each(rule: ir.Rule, alts: Alts) -> None:
    """iptables takes one ``-s`` and one ``-d`` per rule (``multiple -s flags not
    allowed``): a field given twice whose lists are single prefixes (``src A src B``)
    is refused here, as a capability error on the rule, before iptables-restore sees
    it. The checker merges a field given twice into one match, so only a policy built
    in-process without the checker gets here; this keeps the emitter closed for it."""
    for conj in alts[:1]:  # every alternative has the same address arguments
        for flag, field_ in NATIVE_FLAGS.items():
            if conj.args.count(flag) > 1:
                raise CompileError([error(
                    f"target `iptables` cannot express `{field_}` given twice in one rule "
                    f"(rule at line {rule.line}): iptables takes one `{flag}` per rule",
                    rule.span, code="unsupported",
                    hint=f"write one `{field_}` (both must hold: the smaller prefix when "
                    "one holds the other, else the rule never matches), or use nft or "
                    "an eBPF target")])


def outermost(nets: list[ir.IPNetwork]) -> tuple[ir.IPNetwork, ...]:
    """The prefixes not inside another one of the list, sorted (the same addresses;
    linear after sorting, so a 100k-entry set stays fast)."""
    return tuple(values.outermost(nets))


def protocol(rule: ir.Rule, family: int) -> Alts:
    if rule.proto is None:
        return ALWAYS
    if family == 4:
        return [Conj(("-p", PROTO_NAMES.get(rule.proto, str(rule.proto))))]
    return tests(u.NEXT_HEADER[6], ((rule.proto, rule.proto),))


def match(rule: ir.Rule, m: ir.Match, family: int) -> Alts:
    if fw.is_v2(m):
        return [Conj(args) for args in fw.match(rule, m)]
    if isinstance(m, ir.IntMatch) and m.field in ("proto", "ttl", "len"):
        return ip_field(m, family)
    if isinstance(m, ir.FragMatch):
        return tests("4&0x3FFF", ((0, 0),) if m.negated else ((1, 0x3FFF),), hexa=True)
    if isinstance(m, ir.PayloadMatch):
        return payload(rule, m, family)
    if isinstance(m, ir.CtMatch):
        from pfc.backends.iptables.stateful import ct_args
        return [Conj(ct_args(m))]
    return transport(rule, m, family)


def ip_field(m: ir.IntMatch, family: int) -> Alts:
    """``proto``, ``ttl``, ``len``: always present at an IP hook. IPv4 ``len`` of one
    range is ``-m length`` (``skb_ip_totlen``: the total length as written); IPv6
    ``-m length`` reads ``skb->len`` since Linux 6.3, which is not 40 + payload length
    for a packet with payload length 0 and a hop-by-hop header (never trimmed), so
    IPv6 ``len`` is always a u32 test of the payload length field."""
    location, top, shift = u.IP_FIELDS[(family, m.field)]
    ranges = u.clip(m.ranges, 0, top, shift)
    if m.negated:
        ranges = u.complement(ranges, top)
    if m.field == "len" and len(m.ranges) == 1 and family == 4:
        lo, hi = m.ranges[0]
        neg = ("!",) if m.negated else ()
        return [Conj(("-m", "length") + neg + ("--length", f"{lo}:{hi}" if lo != hi else str(lo)))]
    return tests(location, ranges)


def positive(m: ir.IntMatch, top: int) -> u.Ranges:
    ranges = u.clip(m.ranges, 0, top)
    return u.complement(ranges, top) if m.negated else ranges


def transport_end(rule: ir.Rule) -> int:
    """How far into the transport header the rule's matches reach (a payload match
    reaches past the header)."""
    ends = [u.FIELD_END.get(m.field, 20) for m in rule.transport_matches]
    return max(ends, default=0)


def transport(rule: ir.Rule, m: ir.Match, family: int) -> Alts:
    """``sport dport icmp-type flags``: true only when the packet holds the field."""
    if isinstance(m, ir.FlagsMatch):
        mask = m.set | m.clear
        ranges = u.complement(((m.set, m.set),), mask) if m.negated else ((m.set, m.set),)
        return [Conj(u32=(u.flags_test(family, mask, piece),)) for piece in u.chunks(ranges, 10)] \
            if ranges else []
    assert isinstance(m, ir.IntMatch)
    location, top = u.TRANSPORT_FIELDS[(family, m.field)]
    ranges = positive(m, top)
    if family == 4 and transport_end(rule) < 4:
        # u32 would need the first 4 transport bytes; bpf reads exactly the field.
        size = 2 if m.field == "sport" else 1
        start = u.FIELD_START.get(m.field, 0)
        return [Conj(bpf=(u.bpf_ip4_field(start, size, piece),))
                for piece in u.chunks(ranges, u.BPF_MAX_RANGES)] if ranges else []
    return tests(location, ranges)


def payload(rule: ir.Rule, m: ir.PayloadMatch, family: int) -> Alts:
    """``payload[off:len] == data``; negated: all the bytes are there and differ."""
    prefix, start, guard = u.payload_base(family, rule.proto or 0)
    words = u.payload_words(start + m.offset, m.data)
    if words[0].pos < 0:  # IPv4 TCP, data ending in the first 3 payload bytes
        return [Conj(bpf=(u.bpf_ip4_tcp_payload(m.offset, m.data, m.negated),))]
    head = (guard,) if guard else ()
    tests_ = [u.word_test(prefix, w) for w in words]
    if not m.negated:
        return [Conj(u32=head + tuple(tests_))]
    last = u.word_test(prefix, words[-1], ((0, 0xFFFFFFFF),))
    alts = []
    for i, w in enumerate(words):  # disjoint: the first word that differs is word i
        present = (last,) if i < len(words) - 1 else ()
        alts.append(Conj(u32=head + tuple(tests_[:i])
                         + (u.word_test(prefix, w, u.differs(w)),) + present))
    return alts
