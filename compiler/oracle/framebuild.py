"""Raw frame building with ``struct``: every header field under the caller's control.

Plain functions, no randomness: ``pfc.oracle.gen`` decides what to build, these functions
write the bytes. Each writes exactly the fields it is given, so a malformed frame (a
wrong version, IHL, length, data offset or checksum) is one argument away from a
well-formed one. Checksums are computed by default; ``flip`` (a nonzero 16-bit mask,
not 0xffff, which would give the ones'-complement twin of a correct sum) XORs the
correct checksum to make a bad one.

Addresses are packed bytes (4 or 16). Nothing here parses a frame: reading is
``pfc.oracle.packets``' job.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

ETH_IP4, ETH_IP6, ETH_ARP = 0x0800, 0x86DD, 0x0806
TPID_8021Q, TPID_8021AD = 0x8100, 0x88A8
HOP_BY_HOP, IPV6_FRAGMENT = 0, 44
TCP, UDP, ICMP, ICMP6 = 6, 17, 1, 58
BASE_PROTOS = (ICMP, TCP, UDP, ICMP6)


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``, odd lengths padded with a zero."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pseudo_header(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    """The TCP/UDP/ICMPv6 pseudo-header: IPv4 (RFC 793) or IPv6 (RFC 8200 8.1) by the
    address size."""
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length & 0xFFFF)
    return src + dst + struct.pack("!I3xB", length, proto)


def _with_checksum(segment: bytes, at: int, value: int) -> bytes:
    return segment[:at] + struct.pack("!H", value) + segment[at + 2:]


def l4_checksum(src: bytes, dst: bytes, proto: int, segment: bytes, at: int,
                flip: int = 0) -> bytes:
    """``segment`` with its checksum (zero at offset ``at``) filled in over the
    pseudo-header. A UDP checksum that comes out 0 is written 0xffff (RFC 768)."""
    value = checksum(pseudo_header(src, dst, proto, len(segment)) + segment)
    if proto == UDP and value == 0:
        value = 0xFFFF
    return _with_checksum(segment, at, value ^ flip)


# ------------------------------------------------------------------------- link layer

def ethernet(dst: bytes, src: bytes, ethertype: int, payload: bytes,
             tags: Sequence[tuple[int, int]] = ()) -> bytes:
    """An Ethernet II frame; ``tags`` are (TPID, TCI) pairs, outermost first."""
    vlan = b"".join(struct.pack("!HH", tpid, tci) for tpid, tci in tags)
    return dst + src + vlan + struct.pack("!H", ethertype) + payload


def arp(op: int, sha: bytes, spa: bytes, tha: bytes, tpa: bytes) -> bytes:
    """An ARP packet for IPv4 over Ethernet (RFC 826), 28 bytes."""
    return struct.pack("!HHBBH", 1, ETH_IP4, 6, 4, op) + sha + spa + tha + tpa


# --------------------------------------------------------------------------------- IP

def ipv4(src: bytes, dst: bytes, proto: int, payload: bytes, *, ttl: int = 64,
         ident: int = 0, df: bool = False, mf: bool = False, frag_offset: int = 0,
         options: bytes = b"", tos: int = 0, version: int = 4, ihl: int | None = None,
         total_length: int | None = None, flip: int = 0) -> bytes:
    """An IPv4 packet. ``ihl`` and ``total_length`` default to the true values; the
    header checksum covers the first ``max(ihl, 5) * 4`` bytes as written, so a
    header that claims more options than it has still checks out."""
    ihl = 5 + (len(options) + 3) // 4 if ihl is None else ihl
    options += b"\0" * (-len(options) % 4)
    length = 20 + len(options) + len(payload) if total_length is None else total_length
    flags = (0x4000 if df else 0) | (0x2000 if mf else 0) | (frag_offset & 0x1FFF)
    head = struct.pack("!BBHHHBBH4s4s", (version << 4) | (ihl & 0xF), tos,
                       length & 0xFFFF, ident, flags, ttl, proto, 0, src, dst) + options
    packet = head + payload
    value = checksum(packet[:max(ihl, 5) * 4]) ^ flip
    return _with_checksum(packet, 10, value)


def ipv6(src: bytes, dst: bytes, next_header: int, payload: bytes, *,
         hop_limit: int = 64, tclass: int = 0, flow: int = 0, version: int = 6,
         payload_length: int | None = None) -> bytes:
    """An IPv6 packet; ``payload`` includes any extension headers."""
    length = len(payload) if payload_length is None else payload_length
    word = (version << 28) | (tclass << 20) | (flow & 0xFFFFF)
    return struct.pack("!IHBB", word, length & 0xFFFF, next_header, hop_limit) \
        + src + dst + payload


def hop_by_hop(next_header: int, options: bytes | None = None) -> bytes:
    """A Hop-by-Hop Options header. The default is 8 bytes holding one PadN option
    (4 zero bytes): valid for the kernel, which refuses more than 7 bytes of padding
    in a row and nonzero PadN contents (``ip6_parse_tlv``)."""
    body = b"\x01\x04\0\0\0\0" if options is None else options
    body += b"\0" * (-(len(body) + 2) % 8)
    return struct.pack("!BB", next_header, (len(body) + 2) // 8 - 1) + body


def ipv6_fragment(next_header: int, offset: int, more: bool, ident: int) -> bytes:
    """An IPv6 Fragment header (8 bytes); ``offset`` in 8-byte units."""
    return struct.pack("!BBHI", next_header, 0, ((offset & 0x1FFF) << 3) | more, ident)


# -------------------------------------------------------------------------- transport

def tcp(src: bytes, dst: bytes, sport: int, dport: int, flags: int, payload: bytes, *,
        seq: int = 0, ack: int = 0, window: int = 65535, options: bytes = b"",
        data_offset: int | None = None, flip: int = 0) -> bytes:
    """A TCP segment. ``data_offset`` defaults to the true header length in words;
    the checksum covers the whole segment over the pseudo-header."""
    options += b"\0" * (-len(options) % 4)
    offset = 5 + len(options) // 4 if data_offset is None else data_offset
    head = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (offset & 0xF) << 4,
                       flags, window, 0, 0) + options
    return l4_checksum(src, dst, TCP, head + payload, 16, flip)


def udp(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes, *,
        length: int | None = None, flip: int = 0, no_checksum: bool = False) -> bytes:
    """A UDP datagram; ``no_checksum`` writes 0 (allowed over IPv4 only)."""
    size = 8 + len(payload) if length is None else length
    segment = struct.pack("!HHHH", sport, dport, size & 0xFFFF, 0) + payload
    if no_checksum:
        return segment
    return l4_checksum(src, dst, UDP, segment, 6, flip)


def icmp(icmp_type: int, code: int, rest: bytes, payload: bytes, *, flip: int = 0) -> bytes:
    """An ICMP (IPv4) message: type, code, checksum, 4 bytes of ``rest``, payload."""
    message = struct.pack("!BBH4s", icmp_type, code, 0, rest) + payload
    return _with_checksum(message, 2, checksum(message) ^ flip)


def icmp6(src: bytes, dst: bytes, icmp_type: int, code: int, rest: bytes, payload: bytes,
          *, flip: int = 0) -> bytes:
    """An ICMPv6 message; its checksum covers the pseudo-header (RFC 4443 2.3)."""
    message = struct.pack("!BBH4s", icmp_type, code, 0, rest) + payload
    return l4_checksum(src, dst, ICMP6, message, 2, flip)
