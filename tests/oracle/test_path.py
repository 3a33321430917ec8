"""The path interpreter (pfc.oracle.path): hooks in order, routing, conntrack across
hooks, NAT both ways, reject replies (semantics.md "The path of a packet")."""

from __future__ import annotations

import ipaddress

import pytest

from pfc.frontend import ir
from pfc.oracle import framebuild as fb
from pfc.oracle.packets import read_frame
from pfc.oracle.path.host import host_of
from pfc.oracle.path.walk import Walker
from tests.oracle.path_build import rule, ruleset

A = ipaddress.ip_address
SYN, ACK, RST = 0x02, 0x10, 0x04


def router():
    """examples/home-router.pf's meaning, built by hand."""
    return ruleset({
        "nat prerouting": [rule(ir.Nat("dnat", A("10.0.0.2"), 80), "tcp", iif="eth0",
                                dport=8080)],
        "input": [rule("pass", iif="lo"), rule("pass", ct_state=("established", "related")),
                  rule("pass", "tcp", iif="eth1", dport=22),
                  rule("pass", "udp", iif="eth1", dport=53),
                  rule("pass", "tcp", iif="eth1", dport=53),
                  rule("pass", "icmp", iif="eth1")],
        "forward": [rule("pass", ct_state=("established", "related")),
                    rule("pass", iif="eth1", oif="eth0"),
                    rule("pass", ct_status=("dnat",))],
        "nat postrouting": [rule(ir.Nat("masquerade"), oif="eth0")],
        "output": [],
    }, interfaces=[("eth0", ["203.0.113.2/24"], "203.0.113.1"),
                   ("eth1", ["10.0.0.1/24"], None)],
        defaults={"input": "drop", "forward": "drop"})


def eth_tcp(src, dst, sport, dport, flags, seq=0, ack=0, payload=b""):
    s, d = A(src).packed, A(dst).packed
    return fb.ethernet(bytes(6), bytes((2, 9, 9, 9, 9, 9)), 0x0800,
                       fb.ipv4(s, d, 6, fb.tcp(s, d, sport, dport, flags, payload,
                                                seq=seq, ack=ack)))


def addrs(frame):
    view = read_frame(frame, skip_tag=False)
    l3, l4 = view.l3, view.l4
    return (str(ipaddress.ip_address(frame[l3 + 12:l3 + 16])),
            int.from_bytes(frame[l4:l4 + 2], "big"),
            str(ipaddress.ip_address(frame[l3 + 16:l3 + 20])),
            int.from_bytes(frame[l4 + 2:l4 + 4], "big"))


def checksums_ok(frame):
    from pfc.oracle.conntrack import _checksum_ok
    view = read_frame(frame, skip_tag=False)
    from pfc.oracle.packets import ones_sum
    header = frame[view.l3:view.l3 + 20]
    return ones_sum(header) == 0xFFFF and _checksum_ok(view)


def test_port_forward_both_ways():
    walker = Walker(router())
    syn = walker.receive(eth_tcp("198.51.100.7", "203.0.113.2", 40000, 8080, SYN), "eth0")
    assert syn.fate == "forwarded" and syn.oif == "eth1"
    assert addrs(syn.frame) == ("198.51.100.7", 40000, "10.0.0.2", 80)
    assert checksums_ok(syn.frame)
    assert read_frame(syn.frame, skip_tag=False).data[14 + 8] == 63  # TTL decremented
    reply = walker.receive(eth_tcp("10.0.0.2", "198.51.100.7", 80, 40000, SYN | ACK), "eth1")
    assert reply.fate == "forwarded" and reply.oif == "eth0"
    assert addrs(reply.frame) == ("203.0.113.2", 8080, "198.51.100.7", 40000)
    assert checksums_ok(reply.frame)
    forward = walker.ruleset.blocks("forward")[0].rules
    assert _decided(syn, "forward") == forward[2].index  # ct status dnat
    assert _decided(reply, "forward") == forward[0].index  # established


def _decided(journey, block):
    return next(s for s in journey.steps if s.block == block).outcome.rule


def test_masquerade_and_return():
    walker = Walker(router())
    out = walker.receive(eth_tcp("10.0.0.5", "192.0.2.80", 5555, 443, SYN), "eth1")
    assert out.fate == "forwarded" and out.oif == "eth0"
    assert addrs(out.frame) == ("203.0.113.2", 5555, "192.0.2.80", 443)
    back = walker.receive(eth_tcp("192.0.2.80", "203.0.113.2", 443, 5555, SYN | ACK), "eth0")
    assert back.fate == "forwarded" and back.oif == "eth1"
    assert addrs(back.frame) == ("192.0.2.80", 443, "10.0.0.5", 5555)


def test_unsolicited_wan_traffic_is_dropped_in_forward_and_input():
    walker = Walker(router())
    j = walker.receive(eth_tcp("198.51.100.7", "10.0.0.5", 1, 22, SYN), "eth0")
    assert (j.fate, j.where) == ("dropped", "forward")
    j = walker.receive(eth_tcp("198.51.100.7", "203.0.113.2", 1, 22, SYN), "eth0")
    assert (j.fate, j.where) == ("dropped", "input")
    j = walker.receive(eth_tcp("10.0.0.9", "10.0.0.1", 1, 22, SYN), "eth1")
    assert j.fate == "delivered"


def test_reject_reset_goes_through_output():
    rs = ruleset({"input": [rule(ir.Reject("tcp-reset"), "tcp")],
                  "output": [rule("count", ct_state=("related",))]},
                 interfaces=[("eth0", ["192.0.2.10/24"], None)])
    walker = Walker(rs)
    j = walker.receive(eth_tcp("192.0.2.99", "192.0.2.10", 3333, 25, SYN, seq=1000), "eth0")
    assert j.fate == "rejected" and j.where == "input"
    [answer] = j.replies
    assert answer.fate == "sent" and answer.oif == "eth0"
    assert addrs(answer.frame) == ("192.0.2.10", 25, "192.0.2.99", 3333)
    view = read_frame(answer.frame, skip_tag=False)
    tcp = answer.frame[view.l4:]
    assert tcp[13] == RST | ACK and int.from_bytes(tcp[8:12], "big") == 1001
    assert checksums_ok(answer.frame)
    assert answer.steps[-1].outcome.counted  # output saw it as related


def test_icmp_unreachable_quotes_the_packet():
    rs = ruleset({"input": [rule(ir.Reject("admin-prohibited"))]},
                 interfaces=[("eth0", ["192.0.2.10/24"], None)])
    walker = Walker(rs)
    frame = eth_tcp("192.0.2.99", "192.0.2.10", 3333, 25, SYN)
    j = walker.receive(frame, "eth0")
    [answer] = j.replies
    packet = answer.frame[14:]
    assert packet[9] == 1 and packet[20] == 3 and packet[21] == 13
    assert packet[28:] == frame[14:]
    assert packet[12:16] == A("192.0.2.10").packed


@pytest.mark.parametrize("kind,proto,address,code", [
    ("host-prohibited", "ip", "192.0.2.99", 10), ("net-prohibited", "ip", "192.0.2.99", 9),
    ("proto-unreachable", "ip", "192.0.2.99", 2), ("policy-fail", "ip6", "2001:db8::99", 5),
    ("reject-route", "ip6", "2001:db8::99", 6)])
def test_a_reply_of_one_family_has_its_code(kind, proto, address, code):
    rs = ruleset({"input": [rule(ir.Reject(kind), proto)]},
                 interfaces=[("eth0", ["192.0.2.10/24", "2001:db8::10/64"], None)])
    if proto == "ip":
        frame = eth_tcp(address, "192.0.2.10", 3333, 25, SYN)
    else:
        s, d = A(address).packed, A("2001:db8::10").packed
        frame = fb.ethernet(bytes(6), bytes((2, 9, 9, 9, 9, 9)), 0x86DD,
                            fb.ipv6(s, d, 6, fb.tcp(s, d, 3333, 25, SYN, b"")))
    [answer] = Walker(rs).receive(frame, "eth0").replies
    packet = answer.frame[14:]
    at = 20 if proto == "ip" else 40
    assert packet[at:at + 2] == bytes((3 if proto == "ip" else 1, code))


def test_no_icmp_reply_to_a_broadcast_nor_from_loopback_out_of_another_device():
    """icmp_send answers no packet for a broadcast address; a packet the host sent to
    127.0.0.3 from a foreign source would be answered from 127.0.0.3, which routing
    does not let out of eth0 (measured on Linux 6.18 by test_verify_firewall)."""
    rs = ruleset({"input": [rule(ir.Reject("admin-prohibited"), "tcp")]},
                 interfaces=[("eth0", ["192.0.2.10/24"], "192.0.2.1")])
    walker = Walker(rs)
    for dst in ("255.255.255.255", "192.0.2.255"):
        j = walker.receive(eth_tcp("192.0.2.99", dst, 3333, 25, SYN), "eth0")
        assert (j.fate, j.replies) == ("rejected", []), dst
    j = walker.receive(eth_tcp("192.0.2.99", "192.0.2.10", 3333, 25, SYN), "eth0")
    assert j.fate == "rejected" and len(j.replies) == 1
    j = walker.send(eth_tcp("203.0.113.9", "127.0.0.3", 3333, 25, SYN)[14:])
    assert (j.fate, j.where, j.replies) == ("rejected", "input", [])


def test_no_reply_to_a_reset():
    rs = ruleset({"input": [rule(ir.Reject("tcp-reset"), "tcp")]},
                 interfaces=[("eth0", ["192.0.2.10/24"], None)])
    j = Walker(rs).receive(eth_tcp("192.0.2.99", "192.0.2.10", 1, 2, RST), "eth0")
    assert j.fate == "rejected" and j.replies == []


def test_host_model_invents_interfaces_rules_name():
    rs = ruleset({"input": [rule("pass", iif="wan0")]})
    host = host_of(rs)
    assert [p.name for p in host.ports] == ["lo", "wan0"]
    assert not host.forwards


def eth_udp(src, dst, sport, dport, iface_mac=bytes(6)):
    s, d = A(src).packed, A(dst).packed
    return fb.ethernet(iface_mac, bytes((2, 9, 9, 9, 9, 9)), 0x0800,
                       fb.ipv4(s, d, 17, fb.udp(s, d, sport, dport, b"x")))


def test_pass_with_a_limit_passes_within_the_rate():
    rs = ruleset({"input": [rule("pass", "udp", dport=7, limit=(1, "minute", 2))]},
                 interfaces=[("eth0", ["192.0.2.10/24"], None)], defaults={"input": "drop"})
    walker = Walker(rs)
    fates = [walker.receive(eth_udp("192.0.2.9", "192.0.2.10", 1000 + i, 7), "eth0").fate
             for i in range(4)]
    assert fates == ["delivered", "delivered", "dropped", "dropped"]


def test_mark_set_in_one_block_is_seen_by_the_next():
    rs = ruleset({"prerouting": [rule(ir.Mark(7), "udp")],
                  "input": [rule("drop", mark=7)]},
                 interfaces=[("eth0", ["192.0.2.10/24"], None)])
    j = Walker(rs).receive(eth_udp("192.0.2.9", "192.0.2.10", 1, 2), "eth0")
    assert (j.fate, j.where) == ("dropped", "input")


def test_notrack_makes_the_packet_untracked():
    rs = ruleset({"raw prerouting": [rule(ir.Notrack(), "udp", dport=53)],
                  "input": [rule("pass", ct_state=("untracked",))]},
                 interfaces=[("eth0", ["192.0.2.10/24"], None)], defaults={"input": "drop"})
    walker = Walker(rs)
    assert walker.receive(eth_udp("192.0.2.9", "192.0.2.10", 1, 53), "eth0").fate == \
        "delivered"
    assert walker.receive(eth_udp("192.0.2.9", "192.0.2.10", 1, 54), "eth0").fate == \
        "dropped"


def test_a_host_that_does_not_forward_drops_by_routing():
    rs = ruleset({"input": []}, interfaces=[("eth0", ["192.0.2.10/24"], "192.0.2.1")])
    j = Walker(rs).receive(eth_udp("192.0.2.9", "198.51.100.1", 1, 2), "eth0")
    assert j.fate == "unrouted" and not j.steps


def test_sent_packets_meet_output_then_postrouting_and_loop_back_on_lo():
    rs = ruleset({"output": [rule("count", "udp")], "postrouting": [rule("count", "udp")],
                  "input": [rule("pass", iif="lo")]},
                 interfaces=[("eth0", ["192.0.2.10/24"], "192.0.2.1")],
                 defaults={"input": "drop"})
    walker = Walker(rs)
    packet = eth_udp("192.0.2.10", "198.51.100.1", 1, 2)[14:]
    out = walker.send(packet)
    assert (out.fate, out.oif) == ("sent", "eth0")
    assert [s.block for s in out.steps] == ["output", "postrouting"]
    local = walker.send(eth_udp("192.0.2.10", "192.0.2.10", 1, 2)[14:])
    assert local.fate == "delivered"
    assert [s.block for s in local.steps] == ["output", "postrouting", "input"]


def test_ingress_reject_goes_straight_back_with_the_netdev_quirks():
    rs = ruleset({"ingress": [rule(ir.Reject("tcp-reset"), "tcp")]})
    frame = eth_tcp("192.0.2.9", "192.0.2.10", 1234, 80, SYN, seq=5) + bytes(6)  # padding
    j = Walker(rs).receive(frame, "eth0")
    assert (j.fate, j.where) == ("rejected", "ingress")
    [back] = j.replies
    assert back.frame[:6] == frame[6:12] and back.frame[6:12] == frame[0:6]
    tcp = back.frame[14 + 20:]
    # nft netdev's reset counts the frame's padding as payload (the skb is not trimmed)
    assert int.from_bytes(tcp[8:12], "big") == 5 + 1 + 6
