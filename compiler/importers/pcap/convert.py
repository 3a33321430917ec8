"""A pcap-filter expression in pfc's words: the packets tcpdump would capture pass, the
rest drop (docs/import.md "pcap-filter").

Each primitive is what libpcap's code generator makes of it on Ethernet
(``gencode.c``), as a disjunction of conjunctions of pfc matches; ``and``, ``or`` and
``not`` combine them (``not`` by De Morgan, each literal's complement exact where the
field it reads is always there once its EtherType is); each conjunction is one ``pass``
rule. A part of a primitive pfc cannot say is an ``X`` literal with the reason: if one
survives into a conjunction that can hold, the expression is refused with it. What
libpcap reads that pfc does not:

- ``host``/``net`` on IPv4 addresses also match ARP and RARP packets (write ``ip
  host``);
- ``port`` without ``tcp``/``udp`` also matches SCTP;
- ``tcp``, ``udp``, ``sctp``, ``icmp6``, ``ip6 proto N`` look behind one IPv6
  fragment header (pfc reads the fixed header's next header): IPv4 they are exact
  (``ip and tcp``);
- byte tests, lengths of the frame, VLAN and MPLS (they move what follows), gateways,
  broadcasts that need the netmask.
"""

from __future__ import annotations

import ipaddress

from pfc.frontend.matches import SERVICES
from pfc.importers.model import Match, Refuse, Rule
from pfc.importers.pcap.parse import Bin, Not, Prim

Conj = tuple[Match, ...]
MAX_PARTS = 512
ETHER = {"ip": "ip", "ip6": "ip6", "arp": "arp", "rarp": "0x8035"}
PROTO = {"tcp": 6, "udp": 17, "icmp": 1, "icmp6": 58, "igmp": 2, "sctp": 132, "pim": 103,
         "vrrp": 112, "carp": 112, "ah": 51, "esp": 50, "igrp": 9}
IPV4_ONLY = frozenset(("icmp", "igmp", "igrp", "pim", "vrrp", "carp"))  # gen_proto(Q_IP)
ARP = ("libpcap's `host`/`net` of an IPv4 address also matches ARP and RARP packets, "
       "whose addresses pfc does not read (write `ip host`, `ip net`, or say `ip` or "
       "`tcp` beside it)")
FRAG = ("libpcap's `{w}` also reads behind one IPv6 fragment header, pfc reads the "
        "fixed header's next header (on IPv4 it is exact: `ip and {w}`)")


def X(reason: str) -> Match:  # noqa: N802  (a literal pfc cannot say)
    return Match("x", (reason,))


def ET(name: str, negated: bool = False) -> Match:  # noqa: N802
    return Match("ether-type", (name,), negated)


def dnf(node) -> list[Conj]:
    """The expression as conjunctions (satisfiable ones only)."""
    if isinstance(node, Bin):
        left, right = dnf(node.left), dnf(node.right)
        if node.op == "or":
            return _cap(left + right, node)
        return _cap([c for a in left for b in right if (c := _join(a, b)) is not None],
                    node)
    if isinstance(node, Not):
        out: list[Conj] = [()]
        for conj in dnf(node.expr):
            out = _cap([c for a in out for b in _complement(conj)
                        if (c := _join(a, b)) is not None], node)
        return out
    try:
        return [c for c in (_join((), c) for c in primitive(node)) if c is not None]
    except Refuse as refused:
        raise Refuse(refused.reason, refused.at or node.span) from None


def _cap(parts: list[Conj], node) -> list[Conj]:
    """``parts`` without repeats (as sets of literals), at most ``MAX_PARTS``."""
    seen: set[frozenset] = set()
    parts = [c for c in parts if not (frozenset(c) in seen or seen.add(frozenset(c)))]
    if len(parts) > MAX_PARTS:
        raise Refuse(f"more than {MAX_PARTS} rules once written as pfc rules (`not` and "
                     "`and` over `or`s multiply them)", node.span)
    return parts


def _join(a: Conj, b: Conj) -> Conj | None:
    """Both conjunctions; None when they cannot both hold (EtherTypes disagree)."""
    out = list(a)
    for m in b:
        if m not in out:
            out.append(m)
    pos = {m.values[0] for m in out if m.field == "ether-type" and not m.negated}
    neg = {m.values[0] for m in out if m.field == "ether-type" and m.negated}
    if len(pos) > 1 or pos & neg:
        return None
    if pos:
        out = [m for m in out if not (m.field == "ether-type" and m.negated)]
    for f in ("src", "dst", "proto", "sport", "dport", "l4"):
        values = {m.values for m in out if m.field == f and not m.negated}
        if len(values) > 1 and f in ("proto", "l4"):
            return None
    return tuple(out)


def _complement(conj: Conj) -> list[Conj]:
    """``not conj`` as conjunctions (De Morgan; each literal's exact complement)."""
    out: list[Conj] = []
    family = next((m.values[0] for m in conj if m.field == "ether-type" and not m.negated),
                  None)
    # not (E and L) = not E, or E and not L: a literal's complement keeps the EtherType
    # it was read under, so that an `and` with another EtherType drops it.
    under = (ET(family),) if family else ()
    for m in conj:
        if m.field in ("ether-type", "ether-src", "ether-dst"):
            out.append((m.negate(),))
        elif m.field in ("src", "dst", "proto") and family in ("ip", "ip6"):
            out.append((ET(family, True),))
            out.append((ET(family), m.negate()))
        elif m.field == "x":
            out.append(under + (m,))
        else:
            out.append(under + (X("`not` of a port: on a later fragment libpcap's test is "
                                  "false and its negation true, which pfc's `!dport` is "
                                  "not"),))
    return out


# ------------------------------------------------------------------ primitives

def primitive(p: Prim) -> list[Conj]:
    proto, dir_, type_, ident = p.proto, p.dir, p.type, p.id
    if ident is None:
        return _keyword(p)
    address = _address(ident, net=type_ == "net")
    if type_ in (None, "host", "net") and proto in (None, "ip", "ip6", "arp", "rarp") \
            and address is not None:
        return _hosts(p, address)
    if type_ in ("port", "portrange") or (type_ is None and proto in ("tcp", "udp", "sctp")
                                          and dir_ is not None):
        return _ports(p)
    if type_ == "proto" or (proto == "ether" and type_ is None and dir_ is None):
        return _proto(p)
    if proto == "ether" or type_ in (None, "host") and _mac(ident):
        return _ether_host(p)
    if type_ == "gateway":
        return [(X("`gateway` needs the host's ARP table"),)]
    return [(X(f"`{p.words}`: a host name, or a primitive pfc does not read (pfc takes "
               "addresses)"),)]


def _keyword(p: Prim) -> list[Conj]:
    proto, type_ = p.proto, p.type
    if type_ == "multicast" and proto in ("ip", "ip6"):
        net = "224.0.0.0/4" if proto == "ip" else "ff00::/8"
        return [(ET(proto), Match("dst", (net,)))]
    if type_ == "broadcast" and proto == "ether":
        return [(Match("ether-dst", ("ff:ff:ff:ff:ff:ff",)),)]
    if type_ in ("broadcast", "multicast"):
        return [(X(f"`{p.words}`: needs the netmask or a bit of the address"),)]
    if proto in ETHER:
        return [(ET(ETHER[proto]),)]
    if proto in PROTO:
        number = PROTO[proto]
        v4 = (ET("ip"), Match("proto", (str(number),)))
        return [v4] if proto in IPV4_ONLY else [v4, (ET("ip6"), X(FRAG.format(w=proto)))]
    return [(X(f"`{p.words}`: frame lengths, VLAN, MPLS and the like: pfc does not read "
               "them (or they move what follows)"),)]


def _address(text: str, net: bool = False):
    """An address or network as libpcap reads it: IPv6, or dotted IPv4 with bytes
    left out at the end (``10/8``, ``net 192.168`` is 192.168.0.0/16)."""
    addr, slash, length = text.partition("/")
    if ":" in addr:
        try:
            return ipaddress.ip_network(text, strict=False)
        except ValueError:
            return None
    parts = addr.split(".")
    if not all(x.isascii() and x.isdigit() and int(x) < 256 for x in parts) \
            or not 1 <= len(parts) <= 4:
        return None
    if len(parts) < 4 and not (net or slash):
        return None
    bits = int(length) if slash else 8 * len(parts) if net or len(parts) < 4 else 32
    full = ".".join(parts + ["0"] * (4 - len(parts)))
    try:
        return ipaddress.ip_network(f"{full}/{bits}", strict=False)
    except ValueError:
        return None


def _mac(text: str) -> bool:
    parts = text.split(":")
    return len(parts) == 6 and all(len(x) <= 2 and x and all(c in "0123456789abcdefABCDEF"
                                                             for c in x) for x in parts)


def _hosts(p: Prim, net) -> list[Conj]:
    family = "ip" if net.version == 4 else "ip6"
    arp = [(ET(ETHER[kind]), X(ARP)) for kind in ("arp", "rarp")
           if p.proto == kind or (p.proto is None and net.version == 4)]
    if p.proto is not None and p.proto != family:
        return arp
    text = str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)
    return _directions(p.dir, family, "src", "dst", text) + arp


def _directions(dir_: str | None, family: str, src: str, dst: str, value: str) -> list[Conj]:
    base = (ET(family),) if family else ()
    if dir_ == "src":
        return [base + (Match(src, (value,)),)]
    if dir_ == "dst":
        return [base + (Match(dst, (value,)),)]
    if dir_ == "src and dst":
        return [base + (Match(src, (value,)), Match(dst, (value,)))]
    if dir_ in (None, "src or dst"):
        return [base + (Match(src, (value,)),), base + (Match(dst, (value,)),)]
    raise Refuse(f"direction `{dir_}`")


def _ports(p: Prim) -> list[Conj]:
    if p.proto not in ("tcp", "udp"):
        return [(X("libpcap's `port` without `tcp` or `udp` also matches SCTP, whose ports "
                   "pfc does not read"),)]
    value = _port_value(p)
    out = []
    for family in ("ip", "ip6"):
        for conj in _directions(p.dir, family, "sport", "dport", value):
            out.append(conj + (Match("l4", (p.proto,)),))
    return out


def _port_value(p: Prim) -> str:
    text = p.id
    if "-" in text and p.type in ("port", "portrange"):  # `portrange 25`: 25 alone
        lo, _, hi = text.partition("-")
        a, b = _port(lo, p), _port(hi, p)
        if a > b:
            a, b = b, a  # libpcap orders the ends itself
        return str(a) if a == b else f"{a}-{b}"
    return str(_port(text, p))


def _port(text: str, p: Prim) -> int:
    number = _number(text)
    if number is not None and number < 65536:
        return number
    if text.lower() in SERVICES:
        return SERVICES[text.lower()]
    raise Refuse(f"port `{text}`: not a number or a service name pfc knows", p.span)


def _proto(p: Prim) -> list[Conj]:
    text = p.id
    if p.proto in ("ether", "link"):  # `link proto` is `ether proto` on Ethernet
        names = {"ip": "ip", "ip6": "ip6", "arp": "arp", "rarp": "0x8035"}
        if text in names:
            return [(ET(names[text]),)]
        try:
            return [(ET(hex(int(text, 0))),)]
        except ValueError:
            raise Refuse(f"EtherType `{text}`: a name pfc does not map (libpcap reads "
                         "AppleTalk, IPX, ISO, STP and NetBEUI in 802.2 LLC and SNAP frames "
                         "too)", p.span) from None
    if p.proto not in (None, "ip", "ip6"):
        raise Refuse(f"`{p.proto} proto`: pfc reads the protocols of IPv4 and IPv6 only",
                     p.span)
    number = _number(text) if _number(text) is not None else PROTO.get(text)
    if number is None or number > 255:
        raise Refuse(f"protocol `{text}`", p.span)
    v4 = (ET("ip"), Match("proto", (str(number),)))
    if p.proto == "ip":
        return [v4]
    v6 = (ET("ip6"), X(FRAG.format(w=f"ip6 proto {text}")))
    return [v6] if p.proto == "ip6" else [v4, v6]


def _number(text: str) -> int | None:
    """A number as libpcap's scanner reads it: decimal, ``0x`` hex, ``0`` octal."""
    if not text.isascii():
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else \
            int(text, 8) if text.startswith("0") and len(text) > 1 else int(text)
    except ValueError:
        return None


def _ether_host(p: Prim) -> list[Conj]:
    if not _mac(p.id):
        raise Refuse(f"`{p.id}` is not a MAC address", p.span)
    mac = ":".join(x.zfill(2) for x in p.id.lower().split(":"))
    return _directions(p.dir, "", "ether-src", "ether-dst", mac)


# ------------------------------------------------------------------ rules

def rule_of(conj: Conj, origin) -> Rule:
    """One ``pass`` rule; ``Refuse`` with the reason of an ``X`` literal in it."""
    x = next((m for m in conj if m.field == "x"), None)
    if x is not None:
        raise Refuse(x.values[0])
    et = next((m.values[0] for m in conj if m.field == "ether-type" and not m.negated), None)
    l4 = next((m.values[0] for m in conj if m.field == "l4"), None)
    proto = next((m for m in conj if m.field == "proto" and not m.negated), None)
    matches = [m for m in conj if m.field not in ("l4", "ether-type")]
    family = {"ip": 4, "ip6": 6}.get(et)
    protocol = None
    if l4:
        protocol = l4
    elif proto is not None and et == "ip" and proto.values[0] == "1":
        protocol, matches = "icmp", [m for m in matches if m is not proto]
    elif et in ("ip", "ip6"):
        protocol = et
    elif et is not None:
        matches.insert(0, ET(et))
    matches += [m for m in conj if m.field == "ether-type" and m.negated]
    return Rule("pass", origin, protocol, tuple(matches), family=family)
