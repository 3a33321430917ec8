"""The path of a packet through a whole firewall (semantics.md "The path of a packet"):
``Walker.receive`` follows a frame received on an interface, ``Walker.send`` a packet
the host sends; each returns a ``Journey``: the blocks that judged it, how it ended,
the packet as it left or was delivered, and the replies ``reject`` sent (each with its
own journey through ``output``).

One ``Walker`` is one host over time: its connection tracker, NAT bindings and rate
buckets carry from packet to packet (``now`` in nanoseconds, as ``pfc.oracle.flow``).
Every list is judged by the reference interpreter (``pfc.oracle.interp``) with the
context of its hook (``pfc.oracle.context``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS
from pfc.frontend.firewall.ruleset import LOOPBACK, Ruleset
from pfc.oracle.conntrack import Reading
from pfc.oracle.context import Context
from pfc.oracle.flow import Flow
from pfc.oracle.interp import Outcome, evaluate
from pfc.oracle.packets import ETH_HLEN, ip_input_view, read_frame
from pfc.oracle.path import nat
from pfc.oracle.path.host import Host, Port, host_of
from pfc.oracle.path.reject import ingress_reply, reply

ETH_IP = {4: b"\x08\x00", 6: b"\x86\xdd"}


@dataclass(frozen=True)
class Step:
    block: str
    outcome: Outcome
    device: str | None = None


@dataclass
class Journey:
    """``fate``: ``delivered`` (to a local socket), ``forwarded`` / ``sent`` (out of
    ``oif``), ``dropped`` / ``rejected`` (by the block ``where``), ``unrouted`` (no
    route, or a host that does not forward), ``expired`` (TTL ran out forwarding),
    ``refused`` (IP input refused the frame), ``passed`` (a non-IP frame the ingress
    block let through: no later block sees it). ``frame``: the packet as it was
    delivered or left (Ethernet header included)."""

    steps: list[Step] = field(default_factory=list)
    fate: str = ""
    where: str | None = None
    frame: bytes | None = None
    oif: str | None = None
    replies: list[Journey] = field(default_factory=list)

    def counted(self) -> dict[int | str, tuple[int, int]]:
        """(packets, bytes) per count rule over this journey and its replies'."""
        out: dict[int | str, tuple[int, int]] = {}
        for journey in [self, *self.replies]:
            for step in journey.steps:
                for index in step.outcome.counted:
                    p, b = out.get(index, (0, 0))
                    out[index] = (p + 1, b + step.outcome.nbytes)
        return out


@dataclass
class _Packet:
    """The state of one packet on its way: the frame (untagged Ethernet + IP once past
    IP input), its context, its connection reading and its NAT binding."""

    frame: bytes
    ctx: Context
    journey: Journey
    reading: Reading | None = None
    binding: nat.Binding | None = None
    first: bool = False  # the packet that creates its connection (nat blocks run)


class Walker:
    def __init__(self, ruleset: Ruleset, host: Host | None = None):
        self.ruleset = ruleset
        self.host = host or host_of(ruleset)
        self.flow = Flow(tracking=True)
        self.bindings: dict[int, tuple[object, nat.Binding]] = {}

    # ------------------------------------------------------------------ received

    def receive(self, frame: bytes, iif: str, now: int = 0) -> Journey:
        self.flow.start(now)
        pkt = _Packet(bytes(frame), Context(iif=iif, host=self.host), Journey())
        out = self._judge(pkt, "ingress", iif, skip_tag=True)
        if out is not None and out.verdict is ir.Verdict.DROP:
            return self._stop(pkt, "ingress", out, at_ingress=True)
        if out is not None:
            pkt.frame = out.frame  # a v1 redirect rewrote it
        inner = ip_input_view(pkt.frame)
        if inner is None:
            kind = "passed" if read_frame(pkt.frame).version is None else "refused"
            return self._end(pkt, kind)
        pkt.frame = inner
        return self._prerouting(pkt)

    def _prerouting(self, pkt: _Packet) -> Journey:
        if self._blocked(pkt, "raw prerouting"):
            return pkt.journey
        self._track(pkt)
        for name in ("prerouting", "nat prerouting"):
            if self._blocked(pkt, name):
                return pkt.journey
        pkt.frame = nat.translate(pkt.frame, pkt.binding, self._reply(pkt), "dst")
        source, destination = _address(pkt.frame, "src"), _address(pkt.frame, "dst")
        if self.host.martian(source, destination, pkt.ctx.iif):
            return self._end(pkt, "unrouted", passed=False)
        route = self.host.route(destination)
        if route.kind == "local":
            return self._local_in(pkt)
        if route.kind == "forward" and self.host.forwards:
            return self._forward(pkt, route.port)
        return self._end(pkt, "unrouted")

    def _local_in(self, pkt: _Packet) -> Journey:
        for name in ("input", "nat input"):
            if self._blocked(pkt, name):
                return pkt.journey
        pkt.frame = nat.translate(pkt.frame, pkt.binding, self._reply(pkt), "src")
        return self._end(pkt, "delivered")

    def _forward(self, pkt: _Packet, port: Port) -> Journey:
        aged = _age(pkt.frame)
        if aged is None:
            return self._end(pkt, "expired")
        pkt.frame, pkt.ctx.oif = aged, port.name
        if self._blocked(pkt, "forward"):
            return pkt.journey
        return self._postrouting(pkt, port, "forwarded")

    # ---------------------------------------------------------------------- sent

    def send(self, packet: bytes, now: int = 0, reading: Reading | None = None) -> Journey:
        """A packet (from its IP header) the host sends. ``reading``: the connection
        state it already has (a reject's reply: ``related``)."""
        self.flow.start(now)
        frame = bytes(12) + ETH_IP.get(packet[0] >> 4 if packet else 0, b"\0\0") + packet
        pkt = _Packet(frame, Context(host=self.host), Journey())
        route = self.host.route(_address(frame, "dst"))
        if route.kind == "unreachable":
            return self._end(pkt, "unrouted")
        pkt.ctx.oif = route.port.name if route.kind == "forward" else LOOPBACK
        if self._blocked(pkt, "raw output"):
            return pkt.journey
        self._track(pkt, reading)
        for name in ("nat output", "output"):
            if self._blocked(pkt, name):
                return pkt.journey
            if name == "nat output":
                pkt.frame = nat.translate(pkt.frame, pkt.binding, self._reply(pkt), "dst")
        route = self.host.route(_address(pkt.frame, "dst"))  # again, after a local DNAT
        if route.kind == "local":
            return self._loopback(pkt)
        if route.kind == "unreachable":
            return self._end(pkt, "unrouted")
        pkt.ctx.oif = route.port.name
        return self._postrouting(pkt, route.port, "sent")

    def _loopback(self, pkt: _Packet) -> Journey:
        pkt.ctx.oif = LOOPBACK
        for name in ("postrouting", "nat postrouting"):
            if self._blocked(pkt, name):
                return pkt.journey
        pkt.frame = nat.translate(pkt.frame, pkt.binding, self._reply(pkt), "src")
        pkt.ctx = Context(iif=LOOPBACK, mark=pkt.ctx.mark, host=self.host)
        out = self._judge(pkt, "ingress", LOOPBACK, skip_tag=False)
        if out is not None and out.verdict is ir.Verdict.DROP:
            return self._stop(pkt, "ingress", out, at_ingress=True)
        for name in ("raw prerouting", "prerouting"):  # conntrack keeps its reading
            if self._blocked(pkt, name):
                return pkt.journey
        return self._local_in(pkt)

    # ------------------------------------------------------------------- leaving

    def _postrouting(self, pkt: _Packet, port: Port, fate: str) -> Journey:
        for name in ("postrouting", "nat postrouting"):
            if self._blocked(pkt, name, port):
                return pkt.journey
        pkt.frame = nat.translate(pkt.frame, pkt.binding, self._reply(pkt), "src")
        pkt.frame = port.peer_mac + port.mac + pkt.frame[12:]
        out = self._judge(pkt, "egress", port.name, skip_tag=False)
        if out is not None and out.verdict is ir.Verdict.DROP:
            return self._stop(pkt, "egress", out)
        journey = self._end(pkt, fate)
        journey.oif = port.name
        return journey

    # ------------------------------------------------------------------ the lists

    def _judge(self, pkt: _Packet, name: str, device: str | None = None,
               skip_tag: bool = False) -> Outcome | None:
        policy = self.ruleset.block(name, device)
        if policy is None:
            return None
        self._status(pkt)
        self.flow.reading = pkt.reading
        out = evaluate(policy, pkt.frame, skip_tag=skip_tag, flow=self.flow, ctx=pkt.ctx,
                       part=True)
        pkt.journey.steps.append(Step(name, out, device))
        return out

    def _blocked(self, pkt: _Packet, name: str, port: Port | None = None) -> bool:
        """Run block ``name`` (a nat block only on a connection's first packet, once per
        manipulation); True when it ended the packet's way (dropped or rejected)."""
        if BLOCKS[name].kind == "nat" and not self._nat_due(pkt, name):
            return False
        out = self._judge(pkt, name)
        if out is None:
            self._nat(pkt, name, None, port)
            return False
        if out.notrack:
            pkt.reading = Reading("untracked")
        if out.verdict is ir.Verdict.DROP:
            self._stop(pkt, name, out)
            return True
        self._nat(pkt, name, out.nat, port)
        return False

    def _nat_due(self, pkt: _Packet, name: str) -> bool:
        return (pkt.first and pkt.binding is not None
                and getattr(pkt.binding, _place(name)) is None)

    def _nat(self, pkt: _Packet, name: str, decision: ir.Nat | None, port: Port | None):
        if BLOCKS[name].kind != "nat" or not self._nat_due(pkt, name):
            return
        address = self._nat_address(pkt, decision, port)
        setattr(pkt.binding, _place(name), nat.decide(decision, address))

    def _nat_address(self, pkt: _Packet, decision: ir.Nat | None,
                     port: Port | None) -> bytes | None:
        """The interface address ``masquerade`` (leaving port) or ``redirect``
        (receiving port; loopback for a sent packet) translates to."""
        if decision is None or decision.kind not in ("masquerade", "redirect"):
            return None
        version = read_frame(pkt.frame, skip_tag=False).version
        if decision.kind == "redirect":
            iface = self.host.port(pkt.ctx.iif) if pkt.ctx.iif else self.host.port(LOOPBACK)
            chosen = next((a.ip for a in iface.addresses if a.version == version), None)
        elif port is None and pkt.ctx.oif == LOOPBACK:  # sent to the host itself
            chosen = self.host.loopback_source(_address(pkt.frame, "dst"))
        else:
            hop = self.host.route(_address(pkt.frame, "dst")).next_hop
            chosen = self.host.source_for(port, hop) if port is not None else None
        return None if chosen is None or chosen.version != version else chosen.packed

    # ------------------------------------------------------------- connections

    def _track(self, pkt: _Packet, reading: Reading | None = None) -> None:
        """Conntrack's place on the path: the packet's connection, its binding."""
        view = read_frame(pkt.frame, skip_tag=False)
        if pkt.reading is None:
            pkt.reading = reading or self.flow.conntrack.read(view)
        self.flow.reading = pkt.reading
        conn = pkt.reading.new or pkt.reading.conn
        if conn is None or pkt.reading.state in ("invalid", "untracked"):
            return
        pkt.first = pkt.reading.new is not None
        known = self.bindings.get(id(conn))
        if known is None:
            known = (conn, nat.Binding(conn.original))
            self.bindings[id(conn)] = known
        pkt.binding = known[1]

    def _reply(self, pkt: _Packet) -> bool:
        return pkt.reading is not None and pkt.reading.reply

    def _status(self, pkt: _Packet) -> None:
        reading = pkt.reading
        if reading is None or reading.state in (None, "invalid", "untracked"):
            pkt.ctx.ct_status = None
            return
        conn = reading.conn
        bits = 0 if conn is None else 0x8 | (0x2 if conn.seen_reply or reading.reply else 0)
        pkt.ctx.ct_status = bits | (pkt.binding.status if pkt.binding else 0)
        pkt.ctx.ct_mark = 0

    # ------------------------------------------------------------------- endings

    def _stop(self, pkt: _Packet, name: str, out: Outcome, at_ingress: bool = False
              ) -> Journey:
        journey = self._end(pkt, "rejected" if out.reject else "dropped", passed=False)
        journey.where = name
        if out.reject:
            self._reject(pkt, out.reject, at_ingress)
        return journey

    def _reject(self, pkt: _Packet, kind: str, at_ingress: bool) -> None:
        if at_ingress:  # straight back out of the receiving device, no hook sees it
            back = ingress_frame(pkt.frame, kind)
            if back is not None:
                pkt.journey.replies.append(Journey(fate="sent", frame=back, oif=pkt.ctx.iif))
            return
        view = read_frame(pkt.frame, skip_tag=False)
        answer = reply(pkt.frame[view.l3:], kind, self._icmp_source(pkt, view))
        if answer is not None:
            pkt.journey.replies.append(self.send(answer, self.flow.now, Reading("related")))

    def _icmp_source(self, pkt: _Packet, view):
        """icmp_send's source: the rejected packet's destination when it is the host's,
        else the address of the interface the reply leaves by. None: no reply (a
        loopback source cannot leave by another device: ``__mkroute_output``'s -EINVAL,
        as for a packet a local socket sent to 127.0.0.3 from a foreign source; and none
        to a packet for a broadcast or multicast address: icmp_send's RTCF_BROADCAST /
        RTCF_MULTICAST test)."""
        dst = _address(pkt.frame, "dst", view.l3)
        src = _address(pkt.frame, "src", view.l3)
        if dst.version == 4 and (dst.is_multicast or self.host.is_broadcast(dst)):
            return None
        route = self.host.route(src)
        if self.host.is_local(dst):
            if dst.is_loopback and route.port is not None and route.port.name != "lo":
                return None
            return dst
        return self.host.source_for(route.port, src) if route.port is not None else None

    def _end(self, pkt: _Packet, fate: str, passed: bool = True) -> Journey:
        if pkt.reading is not None and pkt.reading.state is not None:
            view = read_frame(pkt.frame, skip_tag=False)
            self.flow.reading = pkt.reading
            self.flow.finish(view, passed)
            if passed and pkt.first and pkt.binding is not None:
                # the peer answers the translated tuple: conntrack finds replies by it
                self.flow.conntrack.translated(pkt.reading.new, pkt.binding.translated_tuple())
        pkt.journey.fate = fate
        pkt.journey.frame = pkt.frame
        return pkt.journey


def ingress_frame(frame: bytes, kind: str) -> bytes | None:
    """The frame ``reject`` sends back at ``ingress`` for ``frame`` (as on the wire):
    MACs swapped, the VLAN tag kept (``nft_reject_netdev`` puts it back), the reply
    nft netdev builds."""
    view = read_frame(frame)
    received = frame[view.l3:] if view.version is not None else b""
    if not received or received[0] >> 4 != view.version:
        return None  # nft_reject_netdev: the EtherType's family, whose checks want it
    answer = ingress_reply(received, kind)
    if answer is None:
        return None
    return frame[6:12] + frame[0:6] + frame[12:view.l3 - 2] + ETH_IP[view.version] + answer


def _place(name: str) -> str:
    """Which end a nat block translates: the destination at prerouting and output."""
    return "dst" if BLOCKS[name].hook in ("prerouting", "output") else "src"


def _address(frame: bytes, which: str, l3: int = ETH_HLEN):
    version = frame[l3] >> 4 if len(frame) > l3 else 0
    if version == 4:
        at = l3 + (12 if which == "src" else 16)
        return ipaddress.IPv4Address(frame[at:at + 4])
    at = l3 + (8 if which == "src" else 24)
    return ipaddress.IPv6Address(frame[at:at + 16])


def _age(frame: bytes) -> bytes | None:
    """Forwarding's TTL / hop limit decrement (``ip_forward``: a packet that arrives
    with TTL ≤ 1 is dropped), with the IPv4 header checksum fixed (``ip_decrease_ttl``)."""
    data = bytearray(frame)
    version = data[ETH_HLEN] >> 4
    at = ETH_HLEN + (8 if version == 4 else 7)
    if data[at] <= 1:
        return None
    if version == 4:
        old = bytes(data[at:at + 2])
        data[at] -= 1
        nat._fix(data, ETH_HLEN + 10, old, bytes(data[at:at + 2]))
    else:
        data[at] -= 1
    return bytes(data)
