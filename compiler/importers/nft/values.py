"""nft values in pfc's spelling, by type: addresses and prefixes (ranges made prefixes),
ports and services, protocols, ICMP types and codes, conntrack states, interface names
(``"eth*"`` patterns), marks, MAC addresses. Sets are read element by element, named
sets (``@name``) through the ruleset's definitions. ``Refuse`` for what pfc cannot say.
"""

from __future__ import annotations

import ipaddress

from pfc.frontend.fields import ICMP6_TYPES, ICMP_TYPES
from pfc.frontend.matches import SERVICES
from pfc.importers.model import Refuse
from pfc.importers.nft.ast import Val

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58, "ipv6-icmp": 58, "esp": 50,
             "ah": 51, "sctp": 132, "udplite": 136, "gre": 47, "igmp": 2, "dccp": 33,
             "comp": 108, "ipip": 4, "ipv6": 41, "ospf": 89, "pim": 103, "vrrp": 112,
             "l2tp": 115, "mh": 135, "ipv6-nonxt": 59, "ipv6-frag": 44}
NFT_ICMP_TYPES = {**ICMP_TYPES}
NFT_ICMP6_TYPES = {**ICMP6_TYPES, "mld-listener-reduction": 132, "nd-router-solicit": 133,
                   "nd-router-advert": 134, "nd-neighbor-solicit": 135,
                   "nd-neighbor-advert": 136, "nd-redirect": 137, "ind-neighbor-solicit": 141,
                   "ind-neighbor-advert": 142, "mld2-listener-report": 143}
ICMP_CODES = {"net-unreachable": 0, "host-unreachable": 1, "prot-unreachable": 2,
              "port-unreachable": 3, "frag-needed": 4, "net-prohibited": 9,
              "host-prohibited": 10, "admin-prohibited": 13}
ICMP6_CODES = {"no-route": 0, "admin-prohibited": 1, "addr-unreachable": 3,
               "port-unreachable": 4, "policy-fail": 5, "reject-route": 6}
CT_STATES = ("invalid", "established", "related", "new", "untracked")
CT_STATUS = {"expected": "expected", "seen-reply": "seen-reply", "confirmed": "confirmed",
             "snat": "snat", "dnat": "dnat"}
FIB_TYPES = ("local", "broadcast", "multicast", "unicast")


def leaves(val: Val, sets: dict) -> list[Val]:
    """The single values of ``val``: a set's elements, a named set's (``sets`` by
    name), or the value itself."""
    if val.kind == "set":
        return [x for item in val.items for x in leaves(item, sets)]
    if val.kind == "ref":
        found = sets.get(val.text)
        if found is None:
            raise Refuse(f"@{val.text}: no set of that name in the table", val.span)
        if found.broken:
            raise Refuse(f"@{val.text}: {found.broken}", val.span)
        if found.dynamic:
            raise Refuse(f"@{val.text}: a set the packet path fills (timeouts, `dynamic`) "
                         "is state pfc does not keep", val.span)
        return [x for item in found.elements for x in leaves(item, sets)]
    return [val]


def number(val: Val, names: dict | None = None, what: str = "number") -> int:
    text = val.text.lower()
    if names and text in names:
        return names[text]
    try:
        return int(text, 0)
    except ValueError:
        raise Refuse(f"`{val.text}` is not a {what} pfc knows", val.span) from None


def int_range(val: Val, names: dict | None = None, what: str = "number") -> str:
    """``22``, ``1024-65535``, a spaced range, a name → pfc's ``lo-hi`` text."""
    if val.kind == "range":
        lo, hi = (number(v, names, what) for v in val.items)
    elif val.kind == "word" and "-" in val.text[1:] and val.text.lower() not in (names or {}):
        a, b = val.text.split("-", 1)
        lo, hi = number(Val("word", a, val.span), names, what), number(
            Val("word", b, val.span), names, what)
    else:
        lo = hi = number(val, names, what)
    if lo > hi:
        raise Refuse(f"`{val.text}`: a range whose start is past its end", val.span)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def port_range(val: Val) -> str:
    return int_range(val, SERVICES, "port")


def addresses(val: Val, family: int | None) -> list[str]:
    """One address, prefix or range → pfc prefixes (a range summarised)."""
    text = val.text
    if val.kind == "range":
        lo, hi = (_address(v.text, family, val) for v in val.items)
        return _summary(lo, hi, val)
    if "-" in text and not text.startswith("-"):
        a, b = text.split("-", 1)
        return _summary(_address(a, family, val), _address(b, family, val), val)
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise Refuse(f"`{text}` is not an address or prefix (host names are resolved by "
                     "nft when it loads; pfc takes addresses)", val.span) from None
    if family is not None and net.version != family:
        raise Refuse(f"`{text}` is not an IPv{family} address", val.span)
    return [str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)]


def _address(text: str, family: int | None, val: Val):
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise Refuse(f"`{text}` is not an address", val.span) from None
    if family is not None and addr.version != family:
        raise Refuse(f"`{text}` is not an IPv{family} address", val.span)
    return addr


def _summary(lo, hi, val: Val) -> list[str]:
    if lo.version != hi.version or lo > hi:
        raise Refuse(f"`{val.text}` is not an address range", val.span)
    return [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n)
            for n in ipaddress.summarize_address_range(lo, hi)]


def interface(val: Val) -> str:
    """``"eth0"``, ``eth0``, ``"eth*"`` → pfc's interface word."""
    from pfc.importers.iptables.values import interface as ipt_interface
    text = val.text
    if text.endswith("*") and not text.endswith("\\*"):
        return ipt_interface(text[:-1] + "+", val.span)
    name = ipt_interface(text, val.span)
    if name is None:
        raise Refuse(f"interface name `{text}`", val.span)
    return name


def mac(val: Val) -> str:
    text = val.text.lower()
    parts = text.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise Refuse(f"`{val.text}` is not a MAC address", val.span)
    return text
