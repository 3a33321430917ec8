"""Reading a frame, byte by byte, as semantics.md "Reading a frame" defines it.

The oracle's idea of a valid header is the kernel's, not a dissector's: nothing here
parses with scapy, nothing trusts a length field it has not checked, and nothing
raises on any bytes. Offsets are into the frame as given (a VLAN tag, if any, kept).

- ``read_frame`` finds the Ethernet type (one 802.1Q/802.1ad tag skipped), the L3 offset
  and, when the IP header is one the kernel accepts, the transport offset.
- ``ip_field``/``transport_field``/``payload_bytes`` read a field where it lies, or give
  None when the field is absent (not IP, not readable, or its bytes outside the frame).
- ``strip_outer_vlan``/``l2_input_view``/``ip_input_view`` give what a hook sees of a
  frame (semantics.md "What each hook sees"), mirroring named Linux functions.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

ETH_HLEN = 14
VLAN_HLEN = 4
VLAN_TPIDS = (0x8100, 0x88A8)  # 802.1Q, 802.1ad
ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD
TCP, UDP, ICMP, ICMP6 = 6, 17, 1, 58


@dataclass(frozen=True, slots=True)
class FrameView:
    """One frame, read once. Every offset is into ``data``."""

    data: bytes  # the frame as given
    l3: int | None  # 14, or 18 after one VLAN tag; None when there is no EtherType
    ethertype: int | None  # after one skipped tag
    version: int | None  # 4 for 0x0800, 6 for 0x86DD (the version nibble is not checked)
    l4: int | None  # transport header offset when transport fields are readable
    l4proto: int | None  # IPv4 protocol byte / IPv6 fixed header's Next Header, if present


def read_frame(frame: bytes, skip_tag: bool = True) -> FrameView:
    """Read ``frame`` (any bytes; never raises).

    One outer tag (TPID 0x8100 or 0x88a8 at bytes 12..13) is skipped: EtherType at 16,
    L3 at 18. A second tag stays, so such a frame's EtherType is a TPID: not IP. A frame
    too short to hold its EtherType has none (``l3`` None).

    ``skip_tag=False`` is for frames a hook sees after the kernel already removed the
    outer tag (tc, packet sockets, nft netdev: ``strip_outer_vlan``): a tag still there
    is the *inner* one, and the frame is not IP.
    """
    frame = bytes(frame)
    if len(frame) < ETH_HLEN:
        return FrameView(frame, None, None, None, None, None)
    ethertype, l3 = (frame[12] << 8) | frame[13], ETH_HLEN
    if ethertype in VLAN_TPIDS and skip_tag:
        if len(frame) < ETH_HLEN + VLAN_HLEN:
            return FrameView(frame, None, None, None, None, None)
        ethertype, l3 = (frame[16] << 8) | frame[17], ETH_HLEN + VLAN_HLEN
    if ethertype == ETH_P_IP:
        return FrameView(frame, l3, ethertype, 4, _ipv4_l4(frame, l3), _byte(frame, l3 + 9))
    if ethertype == ETH_P_IPV6:
        return FrameView(frame, l3, ethertype, 6, _ipv6_l4(frame, l3), _byte(frame, l3 + 6))
    return FrameView(frame, l3, ethertype, None, None, None)


def _byte(data: bytes, at: int) -> int | None:
    return data[at] if at < len(data) else None


def _u16(data: bytes, at: int) -> int | None:
    return (data[at] << 8) | data[at + 1] if at + 2 <= len(data) else None


def _ipv4_l4(frame: bytes, l3: int) -> int | None:
    """The transport offset if the IPv4 header is one the kernel accepts (version 4,
    IHL >= 5, IHL*4 <= total length <= len(L3)) and this is the first fragment
    (offset 0; MF may be set). The header checksum is not checked (nft netdev's
    transport matches don't, semantics.md fact 2)."""
    if len(frame) - l3 < 20:  # total length >= IHL*4 >= 20 needs 20 bytes of L3 anyway
        return None
    first, total = frame[l3], (frame[l3 + 2] << 8) | frame[l3 + 3]
    ihl = (first & 0x0F) * 4
    if first >> 4 != 4 or ihl < 20 or not ihl <= total <= len(frame) - l3:
        return None
    if ((frame[l3 + 6] << 8) | frame[l3 + 7]) & 0x1FFF:
        return None
    return l3 + ihl


def _ipv6_l4(frame: bytes, l3: int) -> int | None:
    """l3 + 40 if the fixed header says version 6 and 40 + payload length <= len(L3).
    v1 reads no extension header: the transport is whatever the Next Header names."""
    if len(frame) - l3 < 40 or frame[l3] >> 4 != 6:
        return None
    if 40 + ((frame[l3 + 4] << 8) | frame[l3 + 5]) > len(frame) - l3:
        return None
    return l3 + 40


# ------------------------------------------------------------------------------ fields

# name -> (offset into L3, size) for IPv4 and IPv6; read raw, header not validated.
_IP4 = {"src": (12, 4), "dst": (16, 4), "ttl": (8, 1), "len": (2, 2), "proto": (9, 1),
        "frag": (6, 2)}
_IP6 = {"src": (8, 16), "dst": (24, 16), "ttl": (7, 1), "len": (4, 2), "proto": (6, 1)}
_TRANSPORT = {"sport": (0, 2, (TCP, UDP)), "dport": (2, 2, (TCP, UDP)),
              "flags": (13, 1, (TCP,)), "icmp-type": (0, 1, (ICMP, ICMP6)),
              "icmp-code": (1, 1, (ICMP, ICMP6))}
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def ip_field_bytes(view: FrameView, name: str) -> bytes | None:
    """The raw bytes of IP field ``name`` (``src dst ttl len proto frag``), or None when
    the frame is not IPv4/IPv6, the family lacks it (``frag`` on IPv6) or a byte is
    missing."""
    table = _IP4 if view.version == 4 else _IP6 if view.version == 6 else None
    if table is None or name not in table:
        return None
    offset, size = table[name]
    start = view.l3 + offset
    if start + size > len(view.data):
        return None
    return view.data[start:start + size]


def ip_field(view: FrameView, name: str) -> int | Address | None:
    """IP field ``name`` read where it lies (semantics.md "Reading a frame").

    ``src``/``dst``: an address; ``ttl``: TTL / hop limit; ``len``: IPv4 total length /
    IPv6 40 + payload length; ``proto``: protocol byte / fixed header's Next Header;
    ``frag`` (IPv4 only): 1 if MF is set or the fragment offset is not 0, else 0.
    """
    raw = ip_field_bytes(view, name)
    if raw is None:
        return None
    if name in ("src", "dst"):
        return ipaddress.ip_address(raw)
    value = int.from_bytes(raw, "big")
    if name == "frag":
        return int(value & 0x3FFF != 0)
    if name == "len" and view.version == 6:
        return 40 + value
    return value


def transport_field(view: FrameView, name: str, proto: int) -> int | None:
    """Transport field ``name`` (``sport dport flags icmp-type``) of a ``proto`` packet.

    None unless the transport is readable (``view.l4``), the packet's protocol is
    ``proto``, ``name`` belongs to ``proto`` and all its bytes are in the frame.
    """
    if view.l4 is None or view.l4proto != proto or name not in _TRANSPORT:
        return None
    offset, size, protos = _TRANSPORT[name]
    if proto not in protos:
        return None
    start = view.l4 + offset
    if start + size > len(view.data):
        return None
    return int.from_bytes(view.data[start:start + size], "big")


def payload_start(view: FrameView, proto: int) -> int | None:
    """Offset of the first payload byte of a readable TCP/UDP ``proto`` packet: 8 bytes
    into UDP; the data offset * 4 into TCP (byte 12 present, data offset >= 5)."""
    if view.l4 is None or view.l4proto != proto:
        return None
    if proto == UDP:
        return view.l4 + 8
    if proto == TCP:
        offset = _byte(view.data, view.l4 + 12)
        if offset is None or offset >> 4 < 5:
            return None
        return view.l4 + (offset >> 4) * 4
    return None


def payload_bytes(view: FrameView, proto: int, offset: int, length: int) -> bytes | None:
    """``length`` payload bytes from ``offset``, read as they lie (Ethernet padding past
    the IP total length included, as nft's ``@ih`` reads it); None if any is missing."""
    start = payload_start(view, proto)
    if start is None or offset < 0 or length < 0:
        return None
    start += offset
    if start + length > len(view.data):
        return None
    return view.data[start:start + length]


def counted_bytes(view: FrameView) -> int:
    """What a count rule adds in bytes: the frame's length after the Ethernet header
    and any skipped tag (padding included, as nft and iptables count); 0 if no L3."""
    return 0 if view.l3 is None else max(0, len(view.data) - view.l3)


# ------------------------------------------------------------------------- hook views

def _tpid_at(frame: bytes, at: int) -> bool:
    return len(frame) >= at + 2 and ((frame[at] << 8) | frame[at + 1]) in VLAN_TPIDS


def strip_outer_vlan(frame: bytes) -> bytes:
    """The frame with its outer VLAN tag removed, as tc, packet sockets and nft netdev
    ingress see it (``skb_vlan_untag`` in ``__netif_receive_skb_core``); unchanged if
    untagged or too short to hold a whole tag. The kernel frees a tagged frame shorter
    than 20 bytes instead (``pskb_may_pull(skb, VLAN_HLEN + 2)``): ``l2_input_view``
    says whether a hook sees the frame at all."""
    frame = bytes(frame)
    if _tpid_at(frame, 12) and len(frame) >= ETH_HLEN + VLAN_HLEN:
        return frame[:12] + frame[16:]
    return frame


def l2_input_view(frame: bytes) -> bytes | None:
    """What tc ingress, packet sockets and nft netdev ingress see, or None if they never
    see the frame: shorter than 14 bytes (``packet_snd``'s ``dev_validate_header``
    refuses it, NICs drop runts) or tagged and shorter than 20 (``skb_vlan_untag``
    frees it). Otherwise ``strip_outer_vlan(frame)``."""
    if len(frame) < ETH_HLEN:
        return None
    if _tpid_at(frame, 12) and len(frame) < ETH_HLEN + VLAN_HLEN + 2:
        return None
    return strip_outer_vlan(frame)


def ip_input_view(frame: bytes) -> bytes | None:
    """What hooks behind the kernel's IP input see (nft ip/ip6/inet prerouting and input,
    iptables raw PREROUTING and filter INPUT): the Ethernet header (tags removed) and
    the IP packet trimmed to its own length, or None for a frame IP input drops or
    never gets. Mirrors Linux 6.x, on a plain (veth) device with default sysctls:

    - ``l2_input_view``: runts and tagged frames under 20 bytes are never received;
    - ``__netif_receive_skb_core`` with no VLAN device: a tag with VLAN id != 0 makes
      the frame ``PACKET_OTHERHOST``, which ``ip_rcv_core``/``ip6_rcv_core`` drop; a
      priority tag (id 0) is removed, and so is each further id-0 tag (``check_vlan_id``);
    - the remaining EtherType must be 0x0800 (``ip_rcv``) or 0x86DD (``ipv6_rcv``):
      ARP and everything else never reach IP input;
    - IPv4 ``ip_rcv_core``: ``_ipv4_rcv_core``; IPv6 ``ip6_rcv_core``: ``_ipv6_rcv_core``.

    Not modelled: a destination MAC that is not the device's (``eth_type_trans`` makes
    it ``PACKET_OTHERHOST`` too: test frames are sent to the device's address), and
    conntrack defragmentation, which runs before raw PREROUTING when loaded.
    """
    eth = _untag_for_ip(bytes(frame))
    if eth is None:
        return None
    ethertype = _u16(eth, 12)
    if ethertype == ETH_P_IP:
        packet = _ipv4_rcv_core(eth[ETH_HLEN:])
    elif ethertype == ETH_P_IPV6:
        packet = _ipv6_rcv_core(eth[ETH_HLEN:])
    else:
        return None
    return None if packet is None else eth[:ETH_HLEN] + packet


def _untag_for_ip(frame: bytes) -> bytes | None:
    """The frame after ``__netif_receive_skb_core`` as IP input gets it, or None."""
    if len(frame) < ETH_HLEN:
        return None
    while _tpid_at(frame, 12):
        if len(frame) < ETH_HLEN + VLAN_HLEN + 2 or _u16(frame, 14) & 0x0FFF:
            return None
        frame = frame[:12] + frame[16:]
    return frame


def ones_sum(data: bytes) -> int:
    """The 16-bit ones'-complement sum of ``data`` (odd length padded with a zero),
    folded; 0 only for all-zero data."""
    if len(data) % 2:
        data += b"\0"
    total = int.from_bytes(data, "big")
    # Summing 16-bit words mod 0xffff is the number mod 0xffff (2**16 = 1 mod 0xffff).
    folded = total % 0xFFFF
    return 0xFFFF if folded == 0 and total else folded


def _ipv4_rcv_core(packet: bytes) -> bytes | None:
    """``ip_rcv_core`` (net/ipv4/ip_input.c): at least 20 bytes (``pskb_may_pull``);
    IHL >= 5 and version 4; IHL*4 bytes present; a header checksum that verifies
    (``ip_fast_csum``); total length <= the bytes received (else "truncated") and
    >= IHL*4; then ``pskb_trim_rcsum`` trims the padding to the total length."""
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[0] & 0x0F < 5:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl or ones_sum(packet[:ihl]) != 0xFFFF:
        return None
    total = (packet[2] << 8) | packet[3]
    if total > len(packet) or total < ihl:
        return None
    return packet[:total]


def _ipv6_rcv_core(packet: bytes) -> bytes | None:
    """``ip6_rcv_core`` (net/ipv6/ip6_input.c): 40 bytes present; version 6; no
    loopback (::1) source or destination (RFC 4291 2.5.3); no multicast destination
    of interface-local scope 1 (RFC 4291 errata 3480) or reserved scope 0; no
    multicast source (RFC 4291 2.7); unless the payload length is 0 with a hop-by-hop
    header (a jumbogram), 40 + payload length <= the bytes received, then trimmed to
    it; a hop-by-hop header must pass ``ipv6_parse_hopopts`` (``_parse_hopopts``).

    A v4-mapped source is *not* dropped here since Linux 5.12 (commit dcc32f4f183a,
    "ipv6: weaken the v4mapped source check", moved it to TCP/DCCP connection
    requests); ``drop_unicast_in_l2_multicast`` is off by default.
    """
    if len(packet) < 40 or packet[0] >> 4 != 6:
        return None
    src, dst = packet[8:24], packet[24:40]
    if ONE_V6 in (src, dst) or src[0] == 0xFF:
        return None
    if dst[0] == 0xFF and dst[1] & 0x0F in (0, 1):
        return None
    length = (packet[4] << 8) | packet[5]
    if length or packet[6] != HOP_BY_HOP:
        if 40 + length > len(packet):
            return None
        packet = packet[:40 + length]
    return _parse_hopopts(packet) if packet[6] == HOP_BY_HOP else packet


ONE_V6 = bytes(15) + b"\x01"
HOP_BY_HOP = 0
MAX_HBH_OPTS_CNT = 8  # net.ipv6.max_hbh_opts_number default (IP6_DEFAULT_MAX_HBH_OPTS_CNT)
PAD1, PADN, ROUTER_ALERT, CALIPSO, IOAM, JUMBO = 0, 1, 5, 7, 0x31, 0xC2


def _parse_hopopts(packet: bytes) -> bytes | None:
    """``ipv6_parse_hopopts`` and ``ip6_parse_tlv(true, ...)`` (net/ipv6/exthdrs.c): the
    8 first bytes and the whole header present; at most 7 bytes of padding in a row
    (Pad1/PadN), PadN contents zero; at most 8 non-padding options; each option whole
    and valid (``_hop_option``). Returns the packet (a jumbogram trimmed) or None."""
    if len(packet) < 48 or len(packet) < 40 + (packet[41] + 1) * 8:
        return None
    end, off, padlen, count = 40 + (packet[41] + 1) * 8, 42, 0, 0
    while off < end:
        if packet[off] == PAD1:
            padlen, off = padlen + 1, off + 1
            if padlen > 7:
                return None
            continue
        if end - off < 2 or packet[off + 1] + 2 > end - off:
            return None
        optlen = packet[off + 1] + 2
        if packet[off] == PADN:
            padlen += optlen
            if padlen > 7 or any(packet[off + 2:off + optlen]):
                return None
        else:
            count, padlen = count + 1, 0
            packet = _hop_option(packet, off) if count <= MAX_HBH_OPTS_CNT else None
            if packet is None:
                return None
        off += optlen
    return packet


def _hop_option(packet: bytes, off: int) -> bytes | None:
    """One hop-by-hop option at ``off`` (from the IPv6 header): Router Alert needs
    length 2 (``ipv6_hop_ra``); IOAM needs 4n alignment, then is ignored (ioam6_enabled
    is 0 by default, ``ipv6_hop_ioam``); Jumbo Payload needs length 4 at 4n+2, a value
    > 65535, a zero payload length and that many bytes, and trims to them
    (``ipv6_hop_jumbo``); CALIPSO is dropped (no DOI configured: ``calipso_validate``);
    an unknown option is skipped only if its two high bits are 00 (``ip6_tlvopt_unknown``).
    """
    kind, size = packet[off], packet[off + 1]
    if kind == ROUTER_ALERT:
        return packet if size == 2 else None
    if kind == IOAM:
        return None if off & 3 else packet
    if kind == JUMBO:
        if size != 4 or off & 3 != 2:
            return None
        length = int.from_bytes(packet[off + 2:off + 6], "big")
        if length <= 0xFFFF or packet[4:6] != b"\0\0" or length > len(packet) - 40:
            return None
        return packet[:40 + length]
    if kind == CALIPSO:
        return None
    return packet if kind >> 6 == 0 else None


def plain_options(options: bytes) -> bool:
    """NOPs and 4-byte Router Alerts, then nothing or only EOL bytes."""
    i = 0
    while i < len(options):
        if options[i] == 0:
            return not any(options[i:])
        if options[i] == 1:
            i += 1
        elif options[i] == 0x94 and options[i + 1:i + 2] == b"\x04":
            i += 4
        else:
            return False
    return i == len(options)
