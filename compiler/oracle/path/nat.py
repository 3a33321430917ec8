"""NAT as conntrack applies it: a connection's translation, decided once by its first
packet at the nat blocks, applied to every packet of it in both directions
(semantics.md "NAT"; net/netfilter/nf_nat_core.c ``nf_nat_packet``, ``nf_nat_setup_info``).

A ``Binding`` holds what each manipulation decided (``None``: not decided yet; ``()``:
decided, no translation). ``translate`` rewrites one packet at one place of the path:
the destination at the dstnat places (prerouting, output), the source at the srcnat
places (postrouting, input); a reply-direction packet gets the inverse of the other
manipulation there (its destination un-SNATed, its source un-DNATed). Checksums are
updated incrementally, as ``nf_nat_ipv4_manip_pkt`` / ``nf_nat_ipv6_manip_pkt`` do.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend import ir
from pfc.oracle.packets import ETH_HLEN, ICMP6, TCP, UDP, read_frame
from pfc.oracle.rewrite import csum_update

Endpoint = tuple[bytes, bytes | None]  # (address bytes, port bytes or None: kept)


@dataclass
class Binding:
    """One connection's translation. ``dst``/``src``: None until the manipulation was
    decided; ``()`` when it was decided as none; else the new (address, port)."""

    original: tuple  # the connection's original tuple (conntrack.Tuple)
    dst: Endpoint | tuple | None = None
    src: Endpoint | tuple | None = None

    @property
    def status(self) -> int:
        """``ct status`` bits this translation sets: snat 0x10, dnat 0x20."""
        return (0x20 if self.dst else 0) | (0x10 if self.src else 0)

    def translated_tuple(self) -> tuple:
        """The original tuple as the translated packets carry it: the reply of this
        tuple is what the peer's replies look like."""
        version, proto, src, dst, a, b = self.original
        if self.src:
            src, a = self.src[0], self.src[1] or a
        if self.dst:
            dst, b = self.dst[0], self.dst[1] or b
        return (version, proto, src, dst, a, b)


def decide(nat: ir.Nat | None, port_address: bytes | None) -> Endpoint | tuple:
    """A nat block's outcome as an endpoint: ``nat`` None (no rule decided, or
    ``pass``) is no translation; ``masquerade``/``redirect`` take ``port_address`` (the
    leaving / receiving interface's address, chosen by the walker)."""
    if nat is None:
        return ()
    port = nat.port.to_bytes(2, "big") if nat.port is not None else None
    if nat.kind in ("dnat", "snat"):
        return (nat.address.packed, port)
    if port_address is None:
        return ()  # no address of the family on the interface: the kernel drops (NF_DROP)
    return (port_address, port)


def translate(frame: bytes, binding: Binding | None, reply: bool, place: str) -> bytes:
    """``frame`` (Ethernet + IP, untagged) after the translation of its connection at
    ``place`` (``dst`` for the dstnat places, ``src`` for the srcnat ones)."""
    if binding is None:
        return frame
    version, _proto, osrc, odst, oa, ob = binding.original
    if place == "dst":
        if not reply and binding.dst:
            return rewrite(frame, "dst", *binding.dst)
        if reply and binding.src:  # the peer answers the translated source: put it back
            return rewrite(frame, "dst", osrc, oa)
        return frame
    if not reply and binding.src:
        return rewrite(frame, "src", *binding.src)
    if reply and binding.dst:  # the answer comes from the translated destination
        return rewrite(frame, "src", odst, ob)
    return frame


def rewrite(frame: bytes, which: str, address: bytes, port: bytes | None) -> bytes:
    """Set the source or destination address (and port, for TCP/UDP with a readable
    header) of an untagged Ethernet + IP frame; fix the IPv4 header checksum and the
    TCP/UDP/ICMPv6 checksum (a UDP checksum of 0 stays 0, a computed 0 is 0xffff)."""
    view = read_frame(frame, skip_tag=False)
    if view.version is None:
        return frame
    data = bytearray(frame)
    l3 = ETH_HLEN
    at = l3 + (12 if which == "src" else 16) if view.version == 4 else \
        l3 + (8 if which == "src" else 24)
    old = bytes(data[at:at + len(address)])
    if len(old) != len(address):
        return frame
    data[at:at + len(address)] = address
    if view.version == 4:
        _fix(data, l3 + 10, old, address)
    old_l4, new_l4 = old, address
    if port is not None and view.l4 is not None and view.l4proto in (TCP, UDP):
        pat = view.l4 + (0 if which == "src" else 2)
        if pat + 2 <= len(data):
            old_l4, new_l4 = old + bytes(data[pat:pat + 2]), address + port
            data[pat:pat + 2] = port
    _fix_l4(data, view, old_l4, new_l4)
    return bytes(data)


def _fix_l4(data: bytearray, view, old: bytes, new: bytes) -> None:
    if view.l4 is None:
        return
    proto = view.l4proto
    offsets = {TCP: 16, UDP: 6, ICMP6: 2}
    if proto not in offsets or (proto == ICMP6 and view.version != 6):
        return
    at = view.l4 + offsets[proto]
    if at + 2 > len(data):
        return
    if proto == UDP and data[at:at + 2] == b"\0\0":
        return
    _fix(data, at, old, new, zero=0xFFFF if proto == UDP else 0)


def _fix(data: bytearray, at: int, old: bytes, new: bytes, zero: int = 0) -> None:
    if len(old) % 2:  # an odd run (never here: addresses and ports are even)
        old, new = old + b"\0", new + b"\0"
    value = csum_update(int.from_bytes(data[at:at + 2], "big"), old, new)
    data[at:at + 2] = (value or zero).to_bytes(2, "big")
