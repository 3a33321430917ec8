"""The labs the kernel runners stand on: ``pfc.kernel.netns`` (namespace + veth pair) and
``pfc.kernel.iplab`` (IP-input setup, NFLOG observer, markers, what PREROUTING / INPUT see),
and the nft runner's observer (``pfc.backends.nft.run``): every check here can fail when the lab
or a view is wrong."""

from __future__ import annotations

import socket

import pytest

from pfc.backends.nft import run as nftrun
from pfc.kernel import iplab, netns
from pfc.oracle import framebuild as fb
from pfc.oracle import gen, packets

SRC, DST = bytes([198, 51, 100, 1]), bytes([203, 0, 113, 9])


@pytest.fixture(scope="module")
def root() -> None:
    reason = netns.missing_privileges()
    if reason:
        pytest.skip(reason)


def _udp4(**kw) -> bytes:
    return fb.ipv4(SRC, DST, 17, fb.udp(SRC, DST, 1000, 53, b"payload!"), **kw)


# --------------------------------------------------------------------- pure functions

def test_marker_carries_its_sequence_number() -> None:
    frame = iplab.ip_marker(0x1122334455, b"\x02" * 6)
    assert frame[6:12] == iplab.MARK_MAC
    assert packets.ip_input_view(frame) == frame  # a packet IP input accepts
    assert iplab.marker_seq(frame[14:]) == 0x1122334455
    assert iplab.marker_seq(frame[14:30]) is None


@pytest.mark.parametrize("packet,expected", [
    (_udp4(), True),
    (_udp4(mf=True), False),  # a first fragment: reassembled before INPUT
    (_udp4(frag_offset=3), False),
    (_udp4(options=b"\x01\x01\x01\x01"), True),  # NOPs
    (_udp4(options=b"\x94\x04\x00\x00"), True),  # Router Alert
    (_udp4(options=b"\x07\x07\x04\x00\x00\x00\x00\x00"), False),  # record route
    (fb.ipv4(bytes([224, 0, 0, 5]), DST, 17, b"12345678"), False),  # multicast source
    (fb.ipv4(SRC, bytes([224, 0, 0, 1]), 17, b"12345678"), True),  # all hosts
    (fb.ipv4(SRC, bytes([224, 0, 0, 2]), 17, b"12345678"), False),  # not joined
    (fb.ipv4(bytes(4), DST, 17, b"12345678"), False),  # 0.0.0.0 source, unicast dst
    (fb.ipv4(bytes(4), b"\xff" * 4, 17, b"12345678"), True),
    (fb.ipv6(bytes.fromhex("20010db8" + "00" * 11 + "01"),
             bytes.fromhex("fe80" + "00" * 13 + "01"), 17, b"12345678"), False),
    (fb.ipv6(bytes.fromhex("20010db8" + "00" * 11 + "01"),
             bytes.fromhex("ff02" + "00" * 13 + "01"), 17, b"12345678"), True),
])
def test_delivered_follows_the_measured_rules(packet: bytes, expected: bool) -> None:
    assert iplab.delivered(packet) is expected


def test_hook_view_is_ip_input_view_then_local_delivery() -> None:
    good = fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, _udp4() + b"\0" * 6)
    assert iplab.hook_view(False, good) == good[:-6]  # trimmed to the total length
    fragment = fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, _udp4(frag_offset=1))
    assert iplab.hook_view(False, fragment) == fragment
    assert iplab.hook_view(True, fragment) is None
    arp = fb.ethernet(b"\xff" * 6, b"\x04" * 6, 0x0806, fb.arp(1, b"\x04" * 6, SRC,
                                                               bytes(6), DST))
    assert iplab.hook_view(False, arp) is None


def test_wire_puts_an_outer_tag_back_on_inner_tagged_views() -> None:
    """A double-tagged frame reaches netdev ingress with its inner tag: injecting that
    view as it is would lose the inner tag too, so the runner adds a priority tag."""
    inner = fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, _udp4(), tags=[(0x8100, 7)])
    sent = nftrun.wire(b"\x0a" * 6, inner)
    assert sent[:12] == b"\x0a" * 6 + iplab.SEND_MAC
    assert sent[12:16] == nftrun.PRIORITY_TAG and sent[16:] == inner[12:]
    plain = fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, _udp4())
    assert nftrun.wire(b"\x0a" * 6, plain)[12:] == plain[12:]


def test_pair_checks_every_frame_reached_the_hook() -> None:
    frames = [b"\0" * 14 + b"a", b"\0" * 14 + b"b"]
    assert nftrun.pair(frames, [("in", b"a"), ("pass", b"A"), ("in", b"b")]) == [b"A", None]
    with pytest.raises(RuntimeError, match="never reached"):
        nftrun.pair(frames, [("in", b"a")])
    with pytest.raises(RuntimeError, match="saw"):
        nftrun.pair(frames, [("in", b"a"), ("in", b"c")])


# --------------------------------------------------------------------------- kernel

@pytest.mark.kernel
def test_lab_is_private_and_removed(root) -> None:
    before = set(netns._netns.listnetns())
    with netns.lab() as lab:
        assert lab.name in netns._netns.listnetns()
        assert lab.dut_mac != lab.inj_mac and len(lab.dut_mac) == 6
    assert set(netns._netns.listnetns()) == before


@pytest.mark.kernel
def test_configure_makes_every_unicast_address_local(root) -> None:
    from pyroute2 import IPRoute
    with netns.lab() as lab:
        iplab.configure(lab)
        with IPRoute() as ipr:
            for family, dst in ((socket.AF_INET, "203.0.113.9"),
                                (socket.AF_INET6, "2001:db8::77")):
                route = ipr.route("get", family=family, dst=dst)[0]
                assert route["type"] == 2, dst  # RTN_LOCAL
            mtu = ipr.get_links(ipr.link_lookup(ifname=lab.dut)[0])[0].get_attr("IFLA_MTU")
        assert mtu == iplab.MAX_MTU
        with open(f"/proc/sys/net/ipv4/conf/{lab.dut}/rp_filter") as f:
            assert f.read().strip() == "0"


def _seen_by_input_hook(frames: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    reach, stop = [], []
    for f in frames:
        pre = iplab.hook_view(False, f)
        if pre is not None:
            (reach if iplab.delivered(pre[14:]) else stop).append(pre)
    return reach, stop


@pytest.mark.kernel
@pytest.mark.parametrize("hook", ["ingress", "prerouting", "input"])
def test_views_predict_what_each_nft_hook_sees(root, hook: str) -> None:
    """The runner checks every injected frame against the NFLOG message of the hook's
    first chain: a frame the view keeps but the hook never sees (or sees other bytes
    of) is an error. A count-everything ruleset passes all of them."""
    from pfc.backends.nft.backend import view
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_text as ct
    art, diags = build_artifact(ct("count udp\ncount\n", "t.pf"), "nft", hook=hook,
                                dev="dut")
    assert art is not None, diags
    frames = [v for f in gen.sample(art.policy, 3000, seed=21)
              if (v := view(hook, f)) is not None]
    with nftrun.session():
        seen = nftrun.run(art, frames)
    assert len(frames) > 800
    assert all(v.value == "pass" for v in seen.verdicts)
    assert seen.counters[1] == (len(frames), sum(len(f) - 14 for f in frames))


@pytest.mark.kernel
def test_frames_the_input_view_leaves_out_never_reach_input(root) -> None:
    """Frames PREROUTING sees but ``delivered`` says INPUT does not: none is logged by
    the input hook's first chain."""
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_text as ct
    art, _ = build_artifact(ct("count\n", "t.pf"), "nft", hook="input")
    _, stop = _seen_by_input_hook(gen.sample(art.policy, 3000, seed=22))
    assert len(stop) > 100
    with nftrun.session() as s:
        s.load(art)
        for frame in stop:
            s.inj.send(nftrun.wire(s.lab.dut_mac, frame))
        s.seq += 1
        s.inj.send(iplab.ip_marker(s.seq, s.lab.dut_mac))
        logged = s._until_marker()
    assert logged == []


@pytest.mark.kernel
def test_nflog_at_netdev_ingress_logs_from_the_network_header(root) -> None:
    """Measured: NFLOG in the netdev family carries the packet from ``skb->data``,
    i.e. without the Ethernet header (and without the outer tag the kernel removed)."""
    from pfc.build import build_artifact
    from pfc.frontend.pipeline import compile_text as ct
    art, _ = build_artifact(ct("pass\n", "t.pf"), "nft", dev="dut")
    tagged = fb.ethernet(b"\x02" * 6, b"\x04" * 6, fb.ETH_IP4, _udp4(), tags=[(0x8100, 5)])
    arp = fb.ethernet(b"\xff" * 6, b"\x04" * 6, 0x0806, fb.arp(1, b"\x04" * 6, SRC,
                                                               bytes(6), DST))
    with nftrun.session() as s:
        s.load(art)
        for frame in (tagged, arp):
            s.inj.send(s.lab.dut_mac + iplab.SEND_MAC + frame[12:])
        s.seq += 1
        s.inj.send(iplab.ip_marker(s.seq, s.lab.dut_mac))
        logged = s._until_marker()
    assert logged == [("in", _udp4()), ("pass", _udp4()), ("in", arp[14:]), ("pass", arp[14:])]
