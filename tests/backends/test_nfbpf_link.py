"""Target ``nfbpf`` on a real netfilter hook: the program on a bpf link at ``input``
(``bpf_attach.nf_link``, for IPv4 and IPv6) in a throw-away namespace, UDP packets
sent to the device under test, and what reaches a socket compared with the
interpreter. Covers what a test run cannot give the program: an input device, whose
name ``iif`` compares (exact names, prefixes, lists, negations) at run time.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket

import pytest
from pyroute2 import IPRoute

from pfc.backends.ebpf import maps as ebpf_maps
from pfc.build import build_policy
from pfc.frontend import ir
from pfc.kernel import bpf_attach, netns
from pfc.oracle import framebuild as fb
from pfc.oracle.context import Context
from pfc.oracle.interp import evaluate

REASON = netns.missing_privileges()
A4, B4 = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
A6, B6 = bytes.fromhex("20010db8" + "00" * 11 + "01"), bytes.fromhex("20010db8" + "00" * 11 + "02")
PORT, MARKER = 5000, 999
LISTS = (("dut",), ("du*",), ("dut0",), ("eth*",), ("d*", "x"), ("lo",), ("dutt*",), ("*",))


def policy() -> ir.Policy:
    """``pass udp sport 999`` (the marker), then one rule per list, plain and negated,
    each on its own source port; default drop."""
    number, family = ir.PROTOCOLS["udp"]
    rules = [ir.Rule(0, ir.Pass(), family, number,
                     (ir.IntMatch("sport", ((MARKER, MARKER),), False),), proto_name="udp")]
    for n, (names, neg) in enumerate(itertools.product(LISTS, (False, True)), start=1):
        matches = (ir.IntMatch("sport", ((2000 + n, 2000 + n),), False),
                   ir.IfaceMatch("iif", names, neg))
        rules.append(ir.Rule(n, ir.Pass(), family, number, matches, proto_name="udp",
                             line=n + 1))
    return ir.Policy(tuple(rules), ir.Verdict.DROP, hook=ir.Hook("input"), source="link.pf")


def frame(lab: netns.Lab, version: int, sport: int) -> bytes:
    src, dst = (A4, B4) if version == 4 else (A6, B6)
    seg = fb.udp(src, dst, sport, PORT, b"hello")
    packet = fb.ipv4(src, dst, 17, seg) if version == 4 else fb.ipv6(src, dst, 17, seg)
    return fb.ethernet(lab.dut_mac, lab.inj_mac, 0x0800 if version == 4 else 0x86DD, packet)


@contextlib.contextmanager
def sockets(lab: netns.Lab):
    with IPRoute() as ipr:
        ipr.addr("add", index=lab.dut_index, address="192.0.2.2", prefixlen=24)
        ipr.addr("add", index=lab.dut_index, address="2001:db8::2", prefixlen=64,
                 flags=0x02)  # IFA_F_NODAD: usable at once, not tentative
    v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    v6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with v4, v6:
        v4.bind(("192.0.2.2", PORT))
        v6.bind(("2001:db8::2", PORT))
        for s in (v4, v6):
            s.settimeout(30)  # a hang guard, not a deadline: the marker always passes
        yield {4: v4, 6: v6}


def received(sock: socket.socket) -> set[int]:
    """The source ports of the datagrams before the marker."""
    ports = set()
    while (port := sock.recvfrom(64)[1][1]) != MARKER:
        ports.add(port)
    return ports


@pytest.mark.kernel
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_iif_names_on_the_real_input_hook() -> None:
    block = policy()
    art, diags = build_policy(block, "nfbpf", "o", hook="nf-input")
    assert art is not None, [d.message for d in diags]
    sports = [2000 + n for n in range(1, 2 * len(LISTS) + 1)]
    with netns.lab() as lab, netns.one_cpu(), sockets(lab) as socks, \
            ebpf_maps.open_filled(art) as obj:
        fd = obj.programs[art.meta["program"]].fd
        links = [bpf_attach.nf_link(fd, v, 1, 0) for v in (4, 6)]
        try:
            inj = netns.Injector(lab.inj)
            for version, sport in itertools.product((4, 6), [*sports, MARKER]):
                inj.send(frame(lab, version, sport))
            inj.close()
            got = {v: received(socks[v]) for v in (4, 6)}
        finally:
            for link in links:
                os.close(link)
    for version in (4, 6):
        want = {p for p in sports if evaluate(block, frame(lab, version, p), ctx=Context(
            iif="dut")).verdict is ir.Verdict.PASS}
        assert got[version] == want, version
        assert 4 < len(want) < len(sports)  # names that match and names that do not
