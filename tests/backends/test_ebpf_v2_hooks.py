"""Whole firewalls (v2) on real tc hooks, what test runs cannot show: the ``egress``
program attached at a device's clsact egress (``bpf_attach.tc_attach(egress=True)``)
judging the frames the device sends, with ``oif`` resolved from the devices at load;
and ``vlan-id`` at tc ingress, where the kernel has moved the tag into the skb
(``skb->vlan_tci``) before the program runs. Each against the interpreter.
"""

from __future__ import annotations

import errno
import itertools

import pytest

from pfc.backends.ebpf import maps as ebpf_maps
from pfc.build import build_policy
from pfc.frontend import ir
from pfc.kernel import bpf_attach, netns
from pfc.oracle import framebuild as fb
from pfc.oracle.context import Context
from pfc.oracle.interp import evaluate

REASON = netns.missing_privileges()
A4, B4 = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
HANDLE, PRIORITY = 0x7066, 1


def kernel(fn):
    fn = pytest.mark.kernel(fn)
    return pytest.mark.skipif(REASON is not None, reason=REASON or "")(fn)


def rule(n: int, action: ir.Action, *matches: ir.Match, proto: str = "udp") -> ir.Rule:
    number, family = ir.PROTOCOLS[proto]
    return ir.Rule(n, action, family, number, matches, proto_name=proto, line=n)


def dport(n: int) -> ir.IntMatch:
    return ir.IntMatch("dport", ((n, n),))


def udp(lab: netns.Lab, port: int, vlan: int | None = None, out: bool = False) -> bytes:
    seg = fb.udp(A4, B4, 4000, port, b"hello")
    dst, src = (lab.inj_mac, lab.dut_mac) if out else (lab.dut_mac, lab.inj_mac)
    frame = fb.ethernet(dst, src, 0x0800, fb.ipv4(A4, B4, 17, seg))
    if vlan is not None:
        frame = frame[:12] + b"\x81\x00" + vlan.to_bytes(2, "big") + frame[12:]
    return frame


def passed(sender: str, receiver: str, lab: netns.Lab, frames: list[bytes]) -> list[bool]:
    """Each frame sent from ``sender`` (a packet socket), and whether it reached a packet
    socket on ``receiver``, the other end of the veth: a marker frame after each (it
    meets no rule: EtherType 0x88b5) proves the frame before it went through. A frame
    tc drops at egress fails the send (``NET_XMIT_DROP``: ENOBUFS)."""
    rx = netns.packet_socket(receiver)
    tx = netns.Injector(sender)
    out = []
    try:
        for seq, frame in enumerate(frames):
            try:
                tx.send(frame)
            except OSError as exc:
                assert exc.errno == errno.ENOBUFS, exc
            tx.send(netns.marker_frame(b"\xff" * 6, lab.inj_mac, seq))
            got = netns.recv_until_marker(rx, seq, timeout=30)
            out.append(any(g[14:] == frame[14:] for g in got))
    finally:
        rx.close()
        tx.close()
    return out


@kernel
def test_the_egress_program_on_the_real_clsact_egress() -> None:
    """An ``egress`` block on tc: frames a packet socket sends out of the device go
    through it; ``oif`` names (exact, prefix, negated, another device) resolved at
    load; what leaves is what the interpreter passes with ``oif`` = the device."""
    names = (("dut",), ("du*",), ("inj",), ("eth*", "dut"))
    rules = [rule(n + 1, ir.Drop(), dport(100 + n), ir.IfaceMatch("oif", lst, neg))
             for n, (lst, neg) in enumerate(itertools.product(names, (False, True)))]
    block = ir.Policy(tuple(rules), ir.Verdict.PASS, hook=ir.Hook("egress"), source="e.pf")
    art, diags = build_policy(block, "tc", "o", hook="tc-egress")
    assert art is not None and art.meta["tc_attach"] == "egress", diags
    with netns.lab() as lab, netns.one_cpu():
        frames = [udp(lab, 100 + n, out=True) for n in range(len(rules))]
        with ebpf_maps.open_filled(art) as obj:  # pfc_ifaces from this namespace
            bpf_attach.tc_hook_create(lab.dut_index)
            bpf_attach.tc_attach(lab.dut_index, obj.programs[art.meta["program"]].fd,
                                 HANDLE, PRIORITY, replace=False, egress=True)
            assert bpf_attach.tc_query(lab.dut_index, HANDLE, PRIORITY) is None  # not ingress
            assert bpf_attach.tc_query(lab.dut_index, HANDLE, PRIORITY, egress=True)
            got = passed(lab.dut, lab.inj, lab, frames)
    want = [evaluate(block, f, ctx=Context(oif="dut")).verdict is ir.Verdict.PASS
            for f in frames]
    assert got == want and 0 < sum(want) < len(want)


@kernel
def test_vlan_id_in_the_real_tc_hook() -> None:
    """``vlan-id`` at tc ingress: the kernel removed the tag before the program
    (``skb->vlan_tci``); tagged frames with ids in and out of the rules' ranges, and
    untagged ones, against the interpreter on the frame as sent."""
    rules = (rule(1, ir.Drop(), ir.IntMatch("vlan-id", ((5, 10),))),
             rule(2, ir.Drop(), ir.IntMatch("vlan-id", ((100, 100),), True), dport(7)))
    block = ir.Policy(rules, ir.Verdict.PASS, hook=ir.Hook("ingress"), source="v.pf")
    art, diags = build_policy(block, "tc", "o")
    assert art is not None, diags
    with netns.lab() as lab, netns.one_cpu():
        frames = [udp(lab, port, vid) for vid, port in itertools.product(
            (None, 0, 4, 5, 10, 11, 100, 4095), (7, 8))]
        with ebpf_maps.open_filled(art) as obj:
            bpf_attach.tc_hook_create(lab.dut_index)
            bpf_attach.tc_attach(lab.dut_index, obj.programs[art.meta["program"]].fd,
                                 HANDLE, PRIORITY, replace=False)
            got = _received_on_dut(lab, frames)
    want = [evaluate(block, f).verdict is ir.Verdict.PASS for f in frames]
    assert got == want and 0 < sum(want) < len(want)


def _received_on_dut(lab: netns.Lab, frames: list[bytes]) -> list[bool]:
    """Whether each frame injected on ``inj`` got past tc ingress on ``dut``: a packet
    socket bound to IPv4 is served after tc (and sees the frame untagged)."""
    after = netns.packet_socket(lab.dut, 0x0800)
    every = netns.packet_socket(lab.dut)  # served before tc: sees the markers
    inj = netns.Injector(lab.inj)
    out = []
    try:
        for seq, frame in enumerate(frames):
            netns.drain(after)
            inj.send(frame)
            inj.send(netns.marker_frame(lab.dut_mac, lab.inj_mac, seq))
            netns.recv_until_marker(every, seq, timeout=30)
            out.append(any(g[14:] == frame[-len(g[14:]):] for g in netns.drain(after)
                           if len(g) > 14))
    finally:
        for s in (after, every):
            s.close()
        inj.close()
    return out
