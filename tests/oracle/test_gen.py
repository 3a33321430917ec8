"""Frame generation: builders agree with scapy byte for byte, well-formed frames parse
with correct checksums and lengths, the mix is biased to the policy, sampling is
deterministic."""

from __future__ import annotations

import struct
import time
from collections import Counter
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest
from hypothesis import HealthCheck, given, settings
from scapy.layers.inet import ICMP, IP, TCP, UDP, in4_chksum
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    PadN,
    in6_chksum,
)
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.utils import checksum as scapy_checksum

from pfc.frontend.ir import (
    AddrMatch,
    Drop,
    Family,
    FlagsMatch,
    IntMatch,
    PayloadMatch,
    Policy,
    Redirect,
    Rule,
)
from pfc.frontend.pipeline import compile_text
from pfc.oracle import framebuild as fb
from pfc.oracle import gen
from tests.strategies import policies

DUT = Policy(rules=(Rule(index=0, action=Drop(), family=Family.IP4, proto=17, matches=(
    AddrMatch("dst", (ip_network("192.168.0.79/32"),)),
    IntMatch("dport", ((12345, 12345),)))),))
WEB6 = Policy(rules=(Rule(index=0, action=Drop(), family=Family.IP6, proto=6, matches=(
    AddrMatch("dst", (ip_network("2001:db8::/32"),)), FlagsMatch(0x02, 0x10),
    PayloadMatch(1, b"XY"))),))
EDGE = compile_text("""
define lan = 192.168.50.0/24
drop udp dst 192.168.0.79 dport 12345
drop tcp dst $lan flags syn,rst
drop tcp dst $lan payload[1] == "X"
count icmp
redirect udp dst 192.168.64.2 dport 8080 to 10.0.1.2:8083
pass tcp dport { 80, 443, 8000-8080 }
drop src { 10.0.0.0/8, 172.16.0.0/12, 2001:db8::/32 } ttl 1-10 len 100-1500
drop icmp6 icmp-type echo-request
""").require()


def a(text: str) -> bytes:
    return ip_address(text).packed


# ------------------------------------------------------------ builders against scapy

def test_ipv4_tcp_matches_scapy() -> None:
    ours = fb.ipv4(a("10.0.0.1"), a("192.168.0.79"), 6, fb.tcp(
        a("10.0.0.1"), a("192.168.0.79"), 1234, 80, 0x12, b"hello", seq=1, ack=2,
        options=b"\x02\x04\x05\xb4"), ttl=9, ident=7, df=True, options=b"\x01\x01\x01\x00")
    theirs = IP(src="10.0.0.1", dst="192.168.0.79", ttl=9, id=7, flags="DF",
                options=b"\x01\x01\x01\x00") / TCP(
        sport=1234, dport=80, flags=0x12, seq=1, ack=2, window=65535,
        options=[("MSS", 1460)]) / b"hello"
    assert ours == bytes(theirs)


def test_ipv4_udp_icmp_fragment_match_scapy() -> None:
    s, d = a("1.2.3.4"), a("5.6.7.8")
    udp = IP(src="1.2.3.4", dst="5.6.7.8", id=0, flags="MF", frag=3) / UDP(sport=53, dport=9) / b"x"
    assert fb.ipv4(s, d, 17, fb.udp(s, d, 53, 9, b"x"), mf=True, frag_offset=3) == bytes(udp)
    icmp = IP(src="1.2.3.4", dst="5.6.7.8", id=0) / ICMP(type=8, id=1, seq=2) / b"ping"
    ours = fb.ipv4(s, d, 1, fb.icmp(8, 0, b"\0\x01\0\x02", b"ping"))
    assert ours == bytes(icmp)


def test_ipv6_matches_scapy() -> None:
    s, d = a("2001:db8::1"), a("2001:db8::2")
    hop = IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrHopByHop(
        options=[PadN(optdata=b"\0" * 4)]) / UDP(sport=1, dport=2) / b"abc"
    ours = fb.ipv6(s, d, 0, fb.hop_by_hop(17) + fb.udp(s, d, 1, 2, b"abc"))
    assert ours == bytes(hop)
    echo = IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=5) / ICMPv6EchoRequest(
        id=3, seq=4, data=b"hi")
    ours = fb.ipv6(s, d, 58, fb.icmp6(s, d, 128, 0, b"\0\x03\0\x04", b"hi"), hop_limit=5)
    assert ours == bytes(echo)
    frag = IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(
        nh=6, offset=185, m=1, id=9) / (b"\0" * 8)
    ours = fb.ipv6(s, d, 44, fb.ipv6_fragment(6, 185, True, 9) + b"\0" * 8)
    assert ours == bytes(frag)


def test_link_layer_matches_scapy() -> None:
    mac1, mac2 = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
    arp = fb.ethernet(mac1, mac2, fb.ETH_ARP, fb.arp(1, mac2, a("10.0.0.1"), bytes(6),
                                                      a("10.0.0.2")))
    theirs = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / ARP(
        op=1, hwsrc="02:00:00:00:00:01", psrc="10.0.0.1", pdst="10.0.0.2")
    assert arp == bytes(theirs)
    tagged = fb.ethernet(mac1, mac2, fb.ETH_IP4, b"", ((0x88A8, 5), (0x8100, 0x2007)))
    theirs = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=0x88A8) / Dot1AD(
        vlan=5, type=0x8100) / Dot1Q(prio=1, vlan=7, type=0x0800)
    assert tagged == bytes(theirs)


def test_flip_breaks_the_checksum() -> None:
    s, d = a("1.2.3.4"), a("5.6.7.8")
    good = fb.ipv4(s, d, 6, fb.tcp(s, d, 1, 2, 2, b""))
    assert scapy_checksum(good[:20]) == 0 and fb.checksum(good[:20]) == 0
    assert scapy_checksum(fb.ipv4(s, d, 6, b"", flip=1)[:20]) != 0
    segment = fb.tcp(s, d, 1, 2, 2, b"", flip=0x8000)
    assert in4_chksum(6, IP(good), segment) != 0
    assert in4_chksum(6, IP(good), good[20:]) == 0


# ------------------------------------------------------------------- well-formed frames

def check_well_formed(frame: bytes) -> None:
    """Parse in scapy; lengths fit; scapy recomputes the same checksums."""
    pkt = Ether(frame)
    assert pkt.type in (0x0800, 0x86DD), pkt.summary()
    if pkt.type == 0x0800:
        _check_ipv4(pkt, frame)
    else:
        _check_ipv6(pkt, frame[14:])


def _check_ipv4(pkt: Ether, frame: bytes) -> None:
    ip = pkt[IP]
    assert ip.version == 4 and ip.ihl >= 5 and ip.ihl * 4 <= ip.len <= len(frame) - 14
    again = pkt.copy()
    again[IP].chksum = None
    first_fragment = ip.frag == 0
    for layer in (TCP, UDP, ICMP):
        if first_fragment and layer in again and not (layer is UDP and ip[UDP].chksum == 0):
            again[layer].chksum = None
    assert bytes(again) == frame, pkt.show(dump=True)
    if first_fragment and UDP in ip:
        assert ip[UDP].len == ip.len - ip.ihl * 4


def _check_ipv6(pkt: Ether, l3: bytes) -> None:
    ip6 = pkt[IPv6]
    assert ip6.version == 6 and 40 + ip6.plen <= len(l3)
    nh, start = ip6.nh, 40
    if nh == 0:
        nh, start = l3[40], 40 + (l3[41] + 1) * 8
        assert IPv6ExtHdrHopByHop in pkt
    if nh in (6, 17, 58):
        segment = l3[start:40 + ip6.plen]
        assert in6_chksum(nh, ip6, segment) == 0
        if nh == 17:
            assert struct.unpack("!H", segment[4:6])[0] == len(segment)
    assert not ip6.src.startswith("ff") and ip6.src != "::1" and ip6.dst != "::1"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(gen.well_formed_frames(EDGE))
def test_well_formed_frames_parse_with_good_checksums(frame: bytes) -> None:
    check_well_formed(frame)


@pytest.mark.parametrize("policy", [None, DUT, WEB6, EDGE])
def test_sampled_well_formed_frames_parse(policy: Policy | None) -> None:
    frames = gen.sample(policy, 1500, seed=3, malformed=False)
    for frame in frames:
        check_well_formed(frame)
    kinds = Counter(_kind(f) for f in frames)
    assert {"ip4", "ip6"} <= set(kinds), kinds


def test_well_formed_options_hold() -> None:
    mac = bytes.fromhex("0a0b0c0d0e0f")
    frames = gen.sample(EDGE, 500, malformed=False, fragments=False, eth_dst=mac)
    for frame in frames:
        assert frame[:6] == mac and frame[6:12] == gen.DEFAULT_SRC
        view = _ip4(frame)
        assert view is None or struct.unpack("!H", view[6:8])[0] & 0x3FFF == 0
        assert not (frame[12:14] == b"\x86\xdd" and frame[20] == 44)
    with pytest.raises(ValueError, match="6 bytes"):
        gen.sample(None, 1, eth_src=b"\x01")


# ----------------------------------------------------------------------- reading helpers

def _kind(frame: bytes) -> str:
    if len(frame) < 14:
        return "runt"
    return {b"\x08\x00": "ip4", b"\x86\xdd": "ip6", b"\x08\x06": "arp", b"\x81\x00": "tag",
            b"\x88\xa8": "tag"}.get(frame[12:14], "other")


def _ip4(frame: bytes) -> bytes | None:
    """The L3 bytes of an untagged IPv4 frame with its 20 fixed header bytes."""
    if len(frame) >= 34 and frame[12:14] == b"\x08\x00":
        return frame[14:]
    return None


def _ip4_labels(l3: bytes) -> set[str]:
    version, ihl = l3[0] >> 4, l3[0] & 15
    (total,), (frag,) = struct.unpack("!H", l3[2:4]), struct.unpack("!H", l3[6:8])
    labels = {"version_other"} if version != 4 else set()
    labels |= {"ihl_low"} if ihl < 5 else {"options"} if ihl > 5 else set()
    labels |= {"tl_low"} if 5 <= ihl and total < ihl * 4 else set()
    labels |= {"tl_high"} if total > len(l3) else {"padded"} if total < len(l3) else set()
    labels |= {"later_fragment"} if frag & 0x1FFF else {"first_fragment"} if frag & 0x2000 \
        else set()
    if ihl >= 5 and len(l3) >= ihl * 4 and fb.checksum(l3[:ihl * 4]) != 0:
        labels.add("bad_ip_checksum")
    tp = l3[ihl * 4:] if ihl >= 5 else b""
    if l3[9] == 6 and len(tp) >= 13 and not frag & 0x1FFF and tp[12] >> 4 < 5:
        labels.add("doff_low")
    return labels


def _dut_labels(l3: bytes) -> set[str]:
    """Where an IPv4 frame stands against ``drop udp dst 192.168.0.79 dport 12345``."""
    ihl, frag = l3[0] & 15, struct.unpack("!H", l3[6:8])[0] & 0x1FFF
    tp = l3[ihl * 4:]
    if l3[9] != 17 or len(tp) < 4 or ihl < 5:
        return set()
    dst, dport = IPv4Address(l3[16:20]), struct.unpack("!H", tp[2:4])[0]
    if frag:
        return {"later_fragment_12345"} if dport == 12345 else set()
    hit_dst, hit_port = dst == IPv4Address("192.168.0.79"), dport == 12345
    near_dst = dst in (IPv4Address("192.168.0.78"), IPv4Address("192.168.0.80"))
    return {label for label, holds in (
        ("hit", hit_dst and hit_port), ("dst_off_by_one", near_dst and hit_port),
        ("port_off_by_one", hit_dst and dport in (12344, 12346))) if holds}


def _link_labels(frame: bytes) -> set[str]:
    labels = {_kind(frame)}
    if labels == {"tag"} and frame[16:18] == b"\x81\x00":
        labels.add("double_tag")
    if frame[12:14] == b"\x08\x00" and 14 < len(frame) < 34:
        labels.add("truncated_ip_header")
    if frame[12:14] == b"\x86\xdd" and len(frame) >= 54:
        labels |= {"hop_by_hop"} if frame[20] == 0 else {"v6_fragment"} if frame[20] == 44 \
            else set()
    return labels


def _labels(frame: bytes) -> set[str]:
    l3 = _ip4(frame)
    return _link_labels(frame) | (_ip4_labels(l3) | _dut_labels(l3) if l3 else set())


# ------------------------------------------------------------------------ bias and mix

def test_sample_is_biased_to_the_policy() -> None:
    seen = Counter(label for f in gen.sample(DUT, 2000, seed=0) for label in _labels(f))
    print(dict(seen))
    assert seen["hit"] >= 5
    for label in ("dst_off_by_one", "port_off_by_one", "later_fragment_12345",
                  "truncated_ip_header", "runt", "tag", "double_tag"):
        assert seen[label] >= 1, (label, seen)


def test_malformed_mix_has_every_kind() -> None:
    seen = Counter(label for f in gen.sample(EDGE, 4000, seed=1) for label in _labels(f))
    print(dict(seen))
    for label in ("ip4", "ip6", "arp", "runt", "tag", "double_tag", "version_other",
                  "ihl_low", "options", "tl_low", "tl_high", "padded", "later_fragment",
                  "first_fragment", "bad_ip_checksum", "doff_low", "hop_by_hop",
                  "v6_fragment", "truncated_ip_header"):
        assert seen[label] >= 1, (label, seen)


def _v6_tcp(frame: bytes) -> tuple[IPv6Address, int, bytes] | None:
    """(dst, flags, payload) of an untagged, untruncated IPv6/TCP frame."""
    l3 = frame[14:]
    if frame[12:14] != b"\x86\xdd" or len(l3) < 60 or l3[6] != 6:
        return None
    end = 40 + struct.unpack("!H", l3[4:6])[0]
    offset = 40 + (l3[52] >> 4) * 4
    if end > len(l3) or l3[52] >> 4 < 5 or offset > end:
        return None
    return IPv6Address(l3[24:40]), l3[53], l3[offset:end]


def test_payload_flags_and_prefix_edges_are_hit_and_missed() -> None:
    views = [v for f in gen.sample(WEB6, 3000, seed=2) if (v := _v6_tcp(f))]
    payloads = Counter(p[1:3] for _, _, p in views if len(p) >= 3)
    assert payloads[b"XY"] >= 5
    assert any(p[1:] == b"X" for _, _, p in views)  # one byte short
    assert sum(n for data, n in payloads.items()
               if bin(int.from_bytes(data, "big") ^ 0x5859).count("1") == 1) >= 1
    flags = Counter(f & 0x12 for _, f, _ in views)
    assert flags[0x02] and flags[0x12] and flags[0x00]
    dsts = {d for d, _, _ in views}
    for edge in ("2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
                 "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"):
        assert IPv6Address(edge) in dsts, edge


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(gen.frames(EDGE))
def test_strategy_frames_are_bytes(frame: bytes) -> None:
    assert isinstance(frame, bytes)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies())
def test_any_policy_gives_frames(text: str) -> None:
    frames = gen.sample(compile_text(text).require(), 300, seed=4)
    assert all(isinstance(f, bytes) for f in frames)
    for frame in gen.sample(compile_text(text).require(), 100, seed=4, malformed=False):
        check_well_formed(frame)


def test_sample_is_deterministic_and_fast() -> None:
    start = time.perf_counter()
    first = gen.sample(EDGE, 10_000, seed=5)
    print(f"sample(EDGE, 10000): {time.perf_counter() - start:.3f} s")
    assert first == gen.sample(EDGE, 10_000, seed=5)
    assert first != gen.sample(EDGE, 10_000, seed=6)
    assert gen.sample(None, 5, seed=5) == gen.sample(None, 5, seed=5)


# --------------------------------------------------------------------------- constants

def test_constants_of_one_rule() -> None:
    c = gen.constants(DUT)
    assert c.v4 == tuple(IPv4Address(f"192.168.0.{i}") for i in (78, 79, 80))
    assert c.ports == (12344, 12345, 12346) and 17 in c.protos
    assert [(aim.versions, aim.proto) for aim in c.aims] == [((4,), 17)]
    assert gen.constants(None) == gen.Constants()


def test_constants_edges_are_clamped_and_complete() -> None:
    rule = Rule(index=0, action=Redirect(ip_address("10.0.1.2"), 8083), family=Family.IP,
                proto=6, matches=(
                    AddrMatch("src", (ip_network("0.0.0.0/0"), ip_network("::/127"))),
                    IntMatch("dport", ((0, 1023), (65535, 65535))),
                    IntMatch("ttl", ((1, 10),)), FlagsMatch(0x02, 0x10),
                    PayloadMatch(3, b"\xff")))
    c = gen.constants(Policy(rules=(rule,)))
    assert c.ports == (0, 1023, 1024, 8083, 65534, 65535)
    assert c.ttls == (0, 1, 10, 11)
    assert set(c.v4) == {IPv4Address("0.0.0.0"), IPv4Address("255.255.255.255"),
                         IPv4Address("128.0.0.0"), IPv4Address("10.0.1.2")}
    assert c.v6 == (IPv6Address("::"), IPv6Address("::1"), IPv6Address("::2"))
    assert c.flag_masks == (0x00, 0x02, 0x12, 0xED, 0xEF)
    assert c.payloads == ((3, b"\xff"),) and 6 in c.protos


def test_constants_of_a_large_set_are_sampled() -> None:
    nets = tuple(ip_network(f"10.{i // 256}.{i % 256}.0/32") for i in range(5000))
    c = gen.constants(Policy(rules=(Rule(index=0, action=Drop(), family=Family.IP4,
                                         proto=None, matches=(AddrMatch("dst", nets),)),)))
    assert len(c.v4) <= 3 * gen.MAX_ENTRIES
    assert nets[0].network_address in c.v4 and nets[-1].network_address in c.v4
