"""IR rule → nftables rules (tuples of :mod:`nft_expr` terms), for one hook.

Input: rules of one IP family (``IP4``/``IP6``, after ``split_families``) or of family
``ANY``. Output: for each rule, zero or more :class:`NftRule`; zero when the rule can
never match (a plain list with no value left), never "match anything".

How each part of "Reading a frame" (semantics.md) is written, and which kernel fact
it absorbs (docs/nft.md has the measurements):

- the family gate: ``meta protocol ip|ip6`` at netdev ingress (skb->protocol, the
  EtherType after the kernel removed the outer tag), ``meta nfproto ipv4|ipv6`` at the
  inet hooks;
- IP fields are the named header fields (``ip saddr``, ``ip6 hoplimit`` ...), read raw
  at the network header: a load past the packet ends the rule (fact 1: no header
  validity needed, as in the interpreter); the protocol keyword alone is ``ip protocol``
  / ``ip6 nexthdr`` (the fixed header's byte);
- transport fields add ``meta l4proto P`` (set only on a header the kernel accepts,
  fact 2), on IPv4 ``ip frag-off & 0x1fff == 0`` (fact 3: ``tcp dport`` reads a later
  fragment's data) and on IPv6 ``ip6 nexthdr P`` (fact 5: nft walks extension headers);
  negated matches need the same guards, so ``!dport 53`` is false on a later fragment;
- ``payload`` is ``@ih`` (from the end of the TCP header / 8 bytes into UDP); TCP adds
  ``tcp doff >= 5`` (nft would start the payload at a data offset below 5);
- lists are anonymous sets; lists of more than ``NAMED_MIN`` values and lists named
  in the policy (``define``/``set``) are named sets (``flags interval``).

And three nft 1.0.6 quirks (docs/nft.md 6-8): a single prefix is preceded by a load of
the whole address (nft loads only the prefix's bytes); a negated single value is a
range ``V-V`` (nft merges adjacent ``!=`` compares into one, "either differs"); the
``proto`` field is a raw load (a protocol set confuses nft's protocol context).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pfc.backends.base import check_name
from pfc.backends.nft import expr as x
from pfc.backends.nft import firewall as fw
from pfc.backends.nft.expr import Node as Term
from pfc.frontend import ir, values

NAMED_MIN = 32  # lists longer than this become named sets
PROTO = {ir.TCP: "tcp", ir.UDP: "udp", ir.ICMP: "icmp", ir.ICMP6: "icmpv6"}
IP_FIELDS = {  # (family, field) -> (nft protocol, nft field, set type, largest value)
    (4, "src"): ("ip", "saddr", "ipv4_addr", None),
    (4, "dst"): ("ip", "daddr", "ipv4_addr", None),
    (6, "src"): ("ip6", "saddr", "ipv6_addr", None),
    (6, "dst"): ("ip6", "daddr", "ipv6_addr", None),
    (4, "proto"): ("@nh", "72", None, 255),  # raw: see int_field
    (6, "proto"): ("@nh", "48", None, 255),
    (4, "ttl"): ("ip", "ttl", None, 255),
    (6, "ttl"): ("ip6", "hoplimit", None, 255),
    (4, "len"): ("ip", "length", None, 65535),
    (6, "len"): ("ip6", "length", None, 65535),  # the payload length: values - 40
}
PORT_TYPE = "inet_service"
ICMP_TYPE = {ir.ICMP: "icmp_type", ir.ICMP6: "icmpv6_type"}
ICMP_CODE = {ir.ICMP: "icmp_code", ir.ICMP6: "icmpv6_code"}


@dataclass(frozen=True)
class NftRule:
    """One nft rule: ``terms`` (matches then statements), the policy rule it comes from."""

    index: int | None  # None: the default
    terms: tuple[Term, ...]
    comment: str | None = None  # [A-Za-z0-9 _-] only (built by the backend)

    @property
    def text(self) -> str:
        tail = [f'comment "{self.comment}"'] if self.comment else []
        return " ".join([t.text for t in self.terms] + tail)

    def json(self, family: str, table: str, chain: str) -> dict:
        out = {"family": family, "table": table, "chain": chain,
               "expr": [t.json for t in self.terms]}
        if self.comment:
            out["comment"] = self.comment
        return out


@dataclass(frozen=True)
class NftSet:
    name: str
    type: str
    interval: bool
    elements: tuple[Term, ...]


class Impossible(Exception):
    """A match that can never hold (a plain list with no value of the family)."""


@dataclass
class Lowering:
    """Lowers the rules of one policy for one hook kind (``netdev`` or ``inet``) and
    collects the named sets they use."""

    hook_family: str  # "netdev" | "inet"
    sets: dict[str, NftSet] = field(default_factory=dict)

    # ------------------------------------------------------------------ gates

    def family_gate(self, version: int) -> Term:
        if self.hook_family == "netdev":
            return x.match(x.meta("protocol"), x.symbol("ip" if version == 4 else "ip6"))
        return x.match(x.meta("nfproto"), x.symbol("ipv4" if version == 4 else "ipv6"))

    def matches(self, rule: ir.Rule) -> list[Term]:
        """Every match of ``rule`` with its guards; Impossible if it can never hold."""
        if rule.family is ir.Family.ANY:  # only matches that need no IP (iif, mark, ...)
            assert rule.proto is None, "family ANY has no protocol"
            return [t for m in rule.matches for t in self.match(rule, m, None)]
        version = version_of(rule)
        terms = [self.family_gate(version)]
        terms += protocol_guards(rule, version)
        for m in rule.matches:
            terms += self.match(rule, m, version)
        return terms

    # ---------------------------------------------------------------- matches

    def match(self, rule: ir.Rule, m: ir.Match, version: int | None) -> list[Term]:
        if fw.is_v2(m):
            if _no_value(m):  # `mark 6 mark 3` merged: nft refuses `meta mark { }`
                raise Impossible
            return fw.match(m)
        if isinstance(m, ir.AddrMatch):
            return self.address(rule, m, version)
        if isinstance(m, ir.FragMatch):
            frag = x.masked(x.field("ip", "frag-off"), 0x3FFF)
            return [x.match(frag, x.integer(0), not m.negated)]
        if isinstance(m, ir.FlagsMatch):
            mask = m.set | m.clear
            flags = x.masked(x.field("tcp", "flags"), mask)
            return [x.match(flags, x.hexvalue(m.set), m.negated)]
        if isinstance(m, ir.PayloadMatch):
            return payload(rule, m)
        if isinstance(m, ir.CtMatch):
            from pfc.backends.nft.stateful import ct_state
            return [ct_state(m)]
        return [self.integer(rule, m, version)]

    def address(self, rule: ir.Rule, m: ir.AddrMatch, version: int) -> list[Term]:
        """An address match. nft 1.0.6 loads only a prefix's leading bytes (``ip daddr
        10.0.0.0/8`` reads one byte), so a single prefix shorter than the address
        first tests that all of the address is there (``ip daddr 0.0.0.0/0``: a load
        of the whole field, masked to nothing); sets load the whole field."""
        proto, name, set_type, _ = IP_FIELDS[(version, m.field)]
        nets = outermost(m.prefixes, version)
        left = x.field(proto, name)
        everything = ipaddress.ip_network("0.0.0.0/0" if version == 4 else "::/0")
        there = x.match(left, x.address(everything))
        if not nets:
            if not m.negated:
                raise Impossible
            return [there]  # "not in {}": the address is there
        elements = [x.address(n) for n in nets]
        right = self.values(rule, m, elements, set_type, f"{m.field}", version)
        short = len(nets) == 1 and 0 < nets[0].prefixlen < nets[0].max_prefixlen
        return ([there] if short else []) + [x.match(left, right, m.negated)]

    def integer(self, rule: ir.Rule, m: ir.IntMatch, version: int) -> Term:
        left, set_type, top, shift = int_field(rule, m.field, version)
        ranges = clip(m.ranges, shift, top)
        if not ranges:
            if not m.negated:
                raise Impossible
            return x.match(left, x.span(0, top))  # "the field is there"
        elements = [x.span(lo, hi) for lo, hi in ranges]
        if m.negated and len(elements) == 1:
            elements = [unmergeable(elements[0])]
        right = self.values(rule, m, elements, set_type, m.field, None)
        return x.match(left, right, m.negated)

    def values(self, rule: ir.Rule, m: ir.AddrMatch | ir.IntMatch, elements: list[Term],
               set_type: str | None, what: str, version: int | None) -> Term:
        """One value, an anonymous set, or a reference to a named set."""
        named = set_type is not None and len(elements) > 1 and (
            m.set_name is not None or len(elements) > NAMED_MIN)
        if not named:
            return x.anonymous_set(elements)
        base = _set_base(m.set_name) or f"r{rule.index}_{what.replace('-', '_')}"
        base += str(version) if version else ""
        interval = any(isinstance(e.json, dict) for e in elements)
        return x.set_ref(self.named_set(base, set_type, interval, tuple(elements)))

    def named_set(self, base: str, set_type: str, interval: bool,
                  elements: tuple[Term, ...]) -> str:
        """The name of a set with these elements (reused when one exists)."""
        wanted = NftSet(base, set_type, interval, elements)
        name, n = base, 1
        while name in self.sets and self.sets[name] != NftSet(name, set_type, interval,
                                                                elements):
            n += 1
            name = f"{base}_{n}"
        self.sets[name] = NftSet(name, wanted.type, interval, elements)
        return check_name(name, "set")


# --------------------------------------------------------------------- helpers

def _no_value(m: ir.Match) -> bool:
    """A positive v2 match of no value (merged from two that share none): it never
    holds, as the checker warned."""
    if m.negated:
        return False
    values = [getattr(m, a) for a in ("ranges", "macs", "names", "types", "states")
              if hasattr(m, a)]
    return bool(values) and not values[0]


def version_of(rule: ir.Rule) -> int:
    if rule.family is ir.Family.IP4:
        return 4
    if rule.family is ir.Family.IP6:
        return 6
    raise ValueError(f"rule {rule.index}: nft lowering needs one family "
                     "(run split_families first)")


def protocol_guards(rule: ir.Rule, version: int) -> list[Term]:
    """The protocol keyword, or the guards every transport match needs."""
    if rule.proto is None:
        return []
    if not rule.transport_matches:
        fixed = x.field("ip", "protocol") if version == 4 else x.field("ip6", "nexthdr")
        return [x.match(fixed, protocol(rule.proto))]
    assert rule.proto in PROTO, "transport matches need tcp, udp, icmp or icmp6"
    return transport_guards(version, rule.proto)


def transport_guards(version: int, proto: int) -> list[Term]:
    """The transport header is readable with protocol ``proto`` as pfc reads it:
    ``meta l4proto`` (set only on a header the kernel accepts, fact 2), and on IPv4 a
    first fragment (fact 3: ``tcp dport`` and every ``@th`` load of up to 4 aligned
    bytes read a later fragment's data), on IPv6 the fixed header's Next Header
    (fact 5: nft's l4proto follows extension headers)."""
    l4 = x.match(x.meta("l4proto"), protocol(proto))
    if version == 4:
        return [l4, x.match(x.masked(x.field("ip", "frag-off"), 0x1FFF), x.integer(0))]
    return [x.match(x.field("ip6", "nexthdr"), protocol(proto)), l4]


def protocol(number: int) -> Term:
    """An IP protocol number, by name where nft prints one."""
    names = {ir.ICMP: "icmp", ir.TCP: "tcp", ir.UDP: "udp", ir.ICMP6: "ipv6-icmp"}
    return x.symbol(names[number]) if number in names else x.integer(number)


def int_field(rule: ir.Rule, name: str, version: int) -> tuple[Term, str | None, int, int]:
    """(left side, named-set type, largest value, amount subtracted from values)."""
    if name in ("sport", "dport"):
        return x.field(PROTO[rule.proto], name), PORT_TYPE, 65535, 0
    if name == "icmp-type":
        return x.field(PROTO[rule.proto], "type"), ICMP_TYPE[rule.proto], 255, 0
    if name == "icmp-code":
        return x.field(PROTO[rule.proto], "code"), ICMP_CODE[rule.proto], 255, 0
    proto, field_, set_type, top = IP_FIELDS[(version, name)]
    shift = 40 if (version, name) == (6, "len") else 0
    if proto == "@nh":
        # The protocol byte as a raw load: nft 1.0.6 takes `ip6 nexthdr { 6, 17 }` as
        # protocol context and then refuses `tcp dport` ("conflicting protocols").
        return x.raw("nh", int(field_), 8), None, top, 0
    return x.field(proto, field_), set_type, top, shift


def clip(ranges: tuple[tuple[int, int], ...], shift: int, top: int) -> list[tuple[int, int]]:
    """The ranges minus ``shift``, cut to ``0..top`` (IPv6 ``len`` is 40 + the field)."""
    out = []
    for lo, hi in ranges:
        lo, hi = max(lo - shift, 0), min(hi - shift, top)
        if lo <= hi:
            out.append((lo, hi))
    return out


def payload(rule: ir.Rule, m: ir.PayloadMatch) -> list[Term]:
    """``@ih``: TCP payload starts at the data offset, which must be 5 or more."""
    guard = [x.compare(x.field("tcp", "doff"), ">=", x.integer(5))] if rule.proto == ir.TCP \
        else []
    left = x.raw("ih", m.offset * 8, len(m.data) * 8)
    value = x.wide(m.data)
    return guard + [x.match(left, unmergeable(value) if m.negated else value, m.negated)]


def unmergeable(value: Term) -> Term:
    """A single value ``V`` as the range ``V-V``, for ``!=``: nft 1.0.6 merges the
    constant compares of adjacent payload fields into one wider compare (``tcp dport
    != 53 tcp sport != 80`` becomes one 4-byte ``!=``: "either differs" instead of
    "both differ"); range compares are never merged. Ranges and sets stay."""
    if isinstance(value.json, dict):
        return value
    return x.Node(f"{value.text}-{value.text}", {"range": [value.json, value.json]})


_OUTERMOST: dict[tuple[int, int], tuple[object, list]] = {}


def outermost(prefixes: tuple[ir.IPNetwork, ...], version: int) -> list[ir.IPNetwork]:
    """The prefixes of ``version`` not inside another one, sorted: the same addresses,
    and no two overlap (an nft interval set refuses overlaps). Linear after sorting and
    cached per list, so a 100k-entry ``set ... file`` used twice costs one pass."""
    hit = _OUTERMOST.get((id(prefixes), version))
    if hit is not None and hit[0] is prefixes:
        return hit[1]
    out = values.outermost(p for p in prefixes if p.version == version)
    if len(_OUTERMOST) > 256:
        _OUTERMOST.clear()
    _OUTERMOST[(id(prefixes), version)] = (prefixes, out)
    return out


def _set_base(name: str | None) -> str | None:
    if name is None:
        return None
    return name.replace("-", "_")[:28]

