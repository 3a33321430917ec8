"""iptables' value spellings in pfc's words: addresses and masks, port ranges
(``1024:``), interface names (``eth+``), ICMP type names (libxt_icmp.h's tables, with
their code ranges), protocol names, limit rates, marks with masks.
"""

from __future__ import annotations

import functools
import ipaddress
import re

from pfc.frontend.matches import SERVICES
from pfc.frontend.source import Span
from pfc.importers.model import Refuse

# libxt_icmp.h: name → (type, lowest code, highest code); type 0xFF is "any".
ICMP_NAMES = {
    "any": (0xFF, 0, 0xFF), "echo-reply": (0, 0, 0xFF), "pong": (0, 0, 0xFF),
    "destination-unreachable": (3, 0, 0xFF), "network-unreachable": (3, 0, 0),
    "host-unreachable": (3, 1, 1), "protocol-unreachable": (3, 2, 2),
    "port-unreachable": (3, 3, 3), "fragmentation-needed": (3, 4, 4),
    "source-route-failed": (3, 5, 5), "network-unknown": (3, 6, 6),
    "host-unknown": (3, 7, 7), "network-prohibited": (3, 9, 9),
    "host-prohibited": (3, 10, 10), "tos-network-unreachable": (3, 11, 11),
    "tos-host-unreachable": (3, 12, 12), "communication-prohibited": (3, 13, 13),
    "host-precedence-violation": (3, 14, 14), "precedence-cutoff": (3, 15, 15),
    "source-quench": (4, 0, 0xFF), "redirect": (5, 0, 0xFF),
    "network-redirect": (5, 0, 0), "host-redirect": (5, 1, 1),
    "tos-network-redirect": (5, 2, 2), "tos-host-redirect": (5, 3, 3),
    "echo-request": (8, 0, 0xFF), "ping": (8, 0, 0xFF),
    "router-advertisement": (9, 0, 0xFF), "router-solicitation": (10, 0, 0xFF),
    "time-exceeded": (11, 0, 0xFF), "ttl-exceeded": (11, 0, 0xFF),
    "ttl-zero-during-transit": (11, 0, 0), "ttl-zero-during-reassembly": (11, 1, 1),
    "parameter-problem": (12, 0, 0xFF), "ip-header-bad": (12, 0, 0),
    "required-option-missing": (12, 1, 1), "timestamp-request": (13, 0, 0xFF),
    "timestamp-reply": (14, 0, 0xFF), "address-mask-request": (17, 0, 0xFF),
    "address-mask-reply": (18, 0, 0xFF),
}
ICMP6_NAMES = {
    "destination-unreachable": (1, 0, 0xFF), "no-route": (1, 0, 0),
    "communication-prohibited": (1, 1, 1), "beyond-scope": (1, 2, 2),
    "address-unreachable": (1, 3, 3), "port-unreachable": (1, 4, 4),
    "failed-policy": (1, 5, 5), "reject-route": (1, 6, 6),
    "packet-too-big": (2, 0, 0xFF), "time-exceeded": (3, 0, 0xFF),
    "ttl-exceeded": (3, 0, 0xFF), "ttl-zero-during-transit": (3, 0, 0),
    "ttl-zero-during-reassembly": (3, 1, 1), "parameter-problem": (4, 0, 0xFF),
    "bad-header": (4, 0, 0), "unknown-header-type": (4, 1, 1),
    "unknown-option": (4, 2, 2), "echo-request": (128, 0, 0xFF),
    "ping": (128, 0, 0xFF), "echo-reply": (129, 0, 0xFF), "pong": (129, 0, 0xFF),
    "mld-listener-query": (130, 0, 0xFF), "mld-listener-report": (131, 0, 0xFF),
    "mld-listener-done": (132, 0, 0xFF), "mld-listener-reduction": (132, 0, 0xFF),
    "router-solicitation": (133, 0, 0xFF), "router-advertisement": (134, 0, 0xFF),
    "neighbour-solicitation": (135, 0, 0xFF), "neighbor-solicitation": (135, 0, 0xFF),
    "neighbour-advertisement": (136, 0, 0xFF), "neighbor-advertisement": (136, 0, 0xFF),
    "redirect": (137, 0, 0xFF),
}
# /etc/protocols names iptables dumps print (and its built-in table) → number.
PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv6-icmp": 58, "esp": 50,
             "ah": 51, "sctp": 132, "udplite": 136, "gre": 47, "igmp": 2, "ipip": 4,
             "ipencap": 4, "ipv6": 41, "ospf": 89, "ospfigp": 89, "pim": 103,
             "vrrp": 112, "l2tp": 115, "dccp": 33, "mh": 135, "ipv6-mh": 135,
             "rsvp": 46, "egp": 8, "ipcomp": 108, "carp": 112, "encap": 98,
             "mobility-header": 135, "ipv6-frag": 44, "ipv6-route": 43,
             "ipv6-opts": 60, "ipv6-nonxt": 59, "hopopt": 0}
_IFNAME = re.compile(r"[A-Za-z0-9_.@-]{1,15}")
_BARE_IFNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def address(text: str, family: int, at: Span) -> str | None:
    """``-s``/``-d`` text (``10.0.0.0/8``, ``10.0.0.0/255.0.0.0``, a host) as pfc writes
    it; None for "any address" (``0.0.0.0/0``)."""
    try:
        return _address(text, family)
    except Refuse as refused:
        raise Refuse(refused.reason, at) from None


@functools.lru_cache(maxsize=65536)
def _address(text: str, family: int) -> str | None:
    at = None
    host, _, mask = text.partition("/")
    try:
        addr = ipaddress.ip_address(_dotted(host) if family == 4 else host)
    except ValueError:
        raise Refuse(f"`{text}` is not an address (iptables resolves host names when "
                     "the rule is loaded; pfc takes addresses)", at) from None
    if addr.version != family:
        raise Refuse(f"`{text}` is an IPv{addr.version} address in an IPv{family} rule",
                     at)
    length = addr.max_prefixlen
    if mask:
        length = _mask_length(mask, addr.version, text, at)
    net = ipaddress.ip_network(f"{addr}/{length}", strict=False)
    if net.prefixlen == 0:
        return None
    return str(net.network_address) if net.prefixlen == addr.max_prefixlen else str(net)


def _dotted(text: str) -> str:
    """iptables' own reading of a dotted address (``xtables_numeric_to_ipaddr``):
    missing bytes at the end are 0 (``172.16.0`` is 172.16.0.0), each byte read with
    C's base prefixes (``0x10``, ``010``)."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(parts):
        return text
    try:
        numbers = [int(p, 16) if p[:2].lower() == "0x" else int(p, 8) if len(p) > 1
                   and p[0] == "0" else int(p) for p in parts]
    except ValueError:
        return text
    return ".".join(map(str, numbers + [0] * (4 - len(numbers))))


def _mask_length(mask: str, version: int, text: str, at: Span) -> int:
    if mask.isascii() and mask.isdigit():
        length = int(mask)
        if length > (32 if version == 4 else 128):
            raise Refuse(f"`{text}`: prefix length {length} is too long", at)
        return length
    try:
        return ipaddress.ip_network(f"0.0.0.0/{mask}" if version == 4 else f"::/{mask}"
                                    ).prefixlen
    except ValueError:
        raise Refuse(f"`{text}`: a mask that is not a prefix (pfc matches prefixes)",
                     at) from None


def port_range(text: str, at: Span) -> str:
    """``22``, ``1024:65535``, ``:1023``, ``1024:`` → ``22`` / ``1024-65535``."""
    lo, sep, hi = text.partition(":")
    low = port(lo, at) if lo else 0
    high = (port(hi, at) if hi else 65535) if sep else low
    if not 0 <= low <= high <= 65535:
        raise Refuse(f"`{text}` is not a port range", at)
    return str(low) if low == high else f"{low}-{high}"


def port(text: str, at: Span) -> int:
    """A port number or a well-known service name (pfc's fixed table, never
    /etc/services: docs/language.md "Hints")."""
    if text.isascii() and text.isdigit():
        return int(text)
    if text.lower() in SERVICES:
        return SERVICES[text.lower()]
    raise Refuse(f"`{text}` is not a port number or a service name pfc knows", at)


def interface(text: str, at: Span) -> str | None:
    """``eth0``, ``eth+`` (a prefix), ``+`` (any: None) as pfc writes them."""
    wild = text.endswith("+")
    name = text[:-1] if wild else text
    if wild and not name:
        return None
    if not _IFNAME.fullmatch(name):
        raise Refuse(f"interface name `{text}`: pfc takes 1 to 15 letters, digits and "
                     "`_ . @ -`", at)
    if wild:
        if not _BARE_IFNAME.fullmatch(name):
            raise Refuse(f"interface pattern `{text}`: pfc writes a pattern as a bare "
                         "name followed by `*`", at)
        return name + "*"
    return name if _BARE_IFNAME.fullmatch(name) else f'"{name}"'


def icmp_type(text: str, family: int, at: Span) -> tuple[int, int, int]:
    """``echo-request``, ``8``, ``3/1``, ``3/0:4`` → (type, lowest code, highest code);
    type 0xFF means any."""
    names = ICMP_NAMES if family == 4 else ICMP6_NAMES
    if text.lower() in names:
        return names[text.lower()]
    kind, _, code = text.partition("/")
    try:
        number = int(kind)
        if code:
            lo, _, hi = code.partition(":")
            return number, int(lo), int(hi) if hi else int(lo)
        return number, 0, 0xFF
    except ValueError:
        raise Refuse(f"ICMP type `{text}` is not a name iptables knows", at) from None


def protocol_number(text: str, at: Span) -> int:
    word = text.lower()
    if word.isascii() and word.isdigit() and int(word) < 256:
        return int(word)
    if word in PROTOCOLS:
        return PROTOCOLS[word]
    raise Refuse(f"protocol `{text}` is not a name pfc knows (give its number)", at)


def rate(text: str, at: Span) -> str:
    """``3/min`` → ``3/minute``; an hour or a day only when it is a whole number of
    minutes' worth (``60/hour`` → ``1/minute``)."""
    m = re.fullmatch(r"([0-9]+)(?:/(\w+))?", text)
    if not m:
        what = "a byte rate (pfc's rates count packets)" if re.match(r"[0-9]+[kmg]?b",
                                                                      text) else "not N/UNIT"
        raise Refuse(f"rate `{text}` is {what}", at)
    count, unit = int(m.group(1)), (m.group(2) or "sec").lower()
    seconds = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
               "h": 3600, "hour": 3600, "d": 86400, "day": 86400}.get(unit)
    if seconds is None:
        raise Refuse(f"rate unit `{unit}`", at)
    if seconds == 1:
        return f"{count}/second"
    if seconds == 60:
        return f"{count}/minute"
    per_minute, rest = divmod(count * 60, seconds)
    if rest or per_minute == 0:
        raise Refuse(f"rate `{text}`: pfc's rates are per second or per minute, and "
                     f"this is not a whole number per minute", at)
    return f"{per_minute}/minute"


def mark(text: str, at: Span, what: str = "mark") -> str:
    """``0x10`` or ``0x10/0xffffffff`` → ``16``; a mask of high bits
    (``0x100/0xff00``... no: ``0x10000/0xffff0000``) → the range it means; other masks
    are refused."""
    value, _, mask = text.partition("/")
    try:
        v = int(value, 0)
        m = int(mask, 0) if mask else 0xFFFFFFFF
    except ValueError:
        raise Refuse(f"{what} `{text}` is not a number", at) from None
    if m == 0xFFFFFFFF:
        return str(v)
    low = (~m) & 0xFFFFFFFF
    if m and (low & (low + 1)) == 0 and v & low == 0:  # high bits only
        return f"{v}-{v | low}"
    if m == 0:
        return "0-4294967295"
    raise Refuse(f"{what} `{text}`: a mask that is not the high bits of the mark "
                 "(pfc matches marks, ranges and lists)", at)
