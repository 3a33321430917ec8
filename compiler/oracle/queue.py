"""The meaning of ``queue`` (docs/semantics.md "User-space verdicts"): the decider is an
input of the interpretation, as the frames are.

A **decider** is a callable ``(num, key, packet) -> Verdict | None``: the queue number,
the packet's flow key (``flow_key``) and the IP packet (from the IP header, as NFQUEUE
hands it over). A Verdict is final for the flow; None means "not yet": the packet
passes and the flow stays undecided. Deciders must be functions of the flow's packets
so far (``pfc.decide.analyse`` holds the built-in ones); the oracle and ``pfc decide``
run the same one.

When a packet reaches a ``queue`` rule that holds:

1. its flow has a verdict in the kernel's cache (``first K``: the connection's mark):
   that verdict, and the decider does not see the packet;
2. else, with no decider listening: drop, or pass with ``bypass`` (NFQUEUE's own
   fail-closed default and ``--queue-bypass``);
3. else the decider sees it (``Outcome.queued``): a flow it decided before gets that
   verdict again (the decider's own table); else the decider's answer; None passes.
   With ``first K``, the K-th packet of a flow the decider has seen and left undecided
   makes the verdict ``pass``; a final verdict goes into the kernel's cache.

A flow is one connection: both directions of (version, protocol, addresses, ports) share
one key, ports ``None`` when the transport header is not there to read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pfc.frontend import ir
from pfc.frontend.ir import Verdict
from pfc.oracle import packets
from pfc.oracle.packets import FrameView

FlowKey = tuple  # (version, proto, (addr, port), (addr, port)), endpoints sorted
Decider = Callable[[int, FlowKey, bytes], Verdict | None]


def flow_key(view: FrameView) -> FlowKey | None:
    """The connection ``view`` belongs to, the same from either end; None for a frame
    that is not IP."""
    src, dst = packets.ip_field_bytes(view, "src"), packets.ip_field_bytes(view, "dst")
    if src is None or dst is None or view.l4proto is None:
        return None
    proto = view.l4proto
    sport = packets.transport_field(view, "sport", proto)
    dport = packets.transport_field(view, "dport", proto)
    ends = sorted([(src, sport if dport is not None else None),
                   (dst, dport if sport is not None else None)],
                  key=lambda e: (e[0], -1 if e[1] is None else e[1]))
    return (view.version, proto, ends[0], ends[1])


def packet_key(packet: bytes) -> FlowKey | None:
    """``flow_key`` of an IP packet (no Ethernet header), as the decider receives it."""
    ethertype = b"\x86\xdd" if packet[:1] and packet[0] >> 4 == 6 else b"\x08\x00"
    return flow_key(packets.read_frame(bytes(12) + ethertype + packet))


@dataclass
class QueueState:
    """The kernel's verdict cache and the decider's table, for one sequence of frames."""

    decider: Decider | None = None
    cache: dict[FlowKey, Verdict] = field(default_factory=dict)  # in the kernel
    table: dict[FlowKey, Verdict] = field(default_factory=dict)  # in the decider
    seen: dict[FlowKey, int] = field(default_factory=dict)  # packets the decider saw

    def verdict(self, action: ir.Queue, view: FrameView) -> tuple[Verdict, bool]:
        """The packet's verdict and whether the decider saw it (module doc)."""
        key = flow_key(view)
        if key in self.cache:
            return self.cache[key], False
        if self.decider is None:
            return (Verdict.PASS if action.bypass else Verdict.DROP), False
        n = self.seen[key] = self.seen.get(key, 0) + 1
        got = self.table.get(key)
        if got is None:
            got = self.decider(action.num, key, view.data[view.l3:])
            if got is None and action.first is not None and n >= action.first:
                got = Verdict.PASS
            if got is not None:
                self.table[key] = got
        if got is not None and action.first is not None:
            self.cache[key] = got
        return (Verdict.PASS if got is None else got), True
