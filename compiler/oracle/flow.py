"""What the interpreter remembers between frames: token buckets and connections.

A policy with ``limit``, ``log ... rate`` or ``ct state`` is judged on an ordered,
timed sequence of frames (``interp.run`` with ``times``; a pcap's timestamps). A
``Flow`` holds the state: the buckets, keyed by (rule index, IP version or None for a
non-IP frame, address for ``per src|dst``), and the connection tracker
(:mod:`pfc.oracle.conntrack`).

Token buckets follow nft's ``limit`` (net/netfilter/nft_limit.c) in integer
nanoseconds: a packet costs ``unit / count`` ns of tokens (integer division); the
bucket holds ``cost * burst`` and starts full at the first packet; tokens
grow with the time since the last packet, capped at the maximum; a packet that finds
at least its cost takes it and is within the rate, else it is over. Time that runs
backwards (an unordered pcap) adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.frontend import ir
from pfc.oracle.conntrack import Conntrack, Reading
from pfc.oracle.packets import FrameView, ip_field_bytes, read_frame
from pfc.oracle.queue import QueueState

NSEC = 1_000_000_000


@dataclass
class Bucket:
    cost: int
    most: int
    tokens: int
    last: int

    @classmethod
    def full(cls, rate: ir.Rate, now: int) -> Bucket:
        cost = rate.seconds * NSEC // rate.count
        return cls(cost, cost * rate.capacity, cost * rate.capacity, now)

    def take(self, now: int) -> bool:
        """True when the packet is within the rate (a token taken)."""
        tokens = min(self.tokens + max(0, now - self.last), self.most)
        self.last = max(self.last, now)
        if tokens >= self.cost:
            self.tokens = tokens - self.cost
            return True
        self.tokens = tokens
        return False


@dataclass
class Flow:
    """The state one sequence of frames builds up; ``now`` is the current frame's time."""

    buckets: dict[tuple, Bucket] = field(default_factory=dict)
    conntrack: Conntrack = field(default_factory=Conntrack)
    now: int = 0
    reading: Reading | None = None  # the current frame's connection state, once read
    tracking: bool = True  # whether frames go through the connection tracker
    queue: QueueState = field(default_factory=QueueState)  # `queue`: decider and cache

    def start(self, now: int) -> None:
        self.now, self.reading = now, None

    def ct_state(self, view: FrameView) -> str | None:
        if self.reading is None:
            self.reading = self.conntrack.read(view)
        return self.reading.state

    def within(self, rule: ir.Rule, rate: ir.Rate, view: FrameView,
               per: str | None = None) -> bool:
        """Take a token from the rule's bucket for this frame: True within the rate.
        One bucket per rule and IP version (non-IP frames: one of their own), and per
        address with ``per``."""
        key = (rule.index, view.version, _address(view, per) if per else None)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket.full(rate, self.now)
        return bucket.take(self.now)

    def finish(self, view: FrameView, passed: bool) -> None:
        """Record the judged frame in the connection tracker."""
        self.conntrack.commit(self.reading or self.conntrack.read(view), passed)
        self.reading = None

    def see(self, frame: bytes, skip_tag: bool = True) -> None:
        """A frame the tracker sees but the policy's hook does not (the host's own
        replies, leaving by OUTPUT): it advances or opens its connection."""
        self.reading = None
        self.finish(read_frame(frame, skip_tag), True)


def _address(view: FrameView, per: str) -> bytes | None:
    return ip_field_bytes(view, per)
