"""``interface NAME [address A/LEN | { A/LEN, ... }] [gateway ADDR]``: the host model of
a whole firewall (docs/language.md "The host, for the interpreter"), checked.

Decisions: an address without ``/LEN`` is a host address (/32, /128, as ``ip addr add``
takes it); addresses keep their host bits (``203.0.113.2/24`` is the address
203.0.113.2 on 203.0.113.0/24); addresses are written out, not ``$names``. A gateway
is one address of a family the interface has an address of (when it has any); the host
has at most one gateway per IP version. ``interface lo`` adds addresses to the loopback,
which always has 127.0.0.1/8 and ::1/128.
"""

from __future__ import annotations

import ipaddress

from pfc.frontend.diagnostics import Diagnostic, Note, error
from pfc.frontend.firewall.names import device_value
from pfc.frontend.firewall.ruleset import LOOPBACK, LOOPBACK_ADDRESSES, Interface
from pfc.frontend.syntax import InterfaceDecl, Value
from pfc.frontend.text import shorten


class Host:
    """The interfaces declared so far, and the gateways per IP version."""

    def __init__(self, diags: list[Diagnostic]):
        self.diags = diags
        self.interfaces: dict[str, Interface] = {}
        self.gateways: dict[int, Interface] = {}

    def declare(self, decl: InterfaceDecl) -> None:
        name = device_value(decl.name, self.diags)
        if name is None:
            return
        first = self.interfaces.get(name)
        if first is not None:
            self.diags.append(error(f"interface `{name}` is declared twice", decl.name.span,
                                    notes=(Note("first declared here", first.span),),
                                    code="redefined", hint="give it one line, with "
                                    "`address { A/LEN, ... }` for several addresses"))
            return
        addresses = _addresses(decl.addresses, self.diags)
        if addresses is None:
            return
        if name == LOOPBACK:
            addresses = tuple(dict.fromkeys(LOOPBACK_ADDRESSES + addresses))
        gateway = self._gateway(decl, name, addresses)
        if gateway is False:
            return
        iface = Interface(name, addresses, gateway, decl.span)
        self.interfaces[name] = iface
        if gateway is not None:
            self.gateways[gateway.version] = iface

    def _gateway(self, decl: InterfaceDecl, name: str, addresses):
        value = decl.gateway
        if value is None:
            return None
        address = _host(value, self.diags)
        if address is None:
            return False
        families = {a.version for a in addresses}
        if families and address.version not in families:
            self.diags.append(error(f"`{name}` has no IPv{address.version} address for an "
                                    f"IPv{address.version} gateway", value.span,
                                    code="bad-gateway"))
            return False
        first = self.gateways.get(address.version)
        if first is not None:
            self.diags.append(error(f"the host already has an IPv{address.version} gateway "
                                    f"(on `{first.name}`)", value.span, code="bad-gateway",
                                    notes=(Note("given here", first.span),),
                                    hint="pfc models one default route per IP version"))
            return False
        return address


def _addresses(value: Value | None, diags: list[Diagnostic]):
    if value is None:
        return ()
    items = value.items if value.kind == "list" else (value,)
    out = []
    for item in items:
        address = _interface_address(item, diags)
        if address is None:
            return None
        out.append(address)
    return tuple(dict.fromkeys(out))


def _interface_address(value: Value, diags: list[Diagnostic]):
    if value.kind not in ("ipv4", "ipv6"):
        shown = ("$" if value.kind == "var" else "") + value.text
        diags.append(error(f"an interface address is an IPv4 or IPv6 address with its "
                           f"prefix length (`10.0.0.1/24`); not `{shorten(shown)}`",
                           value.span, code="bad-address",
                           hint="write the address itself here ($names are not read)"
                           if value.kind == "var" else None))
        return None
    try:
        return ipaddress.ip_interface(value.text)
    except ValueError:
        diags.append(error(f"`{shorten(value.text)}` is not a valid interface address",
                           value.span, code="bad-address"))
        return None


def _host(value: Value, diags: list[Diagnostic]):
    if value.kind in ("ipv4", "ipv6") and "/" not in value.text:
        try:
            return ipaddress.ip_address(value.text)
        except ValueError:
            pass
    diags.append(error(f"a gateway is one address (no prefix length, no list); not "
                       f"`{shorten(value.text or 'a list')}`", value.span,
                       code="bad-gateway"))
    return None
