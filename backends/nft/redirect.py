"""``redirect`` as stateless nft payload statements, byte-identical to the interpreter.

``dnat`` is used at no hook: it needs conntrack, which rewrites by connection (only a
flow's first packet consults the rules, the others follow the conntrack entry),
reassembles IPv4 fragments before every hook but netdev ingress (nf_defrag_ipv4,
priority -400) and changes conntrack state; the policy's redirect rewrites each packet
on its own with incremental checksums. Payload statements do that at every hook.

What nft's payload writes do (``net/netfilter/nft_payload.c``), measured on Linux 6.18
with nft 1.0.6 (docs/nft.md), and how each is absorbed:

1. ``ip daddr set A`` updates the IPv4 header checksum, then (pseudo-header flag) the
   L4 checksum of the protocol nft parsed on entry to the base chain, when the header
   was accepted and the packet is a first fragment: TCP, UDP unless its checksum is 0
   or its 8-byte header is cut, UDP-Lite, and ICMPv6 even over IPv4. pfc updates TCP
   and UDP only: an IPv4 redirect rule that can match protocol 58 or 136 is refused
   (:func:`unsupported_reason`; ``!proto { 58, 136 }`` or ``tcp``/``udp`` lift it).
2. When that TCP checksum lies beyond the packet, the statement fails *after* storing
   the new IP header checksum and *before* writing the address; the rule stops
   (``NFT_BREAK``) and the chain goes on. The next rules, with the same matches and
   guards, write the address (and port) raw: together, pfc's rewrite.
3. ``tcp|udp dport set`` updates the L4 checksum unconditionally (a UDP checksum of 0
   becomes non-zero): with a UDP checksum of 0 or cut off, the port is written raw.
4. Every checksum nft updates that sums to zero is stored 0xffff (``CSUM_MANGLED_0``);
   pfc's incremental update stores 0xffff for UDP only, 0x0000 for the IPv4 header and
   TCP, and never stores 0xffff after an update. Every rule that updated an IPv4 header
   or TCP checksum jumps to chain ``fix4``/``fix6``, which writes a 0xffff there as 0
   (raw) and accepts.
5. A raw write (``@nh,128,32 set``, ``@th,16,16 set``) updates no checksum. IPv6 has no
   header checksum: every IPv6 packet whose L4 checksum pfc leaves alone gets a raw
   address write, which also keeps nft from following extension headers to an L4
   header pfc does not read.

Every payload write reads its bytes first (``skb_checksum`` of the old value): each
rule's guards make sure they are in the packet before it runs.
"""

from __future__ import annotations

import ipaddress

from pfc.backends.nft import expr as x
from pfc.backends.nft.expr import Node
from pfc.backends.nft.lower import transport_guards
from pfc.frontend import ir

UNTOUCHABLE_V4 = (ir.ICMP6, 136)  # nft updates these L4 checksums on an IPv4 write
FIX_CHAINS = ("fix4", "fix6")


def unsupported_reason(rule: ir.Rule) -> str | None:
    """Why nft cannot redirect with this rule's meaning (quirk 1), or None."""
    if not isinstance(rule.action, ir.Redirect) or rule.action.address.version != 4:
        return None
    if not any(p in allowed_protocols(rule) for p in UNTOUCHABLE_V4):
        return None
    return ("nft's IPv4 address rewrite also updates the checksum of UDP-Lite (136) and "
            "ICMPv6 (58) packets, which the policy leaves as it is")


def allowed_protocols(rule: ir.Rule) -> set[int]:
    """The IP protocol numbers a packet matching ``rule`` can carry."""
    allowed = set(range(256)) if rule.proto is None else {rule.proto}
    for m in rule.matches:
        if isinstance(m, ir.IntMatch) and m.field == "proto":
            inside = {p for lo, hi in m.ranges for p in range(lo, min(hi, 255) + 1)}
            allowed &= (set(range(256)) - inside) if m.negated else inside
    return allowed


# ------------------------------------------------------------------------ variants

def variants(rule: ir.Rule, version: int, base: list[Node]) -> list[tuple[list[Node], str]]:
    """(matches + writes, verdict) per nft rule: the verdict is ``accept`` or
    ``jump fix4|fix6`` (quirk 4). ``base`` holds the rule's matches and guards."""
    action = rule.action
    port = action.port if rule.proto in (ir.TCP, ir.UDP) else None
    base = base + [address_present(version)]
    if version == 6:
        return [(implied(terms), v) for terms, v in
                _ipv6(rule, base, action.address, port)]
    return [(implied(terms), v) for terms, v in _ipv4(rule, base, action.address, port)]


def implied(terms: list[Node]) -> list[Node]:
    """The terms without the presence tests (``udp dport 0-65535``, ``ip daddr
    0.0.0.0/0``) of a field an earlier match already loads whole (a value, a range, a
    set; not a prefix, which nft loads in part)."""
    out, loaded = [], set()
    for t in terms:
        key = _field(t)
        if key is not None and key in loaded and _presence(t):
            continue
        if key is not None and not _partial(t):
            loaded.add(key)
        out.append(t)
    return out


def _field(t: Node) -> tuple[str, str] | None:
    match = t.json.get("match") if isinstance(t.json, dict) else None
    payload = match["left"].get("payload") if match else None
    return (payload["protocol"], payload["field"]) if payload and "field" in payload else None


def _presence(t: Node) -> bool:
    return t.text.endswith((" 0-65535", " 0.0.0.0/0", " ::/0"))


def _partial(t: Node) -> bool:
    right = t.text.split()[-1]
    return "/" in right and not right.endswith("/0")


def address_present(version: int) -> Node:
    proto, everything = ("ip", "0.0.0.0/0") if version == 4 else ("ip6", "::/0")
    return x.match(x.field(proto, "daddr"), x.address(ipaddress.ip_network(everything)))


def _sure(rule: ir.Rule) -> tuple[bool, bool]:
    """(the rule's matches already need a readable transport header of its protocol,
    they also need the destination port's bytes): later variants are then never
    reached and are left out."""
    fields = {m.field for m in rule.transport_matches}
    return bool(fields), bool(fields & {"dport", "payload", "flags"})


def _ipv4(rule: ir.Rule, base: list[Node], addr, port: int | None) -> list:
    out = []
    l4_sure, port_sure = _sure(rule)
    if ir.TCP in allowed_protocols(rule):
        l4 = transport(4, ir.TCP)
        tracked = [set_daddr(4, addr)] + ([tracked_port("tcp", port)] if port else [])
        out.append((base + l4 + tracked, "fix4"))
        # reached only after the tracked write broke off (quirk 2)
        if port is not None:
            out.append((base + l4 + [present("tcp", "dport"), raw_daddr(4, addr),
                                     raw_port(port)], "fix4"))
        if port is None or not port_sure:
            out.append((base + l4 + [raw_daddr(4, addr)], "fix4"))
        if l4_sure and rule.proto == ir.TCP:
            return out
    if port is not None and rule.proto == ir.UDP:
        l4 = transport(4, ir.UDP)
        out.append((base + l4 + [udp_checksum_set(), set_daddr(4, addr),
                                 tracked_port("udp", port)], "fix4"))
        out.append((base + l4 + [present("udp", "dport"), set_daddr(4, addr),
                                 raw_port(port)], "fix4"))  # quirk 3
        if l4_sure and port_sure:
            return out
    out.append((base + [set_daddr(4, addr)], "fix4"))
    return out


def _ipv6(rule: ir.Rule, base: list[Node], addr, port: int | None) -> list:
    out = []
    l4_sure, port_sure = _sure(rule)
    if port is not None:
        name = "tcp" if rule.proto == ir.TCP else "udp"
        l4 = transport(6, rule.proto)
        out.append((base + l4 + [checksum_there(rule.proto), set_daddr(6, addr),
                                 tracked_port(name, port)], _fix6(rule.proto)))
        out.append((base + l4 + [present(name, "dport"), raw_daddr(6, addr),
                                 raw_port(port)], "accept"))
        if l4_sure and port_sure:
            return out
    for proto in (ir.TCP, ir.UDP):
        if proto in allowed_protocols(rule) and not (port is not None and proto == rule.proto):
            out.append((base + transport(6, proto) + [checksum_there(proto),
                                                      set_daddr(6, addr)], _fix6(proto)))
    out.append((base + [raw_daddr(6, addr)], "accept"))
    return out


def _fix6(proto: int) -> str:
    return "fix6" if proto == ir.TCP else "accept"


# ------------------------------------------------------------------------ pieces

def transport(version: int, proto: int) -> list[Node]:
    """The transport is readable with protocol ``proto`` (``nft_lower``'s guards)."""
    return transport_guards(version, proto)


def present(proto: str, field: str) -> Node:
    """The 16-bit field's bytes are in the packet (any value)."""
    return x.match(x.field(proto, field), x.span(0, 0xFFFF))


def udp_checksum_set() -> Node:
    """The UDP checksum is there and not 0 ("none")."""
    return x.match(x.field("udp", "checksum"), x.integer(0), negated=True)


def checksum_there(proto: int) -> Node:
    return udp_checksum_set() if proto == ir.UDP else present("tcp", "checksum")


def set_daddr(version: int, address) -> Node:
    return x.mangle(x.field("ip" if version == 4 else "ip6", "daddr"),
                    x.address_value(address))


def raw_daddr(version: int, address) -> Node:
    key = x.raw("nh", 128, 32) if version == 4 else x.raw("nh", 192, 128)
    return x.mangle(key, x.wide(address.packed))


def tracked_port(name: str, port: int) -> Node:
    return x.mangle(x.field(name, "dport"), x.integer(port))


def raw_port(port: int) -> Node:
    return x.mangle(x.raw("th", 16, 16), x.integer(port))


def fix_chain(version: int) -> list[list[Node]]:
    """The rules of ``fix4``/``fix6``: a checksum nft stored as 0xffff after an update
    is pfc's 0 (quirk 4); the TCP one only where nft updated it (header accepted,
    first fragment, fixed Next Header TCP). Then accept."""
    zero = x.hexvalue(0)
    tcp = transport(version, ir.TCP) + [
        x.match(x.field("tcp", "checksum"), x.hexvalue(0xFFFF)),
        x.mangle(x.raw("th", 128, 16), zero)]
    rules = [tcp]
    if version == 4:
        rules.insert(0, [x.match(x.field("ip", "checksum"), x.hexvalue(0xFFFF)),
                         x.mangle(x.raw("nh", 80, 16), zero)])
    return rules
