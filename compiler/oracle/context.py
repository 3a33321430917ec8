"""What a hook knows of a packet besides its bytes, and the matches that read it
(docs/language.md "Whole firewalls", "Matches").

``Context`` carries the interfaces, the packet's mark, the connection's status and mark
and the host (for address types). The path interpreter (``pfc.oracle.path``) fills it
hook by hook; a list judged on its own (a v1 file, one block) gets the context its hook
implies (``iif`` the receiving device at ``ingress``). A match whose context is missing
is absent: false, negated or not, like a field the frame lacks.

Link-layer matches (``ether-src``, ``ether-dst``, ``ether-type``, ``vlan-id``) read the
frame itself: ``link_check``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pfc.frontend import ir
from pfc.oracle.packets import ETH_HLEN, VLAN_TPIDS, FrameView, ip_field


class AddressTypes(Protocol):
    def addr_type(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str: ...


@dataclass
class Context:
    iif: str | None = None
    oif: str | None = None
    mark: int = 0
    ct_status: int | None = None  # the connection's status bits; None: untracked/none
    ct_mark: int | None = None
    host: AddressTypes | None = None


MetaCheck = Callable[[FrameView, Context], bool]
FrameCheck = Callable[[FrameView], bool]


def needs_context(match: ir.Match) -> bool:
    """Whether the match reads the context (else the frame, or the flow for ``ct``)."""
    return ir.FIELDS[match.field].layer is ir.Layer.META or match.field in (
        "ct-status", "ct-mark")


def context_check(match: ir.Match) -> MetaCheck:
    """A check for a match on the context: False when absent, else ``test ^ negated``."""
    read, test = _context_reader(match)
    negated = match.negated

    def check(view: FrameView, ctx: Context) -> bool:
        value = read(view, ctx)
        return value is not None and test(value) != negated
    return check


def _context_reader(match: ir.Match):
    if isinstance(match, ir.IfaceMatch):
        names = match.names
        # no input device (the host's own packets after routing) is the name "": no
        # pattern matches it, a negated one holds (nft's iifname "", iptables' -i)
        return ((lambda v, c: c.iif or "") if match.field == "iif" else (lambda v, c: c.oif),
                lambda name: any(iface_matches(p, name) for p in names))
    if isinstance(match, ir.AddrTypeMatch):
        field, types = match.field[:3], frozenset(match.types)
        return (lambda v, c: _addr_type(v, c, field)), types.__contains__
    if isinstance(match, ir.CtStatusMatch):
        bits = sum(ir.CT_STATUSES[s] for s in match.statuses)
        return (lambda v, c: c.ct_status), (lambda status: status & bits == bits)
    if isinstance(match, ir.IntMatch) and match.field in ("mark", "ct-mark"):
        reader = (lambda v, c: c.mark) if match.field == "mark" else (lambda v, c: c.ct_mark)
        return reader, in_ranges(match.ranges)
    raise TypeError(f"not a context match: {match!r}")


def in_ranges(ranges: tuple[tuple[int, int], ...]) -> Callable[[int], bool]:
    return lambda value: any(lo <= value <= hi for lo, hi in ranges)


def iface_matches(pattern: str, name: str) -> bool:
    """``eth*`` matches every name starting with ``eth`` (``eth`` itself too, as nft's
    ``iifname "eth*"`` and iptables' ``eth+``); any other pattern only itself."""
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def _addr_type(view: FrameView, ctx: Context, field: str) -> str | None:
    address = ip_field(view, field)
    if address is None:
        return None
    if ctx.host is not None:
        return ctx.host.addr_type(address)
    return default_addr_type(address)


def default_addr_type(address) -> str:
    """An address's type to a host whose own addresses are unknown: loopback is local,
    the rest by their form alone."""
    if address.is_loopback:
        return "local"
    if address.is_multicast:
        return "multicast"
    if address == ipaddress.IPv4Address("255.255.255.255"):
        return "broadcast"
    return "unicast"


# ------------------------------------------------------------------------- link layer

def link_check(match: ir.Match) -> FrameCheck:
    """A check for ``ether-src``/``ether-dst`` (MacMatch) or ``ether-type``/``vlan-id``
    (IntMatch) on the frame as given (one VLAN tag read as the hooks see it)."""
    read = _link_reader(match.field)
    if isinstance(match, ir.MacMatch):
        macs = frozenset(match.macs)
        test = macs.__contains__
    else:
        test = in_ranges(match.ranges)
    negated = match.negated

    def check(view: FrameView) -> bool:
        value = read(view)
        return value is not None and test(value) != negated
    return check


def _link_reader(field: str) -> Callable[[FrameView], object]:
    if field == "ether-dst":
        return lambda v: v.data[0:6] if len(v.data) >= ETH_HLEN else None
    if field == "ether-src":
        return lambda v: v.data[6:12] if len(v.data) >= ETH_HLEN else None
    if field == "ether-type":
        return lambda v: v.ethertype
    if field == "vlan-id":
        return _vlan_id
    raise TypeError(f"not a link-layer field: {field}")


def _vlan_id(view: FrameView) -> int | None:
    """The outer tag's VLAN id when the frame carries one (XDP sees it in the frame;
    tc and nft read the same tag from the skb after the kernel removed it)."""
    data = view.data
    if len(data) < ETH_HLEN + 4 or ((data[12] << 8) | data[13]) not in VLAN_TPIDS:
        return None
    return ((data[14] << 8) | data[15]) & 0x0FFF
