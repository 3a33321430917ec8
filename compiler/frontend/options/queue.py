"""The ``queue`` action's IR node: hand the packet to a user-space decider.

Kept out of ``ir.py`` (at its size limit) and re-exported there as ``ir.Queue``. The
meaning is docs/semantics.md "User-space verdicts"; the decider is ``pfc decide``
(``pfc.decide``), the oracle's model of it ``pfc.oracle.queue``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend.source import NO_SPAN, Span

QUEUE_NUM_MAX = 65535  # NFQUEUE's queue numbers are 16 bits
FIRST_MAX = 1000  # packets of a flow the decider may ask to see (`first N`)
CACHE_SECONDS = 0  # 0: a cached verdict lives as long as the flow's conntrack entry


@dataclass(frozen=True)
class Queue:
    """``queue PROTO MATCHES [num N] [first K] [bypass]``: the packet's verdict is the
    decider's (queue ``num``). With ``first`` K, the decider sees at most the first K
    packets of each flow (both directions of a connection); its verdict for the flow
    is then kept in the kernel (the connection's mark) and the flow's later packets are
    decided there. ``bypass``: with no decider listening, packets that would reach it
    pass (fail open); without it they are dropped (fail closed). Cached verdicts hold
    either way."""

    num: int = 0
    first: int | None = None
    bypass: bool = False
    span: Span = NO_SPAN
    name: str = "queue"
    terminal: bool = True

# The verdict cache of `first K`: two bits of the connection's mark (ct mark), written by
# `pfc decide` over ctnetlink and read by the rules before the queue rule. A policy's
# own `mark`/`ct mark` should leave these bits alone (docs/queue.md).
MARK_MASK = 0xC000_0000
MARK_PASS = 0x8000_0000
MARK_DROP = 0xC000_0000
