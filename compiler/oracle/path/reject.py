"""What ``reject`` sends: the reply the kernel builds for a rejected packet, as bytes
(semantics.md "What reject sends").

Mirrors Linux 6.x: ``nf_send_reset`` / ``nf_send_reset6`` (net/ipv4/netfilter/
nf_reject_ipv4.c, net/ipv6/netfilter/nf_reject_ipv6.c) for ``tcp-reset``, and
``icmp_send`` / ``icmpv6_send`` (net/ipv4/icmp.c, net/ipv6/icmp.c) for the ICMP
unreachables. Input and output are IP packets (from the IP header, trimmed to their
length). ``None`` means the kernel sends nothing for this packet.

At ``ingress`` (``ingress_reply``) the reply is built the way nft's netdev ``reject``
builds it (``nf_reject_skb_v4_unreach``, ``nf_reject_skb_v4_tcp_reset`` and their IPv6
twins), which XDP and tc replies copy: no routing, so the source is the packet's
destination; IPv4 ICMP with TOS 0, ID 0 and DF; the quote is the first 536 (IPv6:
1220) bytes after the Ethernet header, padding included; only a destination
unreachable goes unanswered; and the RST's acknowledgement counts the bytes after the
TCP header up to the end of the frame, padding included (the skb is not trimmed there).

Not modelled (and never sent by ``pfc verify``): IP options echoed into an ICMP error,
the ICMP rate limits (``pfc verify`` sets ``icmp_ratelimit`` to 0), ICMP errors about
packets of a NATed connection (the kernel translates the quoted packet back).
"""

from __future__ import annotations

import ipaddress

from pfc.frontend.ir import REJECTS
from pfc.oracle.packets import ICMP, ICMP6, TCP, UDP, ones_sum

DEFAULT_TTL = 64  # ip_default_ttl / the route's hop limit (net.ipv6.conf.*.hop_limit)
ICMP_ROOM = 576 - 20 - 8  # icmp_send: the reply stays within 576 bytes
ICMP6_ROOM = 1280 - 40 - 8  # icmpv6_send: within the IPv6 minimum MTU
_ICMP_ERRORS = {3, 4, 5, 11, 12}  # icmp_pointers[].error
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def reply(packet: bytes, kind: str, source: Address | None = None) -> bytes | None:
    """The reply to IP ``packet`` for ``reject with kind``, sent from ``source`` (ICMP
    errors: the address chosen by the caller, see ``icmp_source``; a RST always comes
    from the packet's destination). None where the kernel sends none."""
    version = packet[0] >> 4 if packet else 0
    if version == 4 and len(packet) >= 20:
        return _reset4(packet) if kind == "tcp-reset" else _unreach4(packet, kind, source)
    if version == 6 and len(packet) >= 40:
        return _reset6(packet) if kind == "tcp-reset" else _unreach6(packet, kind, source)
    return None


def ingress_reply(received: bytes, kind: str) -> bytes | None:
    """The reply at ``ingress`` to ``received`` (the bytes after the Ethernet header as
    the device got them, padding included): nft netdev's ``reject`` (module doc)."""
    version = received[0] >> 4 if received else 0
    if version == 4 and _valid4(received):
        total = int.from_bytes(received[2:4], "big")
        if kind == "tcp-reset":
            ihl = (received[0] & 0x0F) * 4
            if not _tcp_answerable(received[:total], 4, ihl, routed=False):
                return None
            src, dst = received[12:16], received[16:20]
            tcp = _rst_header(received[ihl:], len(received) - ihl, dst, src)
            return _ip4_header(20 + len(tcp), TCP, dst, src, tos=0, ident=0, df=True) + tcp
        return _netdev_unreach4(received, total, kind)
    if version == 6 and len(received) >= 40 and \
            40 + int.from_bytes(received[4:6], "big") <= len(received):
        packet = received[:40 + int.from_bytes(received[4:6], "big")]
        if kind == "tcp-reset":
            if packet[6] != TCP or not _tcp_answerable(packet, 6, 40, routed=False):
                return None
            tcp = _rst_header(received[40:], len(received) - 40, packet[24:40], packet[8:24])
            return _ip6_header(len(tcp), TCP, packet[24:40], packet[8:24]) + tcp
        return _netdev_unreach6(received, packet, kind)
    return None


def _valid4(packet: bytes) -> bool:
    """nf_reject_iphdr_validate: version 4, IHL ≥ 5, IHL*4 ≤ total length ≤ bytes."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[0] & 0x0F < 5:
        return False
    total = int.from_bytes(packet[2:4], "big")
    return (packet[0] & 0x0F) * 4 <= total <= len(packet)


def _netdev_unreach4(received: bytes, total: int, kind: str) -> bytes | None:
    ihl = (received[0] & 0x0F) * 4
    packet = received[:total]
    if int.from_bytes(packet[6:8], "big") & 0x1FFF:
        return None
    if packet[9] == ICMP and len(packet) > ihl and packet[ihl] == 3:
        return None
    if not _verifies(packet, 4):
        return None
    body = bytes((3, REJECTS[kind][0], 0, 0, 0, 0, 0, 0)) + received[:536]
    body = body[:2] + _csum(body) + body[4:]
    return _ip4_header(20 + len(body), ICMP, packet[16:20], packet[12:16], tos=0, ident=0,
                       df=True) + body


def _netdev_unreach6(received: bytes, packet: bytes, kind: str) -> bytes | None:
    at, proto = _transport6(packet)
    if proto == ICMP6 and at is not None and at < len(packet) and packet[at] == 1:
        return None
    if not _verifies(packet, 6):
        return None
    src, dst = packet[24:40], packet[8:24]
    body = bytes((1, REJECTS[kind][1], 0, 0, 0, 0, 0, 0)) + received[:1220]
    pseudo = src + dst + len(body).to_bytes(4, "big") + bytes((0, 0, 0, 58))
    body = body[:2] + _csum(pseudo + body) + body[4:]
    return _ip6_header(len(body), ICMP6, src, dst) + body


# ------------------------------------------------------------------------------ IPv4

def _reset4(packet: bytes) -> bytes | None:
    ihl = (packet[0] & 0x0F) * 4
    if not _tcp_answerable(packet, 4, ihl):
        return None
    src, dst = packet[12:16], packet[16:20]
    tcp = _rst_header(packet[ihl:], len(packet) - ihl, dst, src)
    header = _ip4_header(len(tcp) + 20, TCP, dst, src, tos=0, ident=0, df=True)
    return header + tcp


def _unreach4(packet: bytes, kind: str, source: Address | None) -> bytes | None:
    ihl = (packet[0] & 0x0F) * 4
    if not _icmp_answerable4(packet, ihl) or source is None:
        return None
    code = REJECTS[kind][0]
    quoted = packet[:ICMP_ROOM]
    body = bytes((3, code, 0, 0, 0, 0, 0, 0)) + quoted
    body = body[:2] + _csum(body) + body[4:]
    tos = (packet[1] & 0x1E) | 0xC0  # RT_TOS(tos) | IPTOS_PREC_INTERNETCONTROL
    return _ip4_header(20 + len(body), ICMP, source.packed, packet[12:16], tos=tos,
                       ident=0, df=False) + body


def _ip4_header(total: int, proto: int, src: bytes, dst: bytes, tos: int, ident: int,
                df: bool) -> bytes:
    head = bytearray((0x45, tos)) + total.to_bytes(2, "big") + ident.to_bytes(2, "big")
    head += (0x4000 if df else 0).to_bytes(2, "big") + bytes((DEFAULT_TTL, proto, 0, 0))
    head += src + dst
    head[10:12] = _csum(bytes(head))
    return bytes(head)


def _icmp_answerable4(packet: bytes, ihl: int) -> bool:
    """icmp_send's refusals that depend on the packet: a non-first fragment, a source
    that is not unicast, an ICMP error (or unreadable ICMP), a bad TCP/UDP checksum
    (nf_send_unreach verifies it first)."""
    if int.from_bytes(packet[6:8], "big") & 0x1FFF:
        return False
    src = ipaddress.IPv4Address(packet[12:16])
    if src.is_multicast or src == ipaddress.IPv4Address(0) or src.is_reserved:
        return False
    if packet[9] == ICMP and (len(packet) <= ihl or packet[ihl] in _ICMP_ERRORS):
        return False
    return _verifies(packet, 4)


# ------------------------------------------------------------------------------ IPv6

def _reset6(packet: bytes) -> bytes | None:
    if packet[6] != TCP or not _tcp_answerable(packet, 6, 40):
        return None
    src, dst = packet[8:24], packet[24:40]
    tcp = _rst_header(packet[40:], len(packet) - 40, dst, src)
    return _ip6_header(len(tcp), TCP, dst, src) + tcp


def _unreach6(packet: bytes, kind: str, source: Address | None) -> bytes | None:
    if not _icmp_answerable6(packet) or source is None:
        return None
    code = REJECTS[kind][1]
    body = bytes((1, code, 0, 0, 0, 0, 0, 0)) + packet[:ICMP6_ROOM]
    pseudo = source.packed + packet[8:24] + len(body).to_bytes(4, "big") + bytes((0, 0, 0, 58))
    body = body[:2] + _csum(pseudo + body) + body[4:]
    return _ip6_header(len(body), ICMP6, source.packed, packet[8:24]) + body


def _ip6_header(length: int, proto: int, src: bytes, dst: bytes) -> bytes:
    return (b"\x60\x00\x00\x00" + length.to_bytes(2, "big") + bytes((proto, DEFAULT_TTL))
            + src + dst)


def _icmp_answerable6(packet: bytes) -> bool:
    """icmpv6_send's refusals: a multicast or unspecified source, a multicast
    destination, an ICMPv6 error; and reject's checksum check (``_verifies``)."""
    src = ipaddress.IPv6Address(packet[8:24])
    dst = ipaddress.IPv6Address(packet[24:40])
    if src.is_multicast or src.is_unspecified or dst.is_multicast:
        return False
    at, proto = _transport6(packet)
    if proto == ICMP6 and at is not None and (at >= len(packet) or packet[at] < 128):
        return False
    return _verifies(packet, 6)


# ------------------------------------------------------------------------- TCP, sums

def _tcp_answerable(packet: bytes, version: int, at: int, routed: bool = True) -> bool:
    """nf_reject_ip*_tcphdr_get: TCP, the first fragment, a whole header, not a RST, a
    good checksum; and where a route was looked up (``routed``: nf_send_reset, not the
    netdev path) not to a broadcast or multicast destination."""
    if version == 4:
        if packet[9] != TCP or int.from_bytes(packet[6:8], "big") & 0x1FFF:
            return False
        dst = ipaddress.IPv4Address(packet[16:20])
        if routed and (dst.is_multicast or dst == ipaddress.IPv4Address("255.255.255.255")):
            return False
    elif routed and ipaddress.IPv6Address(packet[24:40]).is_multicast:
        return False
    if len(packet) < at + 20 or packet[at + 13] & 0x04:
        return False
    return _l4_checksum_ok(packet, version, at)


def _rst_header(segment: bytes, seglen: int, src: bytes, dst: bytes) -> bytes:
    """nf_reject_ip_tcphdr_put: ports swapped; seq = their ack if ACK was set, else
    seq 0 and ack = their seq + SYN + FIN + payload; RST; window 0; no options."""
    flags, doff = segment[13], (segment[12] >> 4) * 4
    if flags & 0x10:
        seq, ack, out_flags = segment[8:12], bytes(4), 0x04
    else:
        payload = max(0, seglen - doff)
        number = (int.from_bytes(segment[4:8], "big") + bool(flags & 0x02)
                  + bool(flags & 0x01) + payload) & 0xFFFFFFFF
        seq, ack, out_flags = bytes(4), number.to_bytes(4, "big"), 0x14
    head = segment[2:4] + segment[0:2] + seq + ack + bytes((0x50, out_flags)) + bytes(6)
    pseudo = src + dst + (b"\0\0\0\x14" if len(src) == 16 else b"\0\x06\0\x14")
    if len(src) == 16:
        pseudo += b"\0\0\0\x06"
    return head[:16] + _csum(pseudo + head) + head[18:]


_UNSUMMED = frozenset((47, 50, 51, 132, 136, 33))  # GRE, ESP, AH, SCTP, UDP-Lite, DCCP
_EXTENSIONS = (0, 43, 60, 51, 44)  # ipv6_skip_exthdr's: hop-by-hop, routing, dest, AH, frag


def _verifies(packet: bytes, version: int) -> bool:
    """The checksum check ``reject`` makes before it answers with an ICMP error
    (``nf_reject_verify_csum`` then ``nf_ip_checksum``/``nf_ip6_checksum``): none for
    protocols without a 16-bit ones'-complement sum over their payload (GRE, ESP, AH,
    SCTP, UDP-Lite, DCCP) and for an IPv4 UDP checksum of 0; TCP and UDP over their
    pseudo-header; any other IPv4 payload must sum to 0xffff on its own (ICMP, IGMP
    do); on IPv6 every other payload over the pseudo-header, from the first byte after
    the extension headers, which must exist (an empty payload or a later fragment is
    never answered)."""
    if version == 4:
        at, proto = (packet[0] & 0x0F) * 4, packet[9]
        if proto in _UNSUMMED or (proto == UDP and packet[at + 6:at + 8] == b"\0\0"):
            return True
        if proto not in (TCP, UDP):
            return ones_sum(packet[at:]) == 0xFFFF
        return _pseudo_sum_ok(packet, 4, at, proto)
    at, proto = _transport6(packet)
    if at is None or at >= len(packet):
        return False
    return proto in _UNSUMMED or _pseudo_sum_ok(packet, 6, at, proto)


def _transport6(packet: bytes) -> tuple[int | None, int]:
    """Where the IPv6 payload's upper layer starts and its protocol
    (``ipv6_skip_exthdr``): None past the end, at No Next Header or in a later
    fragment."""
    kind, at = packet[6], 40
    while kind in _EXTENSIONS:
        if at + 8 > len(packet):
            return None, kind
        if kind == 44:
            if int.from_bytes(packet[at + 2:at + 4], "big") & 0xFFF8:
                return None, kind
            kind, at = packet[at], at + 8
            continue
        step = (packet[at + 1] + 2) * 4 if kind == 51 else (packet[at + 1] + 1) * 8
        kind, at = packet[at], at + step
    return (None, kind) if kind == 59 else (at, kind)


def _pseudo_sum_ok(packet: bytes, version: int, at: int, proto: int) -> bool:
    segment = packet[at:]
    addrs = packet[12:20] if version == 4 else packet[8:40]
    pseudo = addrs + (len(segment).to_bytes(4, "big") + bytes((0, 0, 0, proto)) if version == 6
                      else bytes((0, proto)) + len(segment).to_bytes(2, "big"))
    return ones_sum(pseudo + segment) == 0xFFFF


def _l4_checksum_ok(packet: bytes, version: int, at: int) -> bool:
    segment = packet[at:]
    proto = packet[9] if version == 4 else packet[6]
    if proto == UDP and version == 4 and segment[6:8] == b"\0\0":
        return True
    if len(segment) < (20 if proto == TCP else 8):
        return False
    addrs = packet[12:20] if version == 4 else packet[8:40]
    pseudo = addrs + (len(segment).to_bytes(4, "big") + bytes((0, 0, 0, proto)) if version == 6
                      else bytes((0, proto)) + len(segment).to_bytes(2, "big"))
    return ones_sum(pseudo + segment) == 0xFFFF


def _csum(data: bytes) -> bytes:
    return (~ones_sum(data) & 0xFFFF).to_bytes(2, "big")
