"""What ``pfc verify`` sends through a whole firewall (``verifier.firewall``): frames
biased to the file's constants and the host's addresses, received on each interface
in turn, some sent by the host itself, and conversations across the host (an opener,
the answer the walker's prediction implies, one more packet), so that conntrack, NAT
in both directions and ``ct state`` rules are exercised. Not sent: fragments
(conntrack reassembles them first), IPv4 options the kernel rewrites or refuses after
PREROUTING, and from the host, packets to destinations socket options decide.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.firewall.ruleset import Ruleset
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from pfc.oracle.packets import (
    ETH_HLEN,
    ip_field,
    l2_input_view,
    ones_sum,
    plain_options,
    read_frame,
)
from pfc.oracle.path.host import Host
from pfc.oracle.path.walk import Journey
from pfc.passes.inline_chains import inline_chains


@dataclass(frozen=True)
class Item:
    """A packet to send: received on ``port`` (an Ethernet frame) or sent by the host
    (``port`` None, an IP packet); or, with ``answer`` set, the answer to the previous
    item as the walker predicts it arrived (``answer`` holds the TCP flags to answer
    with, 0 for UDP/ICMP), from wherever it went."""

    port: str | None
    data: bytes
    answer: int | None = None


LOCAL_SHARE = 4  # one item in LOCAL_SHARE is sent by the host itself


def traffic(ruleset: Ruleset, host: Host, n: int, seed: int = 0) -> list[Item]:
    """``n`` packets biased to the ruleset's constants and the host's addresses, on
    each interface in turn; about one in ``LOCAL_SHARE`` sent by the host itself
    (well-formed: what a local socket sends)."""
    policy = _constants(ruleset, host)
    ports = [p for p in host.ports if p.name != "lo"]
    rng = random.Random(seed)
    received = {p.name: iter(gen.sample(policy, n, seed=seed + i, fragments=False,
                                        eth_dst=p.mac, eth_src=p.peer_mac))
                for i, p in enumerate(ports)}
    sent = iter(gen.sample(policy, n, seed=seed + 99, malformed=False, fragments=False))
    out = []
    for i in range(n):
        if not ports or rng.randrange(LOCAL_SHARE) == 0:
            packet = _local(next(sent), host)
            if packet is not None:
                out.append(Item(None, packet))
            continue
        port = ports[i % len(ports)]
        frame = next(received[port.name])
        if l2_input_view(frame) is not None and _plain(frame):  # a runt never arrives
            out.append(Item(port.name, frame))
    return out


def conversations(host: Host, ruleset: Ruleset, seed: int = 0) -> list[Item]:
    """Connections across the host, from every interface to every address the file or
    the host names: TCP (SYN, SYN+ACK back, ACK), UDP (query, answer, query) and ICMP
    echo (request, reply), IPv4 and IPv6: conntrack states, NAT both ways."""
    rng = random.Random(seed)
    ports = [p for p in host.ports if p.name != "lo"]
    targets = _targets(host, ruleset)
    out = []
    for port in ports:
        for dst in targets:
            src = _outside(host, port, dst.version, rng)
            if src is None:
                continue
            for proto, dport in ((6, rng.choice(_PORTS)), (17, rng.choice(_PORTS)), (1, 0)):
                opener = _packet(src, dst, proto, 30000 + rng.randrange(20000), dport, 0x02)
                frame = port.peer_mac and (port.mac + port.peer_mac + _ETHER[dst.version]
                                           + opener)
                out += [Item(port.name, frame), Item(None, b"", 0x12 if proto == 6 else 0),
                        Item(port.name, frame, 0x10 if proto == 6 else None)]
    return out


_PORTS = (22, 53, 80, 443, 8080, 25)
_ETHER = {4: b"\x08\x00", 6: b"\x86\xdd"}


def _targets(host: Host, ruleset: Ruleset) -> list:
    """The host's addresses, a neighbour in each subnet, the file's own addresses."""
    out = []
    for port in host.ports:
        if port.name == "lo":
            continue
        out += [a.ip for a in port.addresses]
        out += [a.network[2] for a in port.addresses if a.network.num_addresses > 4]
    for rule in ruleset.rules:
        for m in rule.matches:
            if isinstance(m, ir.AddrMatch) and m.field == "dst":
                out += [p.network_address for p in m.prefixes[:2]]
    out += [ipaddress.ip_address("198.51.100.77"), ipaddress.ip_address("2001:db8:77::7")]
    return list(dict.fromkeys(a for a in out if not a.is_multicast and not a.is_loopback))


def _outside(host: Host, port, version: int, rng) -> object | None:
    """A source beyond ``port``: a neighbour in its subnet, or (behind its gateway)
    a remote address."""
    nets = [a.network for a in port.addresses if a.version == version]
    if port.gateway is not None and port.gateway.version == version:
        return ipaddress.ip_address("192.0.2.77" if version == 4 else "2001:db8:99::9")
    if nets and nets[0].num_addresses > 8:
        return nets[0][rng.randrange(3, min(nets[0].num_addresses - 2, 200))]
    return None


def _packet(src, dst, proto: int, sport: int, dport: int, flags: int) -> bytes:
    s, d = src.packed, dst.packed
    if proto == 6:
        body = fb.tcp(s, d, sport, dport, flags, b"", seq=1000, ack=0)
    elif proto == 17:
        body = fb.udp(s, d, sport, dport, b"q")
    else:
        body = (fb.icmp(8, 0, sport.to_bytes(2, "big") + b"\0\1", b"ping") if src.version == 4
                else fb.icmp6(s, d, 128, 0, sport.to_bytes(2, "big") + b"\0\1", b"ping"))
    if src.version == 4:
        return fb.ipv4(s, d, proto if proto != 1 else 1, body, ident=7)
    return fb.ipv6(s, d, proto if proto != 1 else 58, body)


def answer(journey: Journey, flags: int, host: Host) -> Item | None:
    """The answer to the packet of ``journey`` where it arrived: its addresses and
    ports swapped (TCP with ``flags``, seq/ack following; ICMP echo as a reply), from
    the peer it was forwarded to, or from the host when it was delivered."""
    if journey.frame is None or journey.fate not in ("forwarded", "sent", "delivered"):
        return None
    view = read_frame(journey.frame, skip_tag=False)
    if view.version is None or view.l4 is None:
        return None
    src, dst = ip_field(view, "dst"), ip_field(view, "src")
    data = journey.frame
    proto = view.l4proto
    sport = int.from_bytes(data[view.l4 + 2:view.l4 + 4], "big")
    dport = int.from_bytes(data[view.l4:view.l4 + 2], "big")
    if proto == 6:
        packet = _reply_tcp(src, dst, sport, dport, flags, data[view.l4:])
    elif proto == 17:
        packet = _packet(src, dst, 17, sport, dport, 0)
    elif proto in (1, 58) and data[view.l4] in (8, 128):
        packet = _echo_reply(src, dst, proto, data[view.l4 + 4:view.l4 + 8])
    else:
        return None
    if journey.fate == "delivered":
        return Item(None, packet)
    port = host.port(journey.oif)
    return Item(port.name, port.mac + port.peer_mac + _ETHER[src.version] + packet)


def _reply_tcp(src, dst, sport: int, dport: int, flags: int, segment: bytes) -> bytes:
    seq = int.from_bytes(segment[4:8], "big")
    s, d = src.packed, dst.packed
    body = fb.tcp(s, d, sport, dport, flags, b"", seq=5000, ack=(seq + 1) & 0xFFFFFFFF)
    return fb.ipv4(s, d, 6, body, ident=9) if src.version == 4 else fb.ipv6(s, d, 6, body)


def _echo_reply(src, dst, proto: int, rest: bytes) -> bytes:
    s, d = src.packed, dst.packed
    if proto == 1:
        return fb.ipv4(s, d, 1, fb.icmp(0, 0, rest, b"ping"), ident=9)
    return fb.ipv6(s, d, 58, fb.icmp6(s, d, 129, 0, rest, b"ping"))


def _local(frame: bytes, host: Host) -> bytes | None:
    """The IP packet of a well-formed frame as a raw socket sends it: IPv4 with a
    non-zero ID (the kernel would choose one for 0: ``raw_send_hdrinc``); None for a
    destination a socket does not simply send to (multicast, broadcast — the limited
    one and each of the host's subnets' —, unspecified, link-local: interface and
    socket options decide those; a broadcast without SO_BROADCAST is EACCES), and for an
    IPv4 source 0.0.0.0 (``raw_send_hdrinc`` puts the route's source there)."""
    view = read_frame(frame, skip_tag=False)
    if view.version is None or view.l3 != ETH_HLEN:
        return None
    dst = ip_field(view, "dst")
    src = ip_field(view, "src")
    if src is None or (src.version == 4 and src.is_unspecified):
        return None
    if dst is None or dst.is_multicast or dst.is_unspecified or dst.is_link_local or \
            dst == ipaddress.IPv4Address("255.255.255.255") or dst.is_reserved or \
            host.is_broadcast(dst):
        return None
    packet = bytearray(frame[ETH_HLEN:])
    length = int.from_bytes(packet[2:4], "big") if view.version == 4 else \
        40 + int.from_bytes(packet[4:6], "big")
    del packet[length:]  # Ethernet padding is not the socket's to send
    if view.version == 4 and packet[4:6] == b"\0\0":
        packet[4:6] = b"\x01\x00"
        packet[10:12] = b"\0\0"
        ihl = (packet[0] & 0x0F) * 4
        packet[10:12] = (~ones_sum(bytes(packet[:ihl])) & 0xFFFF).to_bytes(2, "big")
    return bytes(packet)


def _plain(frame: bytes) -> bool:
    """No IPv4 options but NOPs, Router Alerts and trailing EOLs: ``ip_options_compile``
    drops bad options after PREROUTING and rewrites others (record route, timestamps),
    which the interpreter does not model; such packets are not sent."""
    view = read_frame(frame)
    if view.version != 4 or view.l3 is None or len(frame) < view.l3 + 20:
        return True
    ihl = (frame[view.l3] & 0x0F) * 4
    return plain_options(frame[view.l3 + 20:view.l3 + ihl])


def _constants(ruleset: Ruleset, host: Host) -> ir.Policy:
    """One policy holding every rule of the file (chains inlined) and a rule per host
    address, next hop and neighbour, for the frame generator's constants."""
    rules = [r for p in ruleset.lists for r in inline_chains(p).rules]
    for port in host.ports:
        addresses = [a.ip for a in port.addresses] + ([port.gateway] if port.gateway else [])
        addresses += [a.network[2] for a in port.addresses if a.network.num_addresses > 4]
        for address in addresses:
            net = ipaddress.ip_network(address)
            rules.append(ir.Rule(len(rules) + 10_000, ir.Pass(),
                                 ir.Family.of_versions({address.version}), None,
                                 (ir.AddrMatch("dst", (net,)),)))
    return ir.Policy(tuple(r for r in rules if r.family is not ir.Family.ANY or r.matches))


def follow_up(item: Item) -> Item:
    """The opener's next packet: TCP with ``item.answer``'s flags (the handshake's ACK),
    UDP and ICMP sent again."""
    view = read_frame(item.data, skip_tag=False)
    if view.l4proto != 6 or view.l4 is None:
        return Item(item.port, item.data)
    src, dst = ip_field(view, "src"), ip_field(view, "dst")
    data = item.data
    sport = int.from_bytes(data[view.l4:view.l4 + 2], "big")
    dport = int.from_bytes(data[view.l4 + 2:view.l4 + 4], "big")
    s, d = src.packed, dst.packed
    body = fb.tcp(s, d, sport, dport, item.answer, b"", seq=1001, ack=5001)
    packet = fb.ipv4(s, d, 6, body, ident=8) if src.version == 4 else fb.ipv6(s, d, 6, body)
    return Item(item.port, data[:ETH_HLEN] + packet)


