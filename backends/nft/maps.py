"""Blocks of ``pfc.passes.classify`` as nftables verdict maps (large policies).

A block (a run of mappable rules of one family) is a regular chain ``bK_4``/``bK_6``
the base chain jumps to under the family gate. In it, in order:

- ``meta length < 20`` (IPv6: 40, the fixed header) ``goto bK_4_short``: the block's
  rules that can hold on a frame without the whole fixed header, as ordinary rules
  (``return`` when there are none);
- each group of the ``dport`` world as ``GUARD KEY vmap @bK_4_dN``, GUARD being the
  transport guards of the ordered chain (``meta l4proto { tcp, udp }``, on IPv4 a first
  fragment, on IPv6 ``ip6 nexthdr { tcp, udp }``: semantics.md kernel facts 2, 3, 5)
  and KEY the concatenation of the group's fields (``ip saddr . ip daddr . meta
  l4proto . th sport . th dport``; a load that fails, a port beyond a truncated
  header, fails the lookup; a key without ``th dport`` gets ``th dport 0-65535`` in
  front, the port's presence); then ``GUARD th dport 0-65535 return``: a frame with a
  destination port is done with the block;
- the ``sport`` world the same way (``th sport``), then the ``ip`` world (``ip
  protocol``/``ip6 nexthdr``, the raw byte, as the protocol keyword is read).

Map elements are the group's disjoint regions (concatenated intervals: nft's pipapo
set, which refuses overlapping elements) and their value ``jump`` the region's
outcome chain: ``counter name "rule_C"`` for each count rule that holds there first,
then ``counter accept|drop comment "pfc rule N"`` for the deciding rule, or nothing
(counts only: back to the block, the next group). The runner's and loader's counters
read these as the ordered chain's (named counters; anonymous ones by comment).
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pfc.backends.nft import expr as x
from pfc.backends.nft import lower as low
from pfc.frontend import ir

if TYPE_CHECKING:  # numpy (regions) loads only when a policy is classified
    from pfc.passes import classify as cl
    from pfc.passes.regions import Outcome

MIN_LENGTH = {4: 20, 6: 40}
PROTO_KEY = {(4, True): x.meta("l4proto"), (4, False): x.field("ip", "protocol"),
             (6, True): x.field("ip6", "nexthdr"), (6, False): x.field("ip6", "nexthdr")}
TYPES = {"src": None, "dst": None, "proto": "inet_proto", "sport": "inet_service",
         "dport": "inet_service"}


@dataclass(frozen=True)
class NftMap:
    name: str
    types: tuple[str, ...]
    elements: tuple[tuple[x.Node, str], ...]  # key, chain jumped to

    @property
    def type(self) -> str:
        return " . ".join(self.types)


@dataclass
class MapLowering:
    """Collects the maps and chains of every block of one policy."""

    lowering: low.Lowering
    rule_lines: Callable[[ir.Rule], list[low.NftRule]]  # the backend's ordered rules
    maps: list[NftMap]
    chains: dict[str, list[low.NftRule]]

    def block(self, n: int, blk: cl.Block) -> low.NftRule:
        """The chains and maps of ``blk``; the base chain's rule that jumps to it."""
        v = blk.version
        name = f"b{n}_{v}"
        body: list[low.NftRule] = []
        length = x.compare(x.meta("length"), "<", x.integer(MIN_LENGTH[v]))
        if blk.short:
            short = f"{name}_short"
            self.chains[short] = [r for rule in blk.short for r in self.rule_lines(rule)]
            body.append(low.NftRule(None, (length, jump(short, goto=True))))
        else:
            body.append(low.NftRule(None, (length, x.Node("return", {"return": None}))))
        worlds = (("d", blk.dport, "dport"), ("s", blk.sport, "sport"), ("n", blk.ip, None))
        for tag, groups, port in worlds:
            guard = transport_guard(v) if port else []
            present = x.match(x.field("th", port), x.span(0, 65535)) if port else None
            for k, g in enumerate(groups):
                m = self.group_map(f"{name}_{tag}{k}", v, g)
                # a key without the world's port does not read it: the port's presence
                # (a header cut short has none) is tested on its own
                has = [] if port is None or port in g.key else [present]
                body.append(low.NftRule(None, (*guard, *has, x.Node(
                    f"{key_expr(v, g.key, port is not None).text} vmap @{m.name}",
                    {"vmap": {"key": key_expr(v, g.key, port is not None).json,
                              "data": f"@{m.name}"}}))))
            if port and groups:
                body.append(low.NftRule(None, (*guard, present,
                                               x.Node("return", {"return": None}))))
        self.chains[name] = body
        return low.NftRule(None, (self.lowering.family_gate(v), jump(name)))

    def group_map(self, name: str, v: int, g: cl.Group) -> NftMap:
        elements = tuple((element(v, g.key, bx), self.outcome(out)) for bx, out in g.regions)
        types = tuple(TYPES[f] or ("ipv4_addr" if v == 4 else "ipv6_addr") for f in g.key)
        m = NftMap(name, types, elements)
        self.maps.append(m)
        return m

    def outcome(self, out: Outcome) -> str:
        """The chain of an outcome (made on first use)."""
        name = out.name if len(out.name) <= 48 else \
            "o" + hashlib.sha1(out.name.encode()).hexdigest()[:16]  # the same every run
        if name in self.chains:
            return name
        terms = [x.counter(f"rule_{c}") for c in out.counts]
        comment = None
        if out.decider is not None:
            verdict = "drop" if isinstance(out.decider.action, ir.Drop) else "accept"
            terms += [x.counter(), x.verdict(verdict)]
            comment = f"pfc rule {out.decider.index}"
        self.chains[name] = [low.NftRule(out.decider.index if out.decider else None,
                                         tuple(terms), comment)]
        return name


def jump(chain: str, goto: bool = False) -> x.Node:
    word = "goto" if goto else "jump"
    return x.Node(f"{word} {chain}", {word: {"target": chain}})


def transport_guard(v: int) -> list[x.Node]:
    both = x.anonymous_set([x.symbol("tcp"), x.symbol("udp")])
    l4 = x.match(x.meta("l4proto"), both)
    if v == 4:
        return [l4, x.match(x.masked(x.field("ip", "frag-off"), 0x1FFF), x.integer(0))]
    return [x.match(x.field("ip6", "nexthdr"), both), l4]


def key_expr(v: int, key: tuple[str, ...], transport: bool) -> x.Node:
    parts = []
    for f in key:
        if f in ("src", "dst"):
            parts.append(x.field("ip" if v == 4 else "ip6", "saddr" if f == "src" else "daddr"))
        elif f == "proto":
            parts.append(PROTO_KEY[(v, transport)])
        else:
            parts.append(x.field("th", f))
    return concat(parts)


def concat(parts: list[x.Node]) -> x.Node:
    if len(parts) == 1:
        return parts[0]
    return x.Node(" . ".join(p.text for p in parts), {"concat": [p.json for p in parts]})


def element(v: int, key: tuple[str, ...], bx: tuple[tuple[int, int], ...]) -> x.Node:
    return concat([addr_interval(v, lo, hi) if f in ("src", "dst") else x.span(lo, hi)
                   for f, (lo, hi) in zip(key, bx, strict=True)])


def v4_text(value: int) -> str:
    return socket.inet_ntoa(value.to_bytes(4, "big"))


def addr_interval(v: int, lo: int, hi: int) -> x.Node:
    """An address, a prefix when the interval is one, else ``A-B``."""
    size = hi - lo + 1
    bits = 32 if v == 4 else 128
    if v == 4:  # socket.inet_ntoa: 8k-rule policies print 100k+ of these
        a, plen = v4_text(lo), 33 - size.bit_length()
        if size & (size - 1) == 0 and lo % size == 0:
            return x.Node(a, a) if plen == 32 else \
                x.Node(f"{a}/{plen}", {"prefix": {"addr": a, "len": plen}})
        b = v4_text(hi)
        return x.Node(f"{a}-{b}", {"range": [a, b]})
    if size & (size - 1) == 0 and lo % size == 0:
        net = (ipaddress.IPv4Network if v == 4 else ipaddress.IPv6Network)(
            (lo, bits - size.bit_length() + 1))
        return x.address(net)
    cls = ipaddress.IPv4Address if v == 4 else ipaddress.IPv6Address
    a, b = x.address_text(cls(lo)), x.address_text(cls(hi))
    return x.Node(f"{a}-{b}", {"range": [a, b]})
