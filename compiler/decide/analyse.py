"""Deciders: ``(num, key, packet) -> Verdict | None`` (``pfc.oracle.queue``).

``PatternDecider`` is seed 002's application firewall: a flow whose TCP or UDP payload
holds the pattern is dropped (found across segment boundaries: each direction keeps
the last ``len(pattern) - 1`` bytes it saw; segments are read in arrival order, not
reassembled). ``load`` builds a decider from its command-line spelling.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from pfc.frontend.ir import Verdict
from pfc.oracle.queue import Decider, FlowKey

PROTO_TCP, PROTO_UDP = 6, 17


def l4_payload(packet: bytes) -> tuple[bytes, bytes] | None:
    """(direction, payload) of a TCP or UDP packet (an IP packet), or None. The
    direction is the source address and port bytes."""
    if not packet:
        return None
    version = packet[0] >> 4
    if version == 4 and len(packet) >= 20:
        ihl, proto, src = (packet[0] & 0xF) * 4, packet[9], packet[12:16]
        total = int.from_bytes(packet[2:4], "big")
        if packet[6] & 0x1F or packet[7]:  # a fragment's data is not a segment
            return None
        start, end = ihl, min(total, len(packet))
    elif version == 6 and len(packet) >= 40:
        proto, src = packet[6], packet[8:24]
        start, end = 40, min(40 + int.from_bytes(packet[4:6], "big"), len(packet))
    else:
        return None
    if proto == PROTO_TCP and end >= start + 20:
        return src + packet[start:start + 2], packet[start + (packet[start + 12] >> 4) * 4:end]
    if proto == PROTO_UDP and end >= start + 8:
        return src + packet[start:start + 2], packet[start + 8:end]
    return None


class PatternDecider:
    """Drop a flow once ``pattern`` appears in its payload; never decide otherwise."""

    def __init__(self, pattern: bytes, verdict: Verdict = Verdict.DROP) -> None:
        if not pattern:
            raise ValueError("the pattern is empty")
        self.pattern, self.verdict = pattern, verdict
        self.tails: dict[tuple[FlowKey, bytes], bytes] = {}

    def __call__(self, num: int, key: FlowKey, packet: bytes) -> Verdict | None:
        got = l4_payload(packet)
        if got is None:
            return None
        direction, payload = got
        where = (key, direction)
        data = self.tails.get(where, b"") + payload
        if self.pattern in data:
            self.tails.pop(where, None)
            return self.verdict
        keep = len(self.pattern) - 1
        self.tails[where] = data[-keep:] if keep else b""
        return None

    def forget(self, key: FlowKey) -> None:
        for where in [w for w in self.tails if w[0] == key]:
            del self.tails[where]


def always(verdict: Verdict) -> Decider:
    """A decider that gives every flow ``verdict`` at its first packet."""
    return lambda num, key, packet: verdict


def load(spec: str) -> Decider:
    """``pattern:TEXT`` (drop flows carrying TEXT; ``\\xNN`` escapes allowed),
    ``pass``, ``drop``, or ``module:callable`` (a Python decider of your own)."""
    if spec.startswith("pattern:"):
        text = spec[len("pattern:"):]
        return PatternDecider(text.encode("latin-1").decode("unicode_escape").encode("latin-1"))
    if spec in ("pass", "drop"):
        return always(Verdict(spec))
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"a decider is `pattern:TEXT`, `pass`, `drop` or "
                         f"`module:callable`; not `{spec}`")
    found = getattr(importlib.import_module(module), name)
    if not isinstance(found, Callable):
        raise ValueError(f"`{spec}` is not callable")
    return found
