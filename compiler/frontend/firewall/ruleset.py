"""A whole firewall (v2): the rule lists of one file, one per hook block, its named
chains and the host model its ``interface`` lines describe (docs/language.md "Whole
firewalls"). Each list is an ``ir.Policy`` with its ``hook`` set, so everything that
compiles one list (every backend, the v1 interpreter) takes it as it is; the path
interpreter (``pfc.oracle.path``) and multi-hook backends take the whole ``Ruleset``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.firewall.hooks import BLOCKS, ORDER
from pfc.frontend.source import NO_SPAN, Span

IPInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface

LOOPBACK = "lo"
LOOPBACK_ADDRESSES = (ipaddress.ip_interface("127.0.0.1/8"), ipaddress.ip_interface("::1/128"))


@dataclass(frozen=True)
class Interface:
    """``interface NAME [address A/LEN, ...] [gateway ADDR]``: for the interpreter and
    ``pfc verify`` only; no artifact depends on it."""

    name: str
    addresses: tuple[IPInterface, ...] = ()
    gateway: ir.IPAddress | None = None
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Ruleset:
    """``lists`` in path order (``hooks.ORDER``; for ``ingress``/``egress``, one list per
    device set); every list carries ``chains`` too."""

    lists: tuple[ir.Policy, ...]
    chains: tuple[ir.Chain, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    source: str = "<policy>"

    def blocks(self, name: str) -> tuple[ir.Policy, ...]:
        """The lists of block ``name`` (several only for ``ingress``/``egress``)."""
        return tuple(p for p in self.lists if p.hook is not None and p.hook.name == name)

    def block(self, name: str, device: str | None = None) -> ir.Policy | None:
        """The list of block ``name`` that applies on ``device`` (device hooks: the
        list naming it, else one with no device), or None."""
        lists = self.blocks(name)
        if not BLOCKS[name].per_device:
            return lists[0] if lists else None
        named = [p for p in lists if device is not None and device in p.hook.devices]
        return (named or [p for p in lists if not p.hook.devices] or [None])[0]

    @property
    def forwards(self) -> bool:
        """A host forwards when its file has a ``forward`` or a nat block."""
        return any(p.hook.name == "forward" or BLOCKS[p.hook.name].kind == "nat"
                   for p in self.lists)

    @property
    def rules(self) -> tuple[ir.Rule, ...]:
        """Every rule of the file, lists and chains, in index order."""
        every = [r for p in self.lists for r in p.rules]
        every += [r for c in self.chains for r in c.rules]
        return tuple(sorted(every, key=lambda r: r.index))

    def interface(self, name: str) -> Interface | None:
        if name == LOOPBACK:
            return next((i for i in self.interfaces if i.name == name),
                        Interface(LOOPBACK, LOOPBACK_ADDRESSES))
        return next((i for i in self.interfaces if i.name == name), None)


def path_order(policy: ir.Policy) -> int:
    """Sort key of a list by its block's place on the path."""
    return ORDER.index(policy.hook.name) if policy.hook is not None else -1
