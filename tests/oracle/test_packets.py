"""pfc.oracle.packets: frames read byte by byte as semantics.md "Reading a frame" says, and
what the kernel's IP input lets through (``ip_input_view``). Frames are built here
with ``struct`` (the builders are shared with test_interp.py)."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from pfc.oracle import packets
from pfc.oracle.packets import ip_field, ip_input_view, read_frame, transport_field

MAC_DST, MAC_SRC = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
A4, B4 = bytes([10, 0, 0, 1]), bytes([192, 168, 64, 2])
A6 = ipaddress.IPv6Address("2001:db8::1").packed
B6 = ipaddress.IPv6Address("2001:db8::2").packed


# ----------------------------------------------------------------------------- builders

def checksum(data: bytes) -> int:
    """RFC 1071, word by word (the reference for every checksum test)."""
    data += b"\0" * (len(data) % 2)
    total = 0
    for i in range(0, len(data), 2):
        total += (data[i] << 8) | data[i + 1]
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def eth(ethertype: int, payload: bytes, tags: tuple[tuple[int, int], ...] = ()) -> bytes:
    vlan = b"".join(struct.pack("!HH", tpid, tci) for tpid, tci in tags)
    return MAC_DST + MAC_SRC + vlan + struct.pack("!H", ethertype) + payload


def ipv4(proto: int, payload: bytes, *, src: bytes = A4, dst: bytes = B4, ttl: int = 64,
         options: bytes = b"", ihl: int | None = None, version: int = 4,
         total: int | None = None, frag: int = 0, flip: int = 0) -> bytes:
    """``frag``: the flags + fragment offset word. The checksum covers max(IHL, 5)*4
    header bytes as written, XORed with ``flip``."""
    ihl = 5 + len(options) // 4 if ihl is None else ihl
    total = 20 + len(options) + len(payload) if total is None else total
    head = struct.pack("!BBHHHBBH4s4s", (version << 4) | ihl, 0, total, 1, frag, ttl,
                       proto, 0, src, dst) + options
    packet = head + payload
    value = checksum(packet[:max(ihl, 5) * 4]) ^ flip
    return packet[:10] + struct.pack("!H", value) + packet[12:]


def ipv6(nh: int, payload: bytes, *, src: bytes = A6, dst: bytes = B6, hlim: int = 64,
         plen: int | None = None, version: int = 6) -> bytes:
    plen = len(payload) if plen is None else plen
    return struct.pack("!IHBB", version << 28, plen, nh, hlim) + src + dst + payload


def pseudo(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length)
    return src + dst + struct.pack("!I3xB", length, proto)


def udp(sport: int, dport: int, payload: bytes = b"", *, src: bytes = A4, dst: bytes = B4,
        csum: int | None = None) -> bytes:
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    value = checksum(pseudo(src, dst, 17, len(seg)) + seg) if csum is None else csum
    value = 0xFFFF if csum is None and value == 0 else value
    return seg[:6] + struct.pack("!H", value) + seg[8:]


def tcp(sport: int, dport: int, flags: int = 0x02, payload: bytes = b"", *,
        src: bytes = A4, dst: bytes = B4, options: bytes = b"", doff: int | None = None,
        csum: int | None = None) -> bytes:
    doff = 5 + len(options) // 4 if doff is None else doff
    seg = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, doff << 4, flags, 1024, 0, 0)
    seg += options + payload
    value = checksum(pseudo(src, dst, 6, len(seg)) + seg) if csum is None else csum
    return seg[:16] + struct.pack("!H", value) + seg[18:]


def icmp(icmp_type: int, code: int = 0) -> bytes:
    return struct.pack("!BBHI", icmp_type, code, 0, 0)


def udp4(sport: int = 1234, dport: int = 53, payload: bytes = b"hello", **kw) -> bytes:
    return eth(0x0800, ipv4(17, udp(sport, dport, payload), **kw))


def tcp4(sport: int = 1234, dport: int = 80, flags: int = 0x02, payload: bytes = b"",
         **kw) -> bytes:
    return eth(0x0800, ipv4(6, tcp(sport, dport, flags, payload), **kw))


def udp6(sport: int = 1234, dport: int = 53, payload: bytes = b"hello") -> bytes:
    return eth(0x86DD, ipv6(17, udp(sport, dport, payload, src=A6, dst=B6)))


def tcp6(sport: int = 1234, dport: int = 80, flags: int = 0x02, payload: bytes = b"") -> bytes:
    return eth(0x86DD, ipv6(6, tcp(sport, dport, flags, payload, src=A6, dst=B6)))


ARP = eth(0x0806, struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + MAC_SRC + A4 + bytes(6) + B4)


def hop_by_hop(nh: int, options: bytes) -> bytes:
    assert (len(options) + 2) % 8 == 0
    return struct.pack("!BB", nh, (len(options) + 2) // 8 - 1) + options


# ------------------------------------------------------------------------ read_frame

@pytest.mark.parametrize("n", range(14))
def test_runts_have_no_ethertype(n):
    view = read_frame(udp4()[:n])
    assert (view.l3, view.ethertype, view.version, view.l4) == (None,) * 4
    assert packets.counted_bytes(view) == 0


def test_arp_has_an_ethertype_but_no_ip():
    view = read_frame(ARP)
    assert (view.l3, view.ethertype, view.version, view.l4proto) == (14, 0x0806, None, None)
    assert ip_field(view, "src") is None
    assert packets.counted_bytes(view) == len(ARP) - 14


@pytest.mark.parametrize("tpid", [0x8100, 0x88A8])
def test_one_tag_is_skipped(tpid):
    frame = eth(0x0800, ipv4(17, udp(1, 53)), tags=((tpid, 7),))
    view = read_frame(frame)
    assert (view.l3, view.ethertype, view.version, view.l4) == (18, 0x0800, 4, 38)
    assert transport_field(view, "dport", 17) == 53
    assert packets.counted_bytes(view) == len(frame) - 18
    for n in range(14, 18):  # a tag with no room for the EtherType after it
        assert read_frame(frame[:n]).l3 is None


def test_a_second_tag_stays_and_the_frame_is_not_ip():
    frame = eth(0x0800, ipv4(17, udp(1, 53)), tags=((0x88A8, 1), (0x8100, 2)))
    view = read_frame(frame)
    assert (view.l3, view.ethertype, view.version) == (18, 0x8100, None)
    assert ip_field(view, "dst") is None


def test_ipv4_fields_read_raw():
    frame = eth(0x0800, ipv4(17, udp(1, 2), ttl=7, frag=0x4000))
    view = read_frame(frame)
    assert ip_field(view, "src") == ipaddress.IPv4Address("10.0.0.1")
    assert ip_field(view, "dst") == ipaddress.IPv4Address("192.168.64.2")
    assert (ip_field(view, "ttl"), ip_field(view, "proto")) == (7, 17)
    assert ip_field(view, "len") == 28
    assert ip_field(view, "frag") == 0  # DF alone is not a fragment


@pytest.mark.parametrize("word,frag", [(0x2000, 1), (0x0001, 1), (0x1FFF, 1), (0x4000, 0),
                                       (0x8000, 0), (0x6001, 1)])
def test_frag_is_mf_or_offset(word, frag):
    assert ip_field(read_frame(eth(0x0800, ipv4(17, b"", frag=word))), "frag") == frag


def test_ipv6_fields_read_raw():
    view = read_frame(udp6())
    assert ip_field(view, "src") == ipaddress.IPv6Address("2001:db8::1")
    assert ip_field(view, "dst") == ipaddress.IPv6Address("2001:db8::2")
    assert (ip_field(view, "ttl"), ip_field(view, "proto"), ip_field(view, "len")) == (64, 17, 53)
    assert ip_field(view, "frag") is None  # IPv4 only
    assert (view.l4, view.l4proto) == (54, 17)


def test_ip_fields_do_not_need_a_valid_header():
    frame = eth(0x0800, ipv4(6, tcp(1, 80), version=5, ihl=3, total=9999))
    view = read_frame(frame)
    assert view.version == 4 and view.l4 is None and view.l4proto == 6
    assert ip_field(view, "dst") == ipaddress.IPv4Address("192.168.64.2")
    assert transport_field(view, "dport", 6) is None


@pytest.mark.parametrize("ihl", range(5, 16))
def test_ipv4_options_move_the_transport_header(ihl):
    options = bytes([1]) * ((ihl - 5) * 4)  # NOPs
    view = read_frame(eth(0x0800, ipv4(17, udp(7, 53), options=options)))
    assert view.l4 == 14 + ihl * 4
    assert (transport_field(view, "sport", 17), transport_field(view, "dport", 17)) == (7, 53)


@pytest.mark.parametrize("kw", [dict(ihl=4), dict(ihl=0), dict(version=6), dict(version=5),
                                dict(total=19), dict(total=29), dict(total=0),
                                dict(options=bytes(4), total=20)])
def test_transport_unreadable_on_headers_the_kernel_rejects(kw):
    view = read_frame(eth(0x0800, ipv4(17, udp(1, 53), **kw)))
    assert view.l4 is None and transport_field(view, "dport", 17) is None
    assert ip_field(view, "proto") == 17


def test_total_length_at_or_below_the_frame_is_fine():
    exact = read_frame(eth(0x0800, ipv4(17, udp(1, 53))))
    header_only = read_frame(eth(0x0800, ipv4(17, udp(1, 53), total=20)))
    assert transport_field(exact, "dport", 17) == transport_field(header_only, "dport", 17) == 53


def test_fragments():
    first = read_frame(eth(0x0800, ipv4(17, udp(1, 53), frag=0x2000)))
    later = read_frame(eth(0x0800, ipv4(17, udp(1, 53), frag=0x2000 | 185)))
    last = read_frame(eth(0x0800, ipv4(17, udp(1, 53), frag=185)))
    assert transport_field(first, "dport", 17) == 53
    assert transport_field(later, "dport", 17) is None  # the port bytes are there
    assert transport_field(last, "dport", 17) is None
    assert packets.payload_bytes(later, 17, 0, 1) is None


def test_transport_field_needs_the_packets_protocol():
    view = read_frame(udp4())
    assert transport_field(view, "dport", 6) is None
    assert transport_field(view, "flags", 17) is None  # not a UDP field
    assert transport_field(view, "nonsense", 17) is None


def test_tcp_and_icmp_fields():
    view = read_frame(tcp4(flags=0x12))
    assert transport_field(view, "flags", 6) == 0x12
    icmp_view = read_frame(eth(0x0800, ipv4(1, icmp(8))))
    assert transport_field(icmp_view, "icmp-type", 1) == 8
    icmp6_view = read_frame(eth(0x86DD, ipv6(58, icmp(128))))
    assert transport_field(icmp6_view, "icmp-type", 58) == 128
    assert transport_field(icmp6_view, "icmp-type", 1) is None


FIELDS = {"sport": (0, 2), "dport": (2, 2), "flags": (13, 1)}
IP_FIELDS = {"ttl": (8, 1), "proto": (9, 1), "src": (12, 4), "dst": (16, 4), "len": (2, 2)}


@pytest.mark.parametrize("proto", [6, 17])
def test_truncation_makes_each_field_absent_exactly_when_its_bytes_leave(proto):
    """Total length 20 (header only), so the transport is readable whatever the cut:
    a field goes absent exactly when its last byte leaves the frame."""
    seg = tcp(1, 2, 0x12, b"abcd") if proto == 6 else udp(1, 2, b"abcd")
    frame = eth(0x0800, ipv4(proto, seg, total=20))
    start = 8 if proto == 17 else 20
    for cut in range(len(frame) + 1):
        view = read_frame(frame[:cut])
        for name, (off, size) in IP_FIELDS.items():
            assert (ip_field(view, name) is None) == (cut < 14 + off + size), (name, cut)
        for name, (off, size) in FIELDS.items():
            if name == "flags" and proto == 17:
                continue
            assert (transport_field(view, name, proto) is None) == (cut < 34 + off + size)
        got = packets.payload_bytes(view, proto, 1, 2)
        assert (got is None) == (cut < 34 + start + 3), cut
        assert got in (None, b"bc")


@pytest.mark.parametrize("proto", [6, 17])
def test_truncating_a_consistent_frame_loses_the_transport_at_once(proto):
    seg = tcp(1, 2, 0x12, b"abcd") if proto == 6 else udp(1, 2, b"abcd")
    frame = eth(0x0800, ipv4(proto, seg))
    for cut in range(len(frame)):
        view = read_frame(frame[:cut])
        assert transport_field(view, "sport", proto) is None
        assert (ip_field(view, "dst") is None) == (cut < 34)


def test_ipv6_truncation():
    frame = eth(0x86DD, ipv6(17, udp(1, 2, b"xy", src=A6, dst=B6), plen=0))
    for cut in range(len(frame) + 1):
        view = read_frame(frame[:cut])
        assert (ip_field(view, "dst") is None) == (cut < 54)
        assert (transport_field(view, "dport", 17) is None) == (cut < 58)
        assert (packets.payload_bytes(view, 17, 0, 2) is None) == (cut < 64)
    assert read_frame(eth(0x86DD, ipv6(17, udp(1, 2), plen=9))).l4 is None
    assert read_frame(eth(0x86DD, ipv6(17, udp(1, 2), version=4))).l4 is None


def test_ipv6_extension_header_makes_the_transport_unreadable():
    frame = eth(0x86DD, ipv6(0, hop_by_hop(17, b"\x01\x04" + bytes(4)) + udp(1, 53)))
    view = read_frame(frame)
    assert (view.l4proto, view.l4) == (0, 54)
    assert transport_field(view, "dport", 17) is None
    assert ip_field(view, "proto") == 0


@pytest.mark.parametrize("doff", range(16))
def test_tcp_payload_honours_the_data_offset(doff):
    seg = tcp(1, 2, 0x18, bytes(range(80)), doff=doff)
    view = read_frame(eth(0x0800, ipv4(6, seg)))
    got = packets.payload_bytes(view, 6, 0, 2)
    assert transport_field(view, "dport", 6) == 2  # ports don't care
    if doff < 5:
        assert got is None
    else:
        start = doff * 4 - 20
        assert got == bytes(range(80))[start:start + 2]


def test_payload_reads_ethernet_padding_past_the_total_length():
    frame = udp4(payload=b"") + b"PAD"
    view = read_frame(frame)
    assert packets.payload_bytes(view, 17, 0, 3) == b"PAD"
    assert packets.payload_bytes(view, 17, 1, 3) is None
    assert packets.payload_bytes(view, 6, 0, 1) is None


def test_read_frame_accepts_bytearray_and_memoryview():
    frame = udp4()
    assert read_frame(bytearray(frame)) == read_frame(frame)
    assert read_frame(memoryview(frame)).data == frame


# ------------------------------------------------------------------- hook views: L2

def test_strip_outer_vlan():
    inner = udp4()
    tagged = eth(0x0800, inner[14:], tags=((0x8100, 5),))
    assert packets.strip_outer_vlan(tagged) == inner
    double = eth(0x0800, inner[14:], tags=((0x88A8, 5), (0x8100, 6)))
    assert packets.strip_outer_vlan(double) == eth(0x0800, inner[14:], tags=((0x8100, 6),))
    assert packets.strip_outer_vlan(inner) == inner
    assert packets.strip_outer_vlan(tagged[:16]) == tagged[:16]


def test_l2_input_view_drops_runts_and_short_tagged_frames():
    tagged = eth(0x0800, udp4()[14:], tags=((0x8100, 5),))
    assert packets.l2_input_view(b"\0" * 13) is None
    assert packets.l2_input_view(ARP[:14]) == ARP[:14]
    assert packets.l2_input_view(tagged[:19]) is None
    assert packets.l2_input_view(tagged[:20]) == tagged[:12] + tagged[16:20]


# ----------------------------------------------------------- hook views: IP input

def test_ip_input_view_passes_good_packets_unchanged():
    for frame in (udp4(), tcp4(), udp6(), tcp6(), eth(0x0800, ipv4(17, udp(1, 2),
                                                                 options=b"\x01" * 40))):
        assert ip_input_view(frame) == frame


def test_ip_input_view_trims_padding_to_the_total_length():
    assert ip_input_view(udp4() + bytes(20)) == udp4()
    assert ip_input_view(udp6() + b"trailer") == udp6()
    header_only = eth(0x0800, ipv4(17, udp(1, 2), total=20))
    assert ip_input_view(header_only) == header_only[:34]


def test_ip_input_view_drops_what_never_reaches_ip():
    assert ip_input_view(ARP) is None
    assert ip_input_view(b"") is None and ip_input_view(udp4()[:13]) is None
    assert ip_input_view(eth(0x0801, udp4()[14:])) is None
    assert ip_input_view(eth(0x0800, b"")) is None


def test_ip_input_view_and_vlan_tags():
    inner = udp4()
    assert ip_input_view(eth(0x0800, inner[14:], tags=((0x8100, 5),))) is None  # OTHERHOST
    assert ip_input_view(eth(0x0800, inner[14:], tags=((0x88A8, 0x0FFF),))) is None
    for tpid in (0x8100, 0x88A8):  # a priority tag (VLAN id 0, any PCP) is removed
        assert ip_input_view(eth(0x0800, inner[14:], tags=((tpid, 0xE000),))) == inner
    assert ip_input_view(eth(0x0800, inner[14:], tags=((0x8100, 0), (0x8100, 0)))) == inner
    assert ip_input_view(eth(0x0800, inner[14:], tags=((0x8100, 0), (0x8100, 3)))) is None
    assert ip_input_view(eth(0x0800, inner[14:], tags=((0x8100, 3), (0x8100, 0)))) is None
    assert ip_input_view(eth(0x0806, ARP[14:], tags=((0x8100, 0),))) is None


@pytest.mark.parametrize("kw", [dict(version=6), dict(version=5), dict(ihl=4), dict(ihl=0),
                                dict(flip=1), dict(flip=0x8000), dict(total=29),
                                dict(total=19), dict(total=0)])
def test_ip_input_view_ipv4_rejections(kw):
    """ip_rcv_core: version, IHL, checksum, total length beyond the frame / below IHL*4."""
    assert ip_input_view(eth(0x0800, ipv4(17, udp(1, 2), **kw))) is None


def test_ip_input_view_ipv4_header_must_be_whole():
    frame = eth(0x0800, ipv4(17, b"", options=b"\x01" * 8))
    assert ip_input_view(frame) == frame
    for cut in range(14, len(frame)):
        assert ip_input_view(frame[:cut]) is None
    lying = eth(0x0800, ipv4(17, b"", ihl=15, total=20))  # IHL*4 > total and > frame
    assert ip_input_view(lying) is None


def test_ip_input_view_keeps_fragments_and_options():
    later = eth(0x0800, ipv4(17, udp(1, 2), frag=0x2000 | 3))
    assert ip_input_view(later) == later


LOOP6 = ipaddress.IPv6Address("::1").packed


def v6(**kw) -> bytes:
    return eth(0x86DD, ipv6(17, udp(1, 2, src=A6, dst=B6), **kw))


@pytest.mark.parametrize("kw", [
    dict(version=4), dict(version=0), dict(plen=9), dict(plen=0xFFFF),
    dict(src=LOOP6), dict(dst=LOOP6),
    dict(src=ipaddress.IPv6Address("ff02::1").packed),
    dict(dst=ipaddress.IPv6Address("ff01::1").packed),  # interface-local scope
    dict(dst=ipaddress.IPv6Address("ff00::1").packed),  # reserved scope 0
    dict(dst=ipaddress.IPv6Address("ff11::1").packed)])
def test_ip_input_view_ipv6_rejections(kw):
    assert ip_input_view(v6(**kw)) is None


@pytest.mark.parametrize("addr", ["ff02::1", "ff05::1:3", "ff0e::1", "ff12::1"])
def test_ip_input_view_ipv6_multicast_destinations_of_real_scopes_pass(addr):
    frame = v6(dst=ipaddress.IPv6Address(addr).packed)
    assert ip_input_view(frame) == frame


def test_ip_input_view_ipv6_v4_mapped_source_passes_since_linux_5_12():
    frame = v6(src=ipaddress.IPv6Address("::ffff:10.0.0.1").packed)
    assert ip_input_view(frame) == frame


def test_ip_input_view_ipv6_short_and_trimmed():
    frame = v6()
    for cut in range(14, 54):
        assert ip_input_view(frame[:cut]) is None
    assert ip_input_view(v6(plen=0)) == v6(plen=0)[:54]
    assert ip_input_view(v6(plen=3)) == v6(plen=3)[:57]


def hbh(options: bytes, *, plen: int | None = None, tail: bytes = b"") -> bytes:
    return eth(0x86DD, ipv6(0, hop_by_hop(59, options) + tail, plen=plen))


PADN4 = b"\x01\x04" + bytes(4)


@pytest.mark.parametrize("options", [
    PADN4, b"\x00" * 6, b"\x05\x02\x00\x00\x01\x00",  # Router Alert
    b"\x1e\x04abcd",  # unknown, action 00: skipped
    b"\x00\x00\x31\x06" + bytes(6) + b"\x01\x02\x00\x00",  # IOAM at 44 (4n), ignored
    b"\x1e\x00" * 8 + b"\x01\x04" + bytes(4),  # 8 options: the limit
    b"\x01\x00" + b"\x1e\x00" + b"\x01\x00",
    b"\x01\x05" + bytes(5) + b"\x1e\x00" + b"\x01\x03" + bytes(3)])  # 7 pad, option, 5 pad
def test_ip_input_view_hop_by_hop_accepted(options):
    frame = hbh(options)
    assert ip_input_view(frame) == frame
    assert ip_input_view(frame + b"pad") == frame


@pytest.mark.parametrize("options", [
    b"\x00" * 8 + bytes(6),  # 8 bytes of Pad1 in a row
    b"\x01\x04\x00\x00\x00\x01",  # PadN with a nonzero byte
    b"\x01\x04\x00\x00" + b"\x00\x00\x00\x00" + b"\x01\x02\x00\x00" + bytes(2),  # 9 pad
    b"\x01\x05" + bytes(4),  # PadN runs past the header
    b"\x00" * 5 + b"\x1e",  # an option with no length byte
    b"\x05\x03\x00\x00\x00\x00",  # Router Alert of length 3
    b"\x5e\x04abcd", b"\x9e\x04abcd", b"\xde\x04abcd",  # unknown, action 01/10/11
    b"\x1e\x00" * 9 + b"\x01\x02\x00\x00",  # 9 options
    b"\x31\x04" + bytes(4),  # IOAM at 42: not 4n-aligned
    b"\x07\x04" + bytes(4),  # CALIPSO: no DOI
    b"\xc2\x04\x00\x01\x00\x00",  # Jumbo (4n+2 aligned) with a payload length
])
def test_ip_input_view_hop_by_hop_rejected(options):
    assert ip_input_view(hbh(options)) is None


def test_ip_input_view_hop_by_hop_must_be_whole():
    frame = hbh(PADN4)
    for cut in range(54, len(frame)):
        assert ip_input_view(frame[:cut]) is None
    assert ip_input_view(hbh(PADN4, plen=4)) is None  # trimmed first, then too short


def test_ip_input_view_jumbo_payload():
    """Payload length 0 with a hop-by-hop header skips the length check; a Jumbo
    Payload option must then hold a value > 65535 that fits the frame."""
    no_jumbo = hbh(PADN4, plen=0, tail=b"rest")
    assert ip_input_view(no_jumbo) == no_jumbo  # not trimmed
    body = bytes(70000)
    jumbo = hbh(b"\xc2\x04" + struct.pack("!I", 8 + len(body)), plen=0, tail=body)
    assert ip_input_view(jumbo + b"pad") == jumbo
    small = hbh(b"\xc2\x04" + struct.pack("!I", 0xFFFF), plen=0, tail=body)
    assert ip_input_view(small) is None
    too_big = hbh(b"\xc2\x04" + struct.pack("!I", 9 + len(body)), plen=0, tail=body)
    assert ip_input_view(too_big) is None
    with_plen = hbh(b"\xc2\x04" + struct.pack("!I", 8 + len(body)), tail=bytes(10))
    assert ip_input_view(with_plen) is None
    misaligned = hbh(b"\x00\xc2\x04" + struct.pack("!I", 8 + len(body))[:3], plen=0)
    assert ip_input_view(misaligned) is None


def test_ones_sum():
    assert packets.ones_sum(b"") == 0 and packets.ones_sum(bytes(7)) == 0
    assert packets.ones_sum(b"\xff\xff") == 0xFFFF
    assert packets.ones_sum(b"\x80\x00\x80\x00") == 1
    header = ipv4(17, b"")[:20]
    assert packets.ones_sum(header) == 0xFFFF
    assert ~packets.ones_sum(header[:10] + b"\0\0" + header[12:]) & 0xFFFF == checksum(
        header[:10] + b"\0\0" + header[12:])
