"""The eBPF hooks' log events: the ring buffer ``pfc_events`` and its record layout.

A record (``struct pfc_event`` in ``templates/ebpf/flow.c.j2``, little-endian as the
host) is a 48-byte head, then ``caplen`` bytes of the frame from its first byte (the
Ethernet header, as the hook sees the frame)::

    u32 line       the rule's source line; 0: the default
    u32 ifindex    the interface the packet came in on (XDP ingress_ifindex, skb ifindex)
    u32 len        the frame's length
    u16 caplen     bytes of the frame that follow: min(len, snap)
    u8  verdict    the verdict so far: 0 pass, 1 drop
    u8  audit      1: an audited drop (the packet passes)
    u64 prefix[4]  the rule's prefix, NUL-padded (32 bytes)

:func:`decode` makes it a :class:`pfc.oracle.events.LogEvent`, the one event shape
(``link=True``: the bytes start at the Ethernet header). ``pfc log --dev`` reads them
(:mod:`pfc.deploy.events_bpf`), so do the differential tests
(:func:`pfc.backends.ebpf.run.run_timed`).
"""

from __future__ import annotations

import struct

from pfc.oracle.events import LogEvent

EVENTS_MAP = "pfc_events"
CLOCK_MAP = "pfc_clock"
HEAD = struct.Struct("<IIIHBB32s")
VERDICTS = {0: "pass", 1: "drop"}


class BadEvent(ValueError):
    """A record that is not a pfc event (too short, an unknown verdict)."""


def decode(record: bytes) -> LogEvent:
    if len(record) < HEAD.size:
        raise BadEvent(f"a {len(record)}-byte record is shorter than an event head")
    line, ifindex, _, caplen, verdict, audit, prefix = HEAD.unpack_from(record)
    if verdict not in VERDICTS or audit > 1:
        raise BadEvent(f"not a pfc event (verdict {verdict}, audit {audit})")
    data = record[HEAD.size:HEAD.size + caplen]
    text = prefix.split(b"\0", 1)[0].decode("ascii", "replace")
    return LogEvent(line, VERDICTS[verdict], bool(audit), text, data, True, ifindex)


def frame_length(record: bytes) -> int:
    """The length of the frame the event is about (its ``len`` field)."""
    return HEAD.unpack_from(record)[2]
