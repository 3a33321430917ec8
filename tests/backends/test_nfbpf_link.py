"""Target ``nfbpf`` on a real netfilter hook: the program on a bpf link at ``input``
(``bpf_attach.nf_link``, for IPv4 and IPv6) in a throw-away namespace, UDP packets
sent to the device under test, and what reaches a socket compared with the
interpreter. Covers what a test run cannot give the program: an input device, whose
name ``iif`` compares (exact names, prefixes, lists, negations) at run time.
"""

from __future__ import annotations

import contextlib
import errno
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


def policy(block: str = "input", field: str = "iif", port: str = "sport") -> ir.Policy:
    """``pass udp PORT 999`` (the marker), then one rule per list, plain and negated,
    each on its own port; default drop."""
    number, family = ir.PROTOCOLS["udp"]
    rules = [ir.Rule(0, ir.Pass(), family, number,
                     (ir.IntMatch(port, ((MARKER, MARKER),), False),), proto_name="udp")]
    for n, (names, neg) in enumerate(itertools.product(LISTS, (False, True)), start=1):
        matches = (ir.IntMatch(port, ((2000 + n, 2000 + n),), False),
                   ir.IfaceMatch(field, names, neg))
        rules.append(ir.Rule(n, ir.Pass(), family, number, matches, proto_name="udp",
                             line=n + 1))
    return ir.Policy(tuple(rules), ir.Verdict.DROP, hook=ir.Hook(block), source="link.pf")


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


@pytest.mark.kernel
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_oif_names_on_the_real_output_hook() -> None:
    """The program linked at ``output`` (LOCAL_OUT: the packet from its IP header, the
    route's device as output device): datagrams a socket sends to each port leave by
    the device under test or not (a drop fails the send: EPERM), as the interpreter
    says with ``oif`` = the device."""
    block = policy("output", "oif", "dport")
    art, diags = build_policy(block, "nfbpf", "o", hook="nf-output")
    assert art is not None, [d.message for d in diags]
    ports = [2000 + n for n in range(1, 2 * len(LISTS) + 1)]
    with netns.lab() as lab, netns.one_cpu(), sockets(lab) as socks, \
            ebpf_maps.open_filled(art) as obj:
        with IPRoute() as ipr:  # no neighbour discovery: the peer's address is known
            ipr.neigh("add", dst="192.0.2.1", lladdr=lab.inj_mac.hex(":"),
                      ifindex=lab.dut_index, state=0x80)
        fd = obj.programs[art.meta["program"]].fd
        link = bpf_attach.nf_link(fd, 4, 3, 0)
        tap = netns.packet_socket(lab.inj, 0x0800)
        tap.settimeout(30)
        try:
            for dport in [*ports, MARKER]:
                try:
                    socks[4].sendto(b"hello", ("192.0.2.1", dport))
                except OSError as exc:
                    assert exc.errno == errno.EPERM, exc
            got = set()
            while (dport := int.from_bytes(tap.recv(2048)[36:38], "big")) != MARKER:
                got.add(dport)
        finally:
            tap.close()
            os.close(link)
    sent = [fb.ethernet(lab.inj_mac, lab.dut_mac, 0x0800, fb.ipv4(B4, A4, 17, fb.udp(
        B4, A4, PORT, p, b"hello"))) for p in ports]
    want = {p for p, f in zip(ports, sent, strict=True)
            if evaluate(block, f, ctx=Context(oif="dut")).verdict is ir.Verdict.PASS}
    assert got == want and 4 < len(want) < len(ports)
