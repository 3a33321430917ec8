"""Rewriting a frame in place: ``redirect``'s destination rewrite and the incremental
Internet checksum update (RFC 1624) that it, NAT and forwarding's TTL decrement share.
semantics.md "What redirect writes" is the reference.
"""

from __future__ import annotations

from pfc.frontend.ir import Rule
from pfc.oracle.packets import TCP, UDP, FrameView


def csum_update(old_csum: int, old: bytes, new: bytes) -> int:
    """An Internet checksum after 16-bit-aligned data ``old`` became ``new``: RFC 1624
    eqn. 3, HC' = ~(~HC + ~m + m'), in ones'-complement arithmetic. Never recomputed:
    a checksum that was wrong stays wrong by the same amount.

    Represented as the kernel's ``csum_replace*``/``inet_proto_csum_replace*`` and nft
    payload mangling leave it (``csum_fold`` of a non-zero sum): a zero sum gives
    0x0000, never 0xffff. Mod 0xffff, ~x is -x and a word sum is the number's value,
    so eqn. 3 is ``(HC + m - m') mod 0xffff``.
    """
    if len(old) != len(new) or len(old) % 2:
        raise ValueError("csum_update needs old and new of one even length")
    return (old_csum + int.from_bytes(old, "big") - int.from_bytes(new, "big")) % 0xFFFF


def redirect_frame(view: FrameView, rule: Rule) -> bytes:
    """The frame after ``redirect`` (semantics.md "What redirect writes"), in the frame
    as given (a VLAN tag kept): the destination address; the IPv4 header checksum
    (L3+10); the destination port when the rule's protocol is TCP/UDP, the target has
    a port, the transport is readable with that protocol and the port bytes present;
    the TCP (L4+16) / UDP (L4+6) checksum, for the address (pseudo-header) and port
    change, when the transport is readable, the packet TCP or UDP, and the checksum
    bytes present. A UDP checksum of 0 stays 0; an updated one of 0 is written 0xffff.
    IPv6 has no header checksum: its address change goes into the L4 checksum only.
    Unchanged if there is no destination address of the target's family to rewrite.
    """
    action = rule.action
    new_addr = action.address.packed
    if view.version != action.address.version:
        return view.data
    at = view.l3 + (16 if view.version == 4 else 24)
    if at + len(new_addr) > len(view.data):
        return view.data
    data = bytearray(view.data)
    old = bytes(data[at:at + len(new_addr)])
    data[at:at + len(new_addr)] = new_addr
    if view.version == 4:
        _put_csum(data, view.l3 + 10, old, new_addr)
    new = new_addr
    if _port_writable(view, rule):
        port = action.port.to_bytes(2, "big")
        old, new = old + bytes(data[view.l4 + 2:view.l4 + 4]), new + port
        data[view.l4 + 2:view.l4 + 4] = port
    csum_at = _l4_csum_offset(view)
    udp = view.l4proto == UDP
    if csum_at is not None and not (udp and data[csum_at:csum_at + 2] == b"\0\0"):
        _put_csum(data, csum_at, old, new, zero=0xFFFF if udp else 0)
    return bytes(data)


def _port_writable(view: FrameView, rule: Rule) -> bool:
    return (rule.proto in (TCP, UDP) and rule.action.port is not None
            and view.l4 is not None and view.l4proto == rule.proto
            and view.l4 + 4 <= len(view.data))


def _l4_csum_offset(view: FrameView) -> int | None:
    if view.l4 is None or view.l4proto not in (TCP, UDP):
        return None
    at = view.l4 + (16 if view.l4proto == TCP else 6)
    return at if at + 2 <= len(view.data) else None


def _put_csum(data: bytearray, at: int, old: bytes, new: bytes, zero: int = 0) -> None:
    value = csum_update(int.from_bytes(data[at:at + 2], "big"), old, new)
    data[at:at + 2] = (value or zero).to_bytes(2, "big")
