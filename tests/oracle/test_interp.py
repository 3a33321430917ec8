"""The reference interpreter on hand-built frames: every match and action, IPv4 and
IPv6, fragments, malformed and truncated headers, VLAN tags, counters, and redirect's
byte-exact rewrite with checksums checked by full recomputation. Policies are built
from pfc.frontend.ir directly."""

from __future__ import annotations

import dataclasses
import ipaddress
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pfc.frontend import ir
from pfc.frontend.ir import Family, Verdict
from pfc.oracle.interp import csum_update, evaluate, redirect_frame, rule_matches, run
from pfc.oracle.packets import counted_bytes, read_frame, strip_outer_vlan
from tests.oracle.test_packets import (
    A4,
    A6,
    ARP,
    B4,
    B6,
    checksum,
    eth,
    hop_by_hop,
    icmp,
    ipv4,
    ipv6,
    tcp,
    tcp4,
    tcp6,
    udp,
    udp4,
    udp6,
)

DROP, PASS, COUNT = ir.Drop(), ir.Pass(), ir.Count()
ANY, IP, IP4, IP6 = Family.ANY, Family.IP, Family.IP4, Family.IP6
TCP, UDP, ICMP, ICMP6 = 6, 17, 1, 58


def R(action=DROP, family=ANY, proto=None, *matches, index=0) -> ir.Rule:  # noqa: N802
    return ir.Rule(index, action, family, proto, tuple(matches))


def policy(*rules: ir.Rule, default=Verdict.PASS) -> ir.Policy:
    return ir.Policy(tuple(dataclasses.replace(r, index=i) for i, r in enumerate(rules)),
                     default)


def nets(*texts: str) -> tuple:
    return tuple(ipaddress.ip_network(t, strict=False) for t in texts)


def src(*texts, neg=False):
    return ir.AddrMatch("src", nets(*texts), neg)


def dst(*texts, neg=False):
    return ir.AddrMatch("dst", nets(*texts), neg)


def num(field, *ranges, neg=False):
    return ir.IntMatch(field, tuple((r, r) if isinstance(r, int) else r for r in ranges), neg)


def holds(rule: ir.Rule, frame: bytes) -> bool:
    return rule_matches(rule, read_frame(frame))


def later_fragment(seg: bytes, proto: int = UDP) -> bytes:
    return eth(0x0800, ipv4(proto, seg, frag=0x2000 | 100))


# --------------------------------------------------------------- gates and protocol

RUNTS = [b"", b"\x01", b"abc", udp4()[:13], eth(0x8100, b"")[:16]]


@pytest.mark.parametrize("frame", RUNTS + [ARP, udp4(), udp6(), bytes(1500)])
def test_drop_alone_matches_every_frame(frame):
    out = evaluate(policy(R(DROP)), frame)
    assert (out.verdict, out.rule, out.frame) == (Verdict.DROP, 0, frame)


def test_default_decides_when_no_terminal_rule_holds():
    out = evaluate(policy(R(DROP, IP4, UDP), default=Verdict.DROP), tcp4())
    assert (out.verdict, out.rule, out.counted) == (Verdict.DROP, None, ())
    assert evaluate(policy(), udp4()).verdict is Verdict.PASS


def test_first_terminal_rule_that_holds_decides():
    p = policy(R(PASS, IP4, TCP), R(DROP, IP, UDP), R(PASS))
    assert (evaluate(p, udp4()).verdict, evaluate(p, udp4()).rule) == (Verdict.DROP, 1)
    assert evaluate(p, tcp4()).rule == 0
    assert evaluate(p, ARP).rule == 2


@pytest.mark.parametrize("family,frames", [
    (IP, [udp4(), udp6(), eth(0x0800, b""), eth(0x86DD, b"x")]),
    (IP4, [udp4(), eth(0x0800, ipv4(17, b"", version=6)), eth(0x0800, b"\x45")]),
    (IP6, [udp6(), eth(0x86DD, ipv6(17, b"", version=4))])])
def test_family_gate_is_the_ethertype(family, frames):
    others = [ARP, *RUNTS, udp4(), udp6(), eth(0x0800, udp4()[14:], ((0x88A8, 1), (0x8100, 2)))]
    for frame in frames:
        assert holds(R(DROP, family), frame)
    for frame in others:
        if frame not in frames:
            assert not holds(R(DROP, family), frame)


def test_tagged_frames_are_read_after_one_tag():
    tagged = eth(0x0800, udp4(dport=53)[14:], ((0x8100, 9),))
    assert holds(R(DROP, IP4, UDP, num("dport", 53)), tagged)
    assert not holds(R(DROP, IP4, UDP, num("dport", 53)),
                     eth(0x0800, udp4(dport=53)[14:], ((0x88A8, 1), (0x8100, 9))))


@pytest.mark.parametrize("frame", [
    later_fragment(tcp(1, 80), TCP), eth(0x0800, ipv4(TCP, tcp(1, 80), ihl=3)),
    eth(0x0800, ipv4(TCP, b"", version=5, total=9999)), eth(0x0800, ipv4(TCP, b"")[:24]),
    eth(0x86DD, ipv6(TCP, b"", version=0, plen=999)), tcp4(), tcp6()])
def test_protocol_keyword_reads_the_raw_protocol_byte(frame):
    assert holds(R(DROP, IP, TCP), frame)
    assert not holds(R(DROP, IP, UDP), frame)


def test_protocol_keyword_needs_the_byte():
    assert not holds(R(DROP, IP4, TCP), tcp4()[:23])
    assert holds(R(DROP, IP4, TCP), tcp4()[:24])
    assert not holds(R(DROP, IP6, TCP), tcp6()[:20])


def test_ipv6_extension_header_hides_the_transport():
    frame = eth(0x86DD, ipv6(0, hop_by_hop(TCP, b"\x01\x04" + bytes(4)) + tcp(1, 80)))
    assert not holds(R(DROP, IP, TCP), frame)
    assert holds(R(DROP, IP6, None, num("proto", 0)), frame)


# -------------------------------------------------------------------------- matches

def test_addresses_prefixes_and_negation():
    frame = udp4()  # 10.0.0.1 -> 192.168.64.2
    assert holds(R(DROP, IP4, None, src("10.0.0.0/8"), dst("192.168.64.2")), frame)
    assert not holds(R(DROP, IP4, None, src("10.0.0.2")), frame)
    assert holds(R(DROP, IP4, None, src("10.0.0.2", neg=True)), frame)
    assert not holds(R(DROP, IP4, None, dst("192.168.64.0/24", neg=True)), frame)
    assert holds(R(DROP, IP4, None, src("0.0.0.0/0")), frame)
    assert holds(R(DROP, IP4, None, dst("192.168.64.3", "192.168.64.2/31")), frame)
    assert not holds(R(DROP, IP4, None, dst("192.168.64.3/32", "192.168.65.0/24")), frame)


def test_mixed_family_lists_use_the_packets_own_entries():
    match = src("10.0.0.1", "2001:db8::1")
    assert holds(R(DROP, IP, None, match), udp4()) and holds(R(DROP, IP, None, match), udp6())
    only6 = src("2001:db8::/32")
    assert not holds(R(DROP, IP, None, only6), udp4())
    assert holds(R(DROP, IP, None, src("2001:db8::/32", neg=True)), udp4())  # present, not in
    assert not holds(R(DROP, IP, None, src("::/0", neg=True)), ARP)  # absent


def test_a_large_address_set():
    rng = random.Random(7)
    members = {ipaddress.IPv4Address(rng.getrandbits(32)) for _ in range(20000)}
    listed = nets(*(f"{a}/32" for a in members), "192.168.64.0/26", "2001:db8::/48")
    rule = R(DROP, IP, None, ir.AddrMatch("dst", listed))
    assert holds(rule, udp4()) and holds(rule, udp6())
    some = sorted(members)[:50]
    for addr in some:
        assert holds(rule, udp4(dst=addr.packed))
    outside = [a for a in (ipaddress.IPv4Address(rng.getrandbits(32)) for _ in range(200))
               if a not in members and a not in ipaddress.ip_network("192.168.64.0/26")]
    assert not any(holds(rule, udp4(dst=a.packed)) for a in outside)


@pytest.mark.parametrize("match,frame,expect", [
    (num("sport", 1234), udp4(), True), (num("sport", (1, 1233)), udp4(), False),
    (num("dport", (50, 60)), udp4(), True), (num("dport", 53, neg=True), udp4(), False),
    (num("dport", 54, neg=True), udp4(), True),
    (num("dport", *range(0, 200, 2)), udp4(dport=52), True),  # many ranges: bisect
    (num("dport", *range(0, 200, 2)), udp4(dport=53), False),
    (num("dport", (60, 70), (50, 55), (52, 58)), udp4(), True),  # unsorted, overlapping
    (num("proto", 17), udp4(), True), (num("proto", (0, 16)), udp4(), False),
    (num("ttl", 64), udp4(), True), (num("ttl", 63, neg=True), udp4(), True),
    (num("len", 33), udp4(), True), (num("len", 53), udp6(), True),
    (num("len", 13), udp6(), False)])
def test_integer_matches(match, frame, expect):
    rule = R(DROP, IP, UDP if match.field in ("sport", "dport") else None, match)
    assert holds(rule, frame) is expect


def test_icmp_type():
    assert holds(R(DROP, IP4, ICMP, num("icmp-type", 8)), eth(0x0800, ipv4(ICMP, icmp(8))))
    assert not holds(R(DROP, IP4, ICMP, num("icmp-type", 0)), eth(0x0800, ipv4(ICMP, icmp(8))))
    echo6 = eth(0x86DD, ipv6(ICMP6, icmp(128)))
    assert holds(R(DROP, IP6, ICMP6, num("icmp-type", (128, 129))), echo6)
    assert not holds(R(DROP, IP6, ICMP6, num("icmp-type", 128)), echo6[:54])


@pytest.mark.parametrize("flags,must,clear,expect", [
    (0x02, 0x02, 0x10, True), (0x12, 0x02, 0x10, False), (0x06, 0x06, 0, True),
    (0x02, 0x06, 0, False), (0x00, 0, 0xFF, True), (0xFF, 0xC0, 0, True)])
def test_tcp_flags(flags, must, clear, expect):
    for frame in (tcp4(flags=flags), tcp6(flags=flags)):
        assert holds(R(DROP, IP, TCP, ir.FlagsMatch(must, clear)), frame) is expect
        assert holds(R(DROP, IP, TCP, ir.FlagsMatch(must, clear, True)), frame) is not expect


def test_frag():
    first = eth(0x0800, ipv4(UDP, udp(1, 53), frag=0x2000))
    later = later_fragment(udp(1, 53))
    whole = eth(0x0800, ipv4(UDP, udp(1, 53), frag=0x4000))
    rule, negated = R(DROP, IP4, None, ir.FragMatch()), R(DROP, IP4, None, ir.FragMatch(True))
    assert holds(rule, first) and holds(rule, later) and not holds(rule, whole)
    assert holds(negated, whole) and not holds(negated, later)
    assert not holds(R(DROP, IP, None, ir.FragMatch(True)), udp6())  # absent on IPv6


def test_payload():
    udp_frame, tcp_frame = udp4(payload=b"hello"), tcp4(payload=b"hello")
    for proto, frame in ((UDP, udp_frame), (TCP, tcp_frame)):
        assert holds(R(DROP, IP, proto, ir.PayloadMatch(1, b"el")), frame)
        assert not holds(R(DROP, IP, proto, ir.PayloadMatch(1, b"eh")), frame)
        assert holds(R(DROP, IP, proto, ir.PayloadMatch(1, b"eh", True)), frame)
        assert not holds(R(DROP, IP, proto, ir.PayloadMatch(4, b"o!", True)), frame)
    with_options = eth(0x0800, ipv4(TCP, tcp(1, 2, 0x18, b"XY", options=bytes(12))))
    assert holds(R(DROP, IP, TCP, ir.PayloadMatch(0, b"XY")), with_options)
    bad_offset = eth(0x0800, ipv4(TCP, tcp(1, 2, 0x18, b"XYZ", doff=4)))
    assert not holds(R(DROP, IP, TCP, ir.PayloadMatch(0, b"\x04", True)), bad_offset)
    assert holds(R(DROP, IP, UDP, ir.PayloadMatch(0, b"X")), udp6(payload=b"X"))
    padded = udp4(payload=b"") + b"X"
    assert holds(R(DROP, IP, UDP, ir.PayloadMatch(0, b"X")), padded)


@pytest.mark.parametrize("frame", [
    later_fragment(udp(1, 53)), udp4()[:35], udp4()[:30], ARP, b"",
    eth(0x0800, ipv4(UDP, udp(1, 53), ihl=4)), eth(0x0800, ipv4(UDP, udp(1, 53), total=99)),
    eth(0x86DD, ipv6(0, hop_by_hop(UDP, b"\x01\x04" + bytes(4)) + udp(1, 53)))])
def test_negation_needs_the_field(frame):
    for match in (num("dport", 53, neg=True), num("sport", 9, neg=True),
                  ir.PayloadMatch(0, b"zz", True)):
        assert not holds(R(DROP, IP, UDP, match), frame)


def test_transport_match_on_another_protocols_packet():
    assert not holds(R(DROP, IP, UDP, num("dport", 80, neg=True)), tcp4(dport=81))
    assert not holds(R(DROP, IP, None, num("dport", 80)), tcp4(dport=80))  # no keyword


# ---------------------------------------------------------------------------- count

def test_count_rules_record_and_go_on():
    p = policy(R(COUNT, IP, UDP), R(COUNT), R(DROP, IP4, UDP), R(COUNT))
    out = evaluate(p, udp4())
    assert (out.verdict, out.rule, out.counted) == (Verdict.DROP, 2, (0, 1))
    assert out.nbytes == len(udp4()) - 14
    out6 = evaluate(p, udp6())
    assert (out6.verdict, out6.rule, out6.counted) == (Verdict.PASS, None, (0, 1, 3))


def test_counters_over_a_run():
    p = policy(R(COUNT, IP, UDP), R(COUNT, IP6), R(DROP, IP4, TCP), R(COUNT, IP, ICMP6),
               R(COUNT))
    tagged = eth(0x0800, udp4()[14:], ((0x8100, 1),))
    frames = [udp4(), udp4() + bytes(20), tagged, udp6(), tcp4(), ARP, b"abc"]
    outcomes, counters = run(p, frames)
    assert [o.rule for o in outcomes] == [None, None, None, None, 2, None, None]
    assert [o.nbytes for o in outcomes] == [len(f) - 14 for f in frames[:2]] + [
        len(tagged) - 18, len(udp6()) - 14, len(tcp4()) - 14, len(ARP) - 14, 0]
    udp_bytes = 3 * (len(udp4()) - 14) + 20 + len(udp6()) - 14
    assert counters == {0: (4, udp_bytes), 1: (1, len(udp6()) - 14), 3: (0, 0),
                        4: (6, udp_bytes + len(ARP) - 14)}
    assert outcomes == [evaluate(p, f) for f in frames]


def test_counted_bytes_is_what_count_adds():
    for frame in (udp4(), ARP, b"ab", eth(0x8100, b"")[:17]):
        assert evaluate(policy(R(COUNT)), frame).nbytes == counted_bytes(read_frame(frame))


# ------------------------------------------------------------------------- redirect

NEW4, NEW6 = ipaddress.IPv4Address("10.0.1.2"), ipaddress.IPv6Address("2001:db8:5::7")


def redirect(address, port=None, family=IP4, proto=UDP, *matches) -> ir.Rule:
    return R(ir.Redirect(address, port), family, proto, *matches)


def v4(proto: int, sport: int, dport: int, payload: bytes = b"data", dst_addr: bytes = B4,
       **kw) -> bytes:
    build = udp if proto == UDP else tcp
    seg = build(sport, dport, payload=payload, src=A4, dst=dst_addr)
    return eth(0x0800, ipv4(proto, seg, dst=dst_addr, **kw))


def v6(proto: int, sport: int, dport: int, payload: bytes = b"data", dst_addr: bytes = B6):
    build = udp if proto == UDP else tcp
    return eth(0x86DD, ipv6(proto, build(sport, dport, payload=payload, src=A6, dst=dst_addr),
                            dst=dst_addr))


def rewrite(rule: ir.Rule, frame: bytes) -> bytes:
    out = evaluate(policy(rule), frame)
    assert (out.verdict, out.rule) == (Verdict.PASS, 0)
    assert out.frame == redirect_frame(read_frame(frame), rule)
    return out.frame


@pytest.mark.parametrize("proto", [UDP, TCP])
def test_redirect_ipv4_is_byte_exact(proto):
    rule = redirect(NEW4, 8083, IP4, proto, dst("192.168.64.2"), num("dport", 8080))
    assert rewrite(rule, v4(proto, 5000, 8080)) == v4(proto, 5000, 8083, dst_addr=NEW4.packed)


@pytest.mark.parametrize("proto", [UDP, TCP])
def test_redirect_ipv6_is_byte_exact(proto):
    rule = redirect(NEW6, 8083, IP6, proto)
    assert rewrite(rule, v6(proto, 5000, 8080)) == v6(proto, 5000, 8083, dst_addr=NEW6.packed)


def test_redirect_without_a_port_keeps_the_port():
    assert rewrite(redirect(NEW4, None), v4(UDP, 1, 2)) == v4(UDP, 1, 2, dst_addr=NEW4.packed)


def test_redirect_without_protocol_fixes_the_packets_l4_checksum():
    rule = redirect(NEW4, None, IP4, None)
    for proto in (UDP, TCP):
        assert rewrite(rule, v4(proto, 1, 2)) == v4(proto, 1, 2, dst_addr=NEW4.packed)
    icmp_frame = eth(0x0800, ipv4(ICMP, icmp(8)))
    assert rewrite(rule, icmp_frame) == eth(0x0800, ipv4(ICMP, icmp(8), dst=NEW4.packed))


def test_redirect_keeps_a_udp_checksum_of_zero():
    frame = eth(0x0800, ipv4(UDP, udp(1, 2, b"x", csum=0)))
    want = eth(0x0800, ipv4(UDP, udp(1, 9, b"x", csum=0), dst=NEW4.packed))
    assert rewrite(redirect(NEW4, 9), frame) == want
    frame6 = eth(0x86DD, ipv6(UDP, udp(1, 2, b"x", csum=0)))
    want6 = eth(0x86DD, ipv6(UDP, udp(1, 9, b"x", csum=0), dst=NEW6.packed))
    assert rewrite(redirect(NEW6, 9, IP6), frame6) == want6


def _payload_for_zero_sum(proto: int) -> bytes:
    """Two payload bytes that make the rewritten segment's checksum come out 0."""
    build = udp if proto == UDP else tcp
    seg = build(1, 9, payload=b"\0\0", src=A4, dst=NEW4.packed, csum=0)
    total = (~checksum(pseudo_for(proto, seg) + seg)) & 0xFFFF  # ones' sum
    word = 0xFFFF - total
    return struct.pack("!H", word)


def pseudo_for(proto: int, seg: bytes) -> bytes:
    return A4 + NEW4.packed + struct.pack("!BBH", 0, proto, len(seg))


def test_redirect_writes_0xffff_for_a_udp_sum_of_zero_and_0_for_tcp():
    for proto, expect in ((UDP, 0xFFFF), (TCP, 0x0000)):
        payload = _payload_for_zero_sum(proto)
        build = udp if proto == UDP else tcp
        seg = build(1, 9, payload=payload, src=A4, dst=NEW4.packed, csum=0)
        assert checksum(pseudo_for(proto, seg) + seg) == 0
        out = rewrite(redirect(NEW4, 9, IP4, proto), v4(proto, 1, 2, payload))
        at = 34 + (6 if proto == UDP else 16)
        assert struct.unpack_from("!H", out, at)[0] == expect


def _ones_diff(a: int, b: int) -> int:
    return (a - b) % 0xFFFF


def test_a_wrong_checksum_stays_wrong_by_the_same_amount():
    for flip in (1, 0x00F0, 0x1234):
        frame = eth(0x0800, ipv4(UDP, udp(1, 2, b"abc", csum=0x1111), flip=flip))
        out = rewrite(redirect(NEW4, 77), frame)
        ip_in, ip_out = frame[14:34], out[14:34]
        assert _ones_diff(checksum(ip_in), 0) == _ones_diff(checksum(ip_out), 0)
        for packet in (frame, out):  # UDP: stored 0x1111, its error carried over
            seg = packet[34:]
            correct = checksum(packet[26:34] + struct.pack("!BBH", 0, UDP, len(seg))
                               + seg[:6] + b"\0\0" + seg[8:])
            if packet is frame:
                before = _ones_diff(0x1111, correct)
            else:
                stored = struct.unpack_from("!H", seg, 6)[0]
                assert _ones_diff(stored, correct) == before


def test_redirect_on_a_tagged_frame_keeps_the_tag():
    inner = v4(UDP, 1, 8080)
    tagged = eth(0x0800, inner[14:], ((0x8100, 42),))
    out = rewrite(redirect(NEW4, 8083), tagged)
    assert out[12:16] == tagged[12:16]
    assert strip_outer_vlan(out) == rewrite(redirect(NEW4, 8083), inner)


def test_redirect_on_a_later_fragment_rewrites_the_ip_header_only():
    frame = later_fragment(udp(1, 8080, b"zz"))
    out = rewrite(redirect(NEW4, 8083), frame)
    assert out[34:] == frame[34:]
    assert out[30:34] == NEW4.packed and checksum(out[14:34]) == 0


def test_redirect_on_a_truncated_segment():
    """Total length 20 (header only): the transport stays readable as bytes leave."""
    frame = eth(0x0800, ipv4(UDP, udp(1, 8080, b"zz"), total=20))
    out = rewrite(redirect(NEW4, 8083), frame[:40])  # UDP checksum bytes missing
    assert out[36:38] == struct.pack("!H", 8083) and out[38:40] == frame[38:40]
    short = rewrite(redirect(NEW4, 8083), frame[:37])  # port half-present: not written
    assert short[34:] == frame[34:37] and short[30:34] == NEW4.packed
    cut = rewrite(redirect(NEW4, 8083), v4(UDP, 1, 8080)[:44])  # total length > frame
    assert cut[34:] == v4(UDP, 1, 8080)[34:44]


def test_redirect_needs_the_destination_address():
    rule = redirect(NEW4, None, IP4, None)
    frame = v4(UDP, 1, 2)
    for cut in range(14, 34):
        out = evaluate(policy(rule), frame[:cut])
        assert (out.rule, out.frame) == (None, frame[:cut])
    assert evaluate(policy(redirect(NEW4, None, IP, None)), udp6()).rule is None


def test_redirect_on_a_malformed_header_rewrites_the_address():
    frame = eth(0x0800, ipv4(UDP, udp(1, 2), version=5, ihl=5))
    out = rewrite(redirect(NEW4, 99, IP4, UDP), frame)
    assert out[30:34] == NEW4.packed and out[34:] == frame[34:]
    assert _ones_diff(checksum(out[14:34]), 0) == _ones_diff(checksum(frame[14:34]), 0)


def test_csum_update_against_full_recomputation():
    rng = random.Random(1624)
    for _ in range(2000):
        words = rng.randrange(1, 40)
        data = bytearray(rng.randbytes(2 * words))
        at, size = 2 * rng.randrange(words), 2 * rng.randrange(1, 3)
        new = rng.randbytes(size)
        old = bytes(data[at:at + size])
        if len(old) != size:
            continue
        before = checksum(bytes(data))
        data[at:at + size] = new
        assert csum_update(before, old, new) == checksum(bytes(data))
    with pytest.raises(ValueError):
        csum_update(0, b"ab", b"abc")


def test_csum_update_on_zero_sums():
    assert csum_update(0xFFFF, b"\0\0", b"\0\0") == 0  # as the kernel's csum_fold
    assert csum_update(0x0000, b"\x12\x34", b"\x12\x34") == 0
    assert csum_update(0x1234, b"", b"") == 0x1234


def test_redirect_matches_scapy_on_random_packets():
    from scapy.layers.inet import IP as SIP
    from scapy.layers.inet import TCP as STCP
    from scapy.layers.inet import UDP as SUDP
    from scapy.layers.inet6 import IPv6 as SIPv6
    from scapy.layers.l2 import Ether

    rng = random.Random(5)
    for _ in range(300):
        six, proto = rng.random() < 0.5, rng.choice((UDP, TCP))
        layer = SUDP if proto == UDP else STCP
        l4 = layer(sport=rng.randrange(65536), dport=rng.randrange(65536))
        if six:
            net = SIPv6(src=str(ipaddress.IPv6Address(rng.randbytes(16))),
                        dst=str(ipaddress.IPv6Address(rng.randbytes(16))))
            new = ipaddress.IPv6Address(rng.randbytes(16))
        else:
            net = SIP(src=str(ipaddress.IPv4Address(rng.randbytes(4))),
                      dst=str(ipaddress.IPv4Address(rng.randbytes(4))), ttl=rng.randrange(256))
            new = ipaddress.IPv4Address(rng.randbytes(4))
        pkt = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / net / l4 \
            / rng.randbytes(rng.randrange(30))
        frame, port = bytes(pkt), rng.randrange(65536)
        rule = redirect(new, port, IP6 if six else IP4, proto)
        want = Ether(frame)
        want[1].dst, want[layer].dport = str(new), port
        for field in (() if six else (want[SIP],)) + (want[layer],):
            del field.chksum
        assert rewrite(rule, frame) == bytes(Ether(bytes(want)))


# ----------------------------------------------------------------- never raises

FIXED = policy(
    R(COUNT), R(COUNT, IP, UDP, num("dport", 53, neg=True)),
    R(DROP, IP, TCP, ir.FlagsMatch(0x02, 0x10), ir.PayloadMatch(0, b"GET")),
    R(DROP, IP4, None, ir.FragMatch(), src("10.0.0.0/8", "2001:db8::/32")),
    R(DROP, IP6, ICMP6, num("icmp-type", (128, 129))),
    R(PASS, IP, None, num("ttl", 1), num("len", (0, 60)), num("proto", 47)),
    redirect(NEW4, 53, IP4, UDP, dst("192.168.64.0/24"), ir.PayloadMatch(2, b"\0")),
    redirect(NEW6, None, IP6, TCP, num("sport", (1, 1023), neg=True)),
    R(DROP, IP4, ICMP, num("icmp-type", 8, neg=True)))
BASES = [udp4(), tcp4(payload=b"GET /"), udp6(), tcp6(), ARP, later_fragment(udp(1, 53)),
         eth(0x0800, ipv4(ICMP, icmp(3))), eth(0x86DD, ipv6(ICMP6, icmp(128))),
         eth(0x0800, udp4()[14:], ((0x8100, 3),)), v4(UDP, 1, 2, b"\0\0\0")]


@st.composite
def mutated_frames(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(0, 4))):
        frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(frame) + 8))
    return bytes(frame[:cut]) + draw(st.binary(max_size=max(0, cut - len(frame))))


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.binary(max_size=120), mutated_frames()))
def test_any_bytes_never_raise(frame):
    out = evaluate(FIXED, frame)
    assert out.rule is None or 0 <= out.rule < len(FIXED.rules)
    assert out.nbytes == counted_bytes(read_frame(frame)) >= 0
    assert len(out.frame) == len(frame)
    if out.frame != frame:
        assert isinstance(FIXED.rules[out.rule].action, ir.Redirect)
    for rule in FIXED.rules:
        rule_matches(rule, read_frame(frame))


V4_NETS = ["10.0.0.0/8", "10.0.0.1", "192.168.64.0/24", "0.0.0.0/0", "192.168.64.2"]
V6_NETS = ["2001:db8::/32", "2001:db8::2", "::/0", "fe80::/10"]
PROTOS = {ANY: [None], IP: [None, TCP, UDP], IP4: [None, TCP, UDP, ICMP],
          IP6: [None, TCP, UDP, ICMP6]}


@st.composite
def _ip_matches(draw, family: Family) -> list[ir.Match]:
    pool = (V4_NETS if family in (IP, IP4) else []) + (V6_NETS if family in (IP, IP6) else [])
    out: list[ir.Match] = []
    for field in draw(st.lists(st.sampled_from(["src", "dst"]), max_size=2, unique=True)):
        chosen = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        out.append(ir.AddrMatch(field, nets(*chosen), draw(st.booleans())))
    for field, top in draw(st.lists(st.sampled_from([("ttl", 255), ("len", 100),
                                                     ("proto", 60)]), max_size=2)):
        lo = draw(st.integers(0, top))
        out.append(num(field, (lo, draw(st.integers(lo, top))), neg=draw(st.booleans())))
    if family is IP4 and draw(st.booleans()):
        out.append(ir.FragMatch(draw(st.booleans())))
    return out


@st.composite
def _transport_matches(draw, proto: int | None) -> list[ir.Match]:
    out: list[ir.Match] = []
    neg = st.booleans()
    if proto in (TCP, UDP):
        for field in draw(st.lists(st.sampled_from(["sport", "dport"]), max_size=2)):
            out.append(num(field, *draw(st.lists(st.integers(0, 100), min_size=1, max_size=9)),
                           neg=draw(neg)))
        if draw(st.booleans()):
            data = draw(st.binary(min_size=1, max_size=3))
            out.append(ir.PayloadMatch(draw(st.integers(0, 6)), data, draw(neg)))
    if proto == TCP and draw(st.booleans()):
        out.append(ir.FlagsMatch(draw(st.integers(0, 255)), draw(st.integers(0, 255)), draw(neg)))
    if proto in (ICMP, ICMP6) and draw(st.booleans()):
        out.append(num("icmp-type", (draw(st.integers(0, 140)), 255), neg=draw(neg)))
    return out


@st.composite
def random_rules(draw) -> ir.Rule:
    family = draw(st.sampled_from([ANY, IP, IP4, IP6]))
    proto = draw(st.sampled_from(PROTOS[family]))
    matches = [] if family is ANY else draw(_ip_matches(family))
    matches += draw(_transport_matches(proto))
    actions = [DROP, PASS, COUNT]
    if family in (IP4, IP6):
        address = NEW4 if family is IP4 else NEW6
        port = draw(st.integers(0, 65535)) if proto in (TCP, UDP) else None
        actions.append(ir.Redirect(address, port))
    return R(draw(st.sampled_from(actions)), family, proto, *matches)


@settings(max_examples=150, deadline=None)
@given(st.lists(random_rules(), max_size=6), st.sampled_from(list(Verdict)),
       st.lists(st.one_of(mutated_frames(), st.binary(max_size=80)), max_size=12))
def test_random_policies_on_random_frames(rules, default, frames):
    """run() never raises, agrees with evaluate() and with rule_matches(): the
    deciding rule is the first terminal one that holds, counted are the count rules
    before it that hold, and only redirect changes bytes."""
    p = policy(*rules, default=default)
    outcomes, counters = run(p, frames)
    assert set(counters) == {r.index for r in p.count_rules}
    for frame, out in zip(frames, outcomes, strict=True):
        assert out == evaluate(p, frame)
        view = read_frame(frame)
        held = [r for r in p.rules if rule_matches(r, view)]
        terminal = [r for r in held if r.terminal]
        decider = terminal[0] if terminal else None
        assert out.rule == (decider.index if decider else None)
        last = decider.index if decider else len(p.rules)
        assert out.counted == tuple(r.index for r in held if not r.terminal and r.index < last)
        if decider is None:
            assert out.verdict is default and out.frame == frame
        elif isinstance(decider.action, ir.Redirect):
            assert out.verdict is Verdict.PASS
            assert out.frame == redirect_frame(view, decider)
        else:
            assert out.frame == frame
            assert out.verdict is (Verdict.DROP if decider.action == DROP else Verdict.PASS)


def test_generated_frames_for_a_policy_never_raise():
    gen = pytest.importorskip("pfc.oracle.gen")
    frames = gen.sample(FIXED, 3000, seed=3)
    outcomes, counters = run(FIXED, frames)
    assert len(outcomes) == 3000 and counters[0][0] == 3000
