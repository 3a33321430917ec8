"""The host a whole firewall runs on, as the path interpreter sees it: interfaces with
addresses and MACs, a default route, forwarding on or off; the routing decision and the
address types (semantics.md "The path of a packet", "The host model").

Built from a file's ``interface`` lines (``Ruleset.interfaces``); an interface its rules
name but no line describes gets test addresses of its own (``host_of``), so every file
has a host to follow packets through. ``lo`` is always there.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pfc.frontend import ir
from pfc.frontend.firewall.ruleset import LOOPBACK, LOOPBACK_ADDRESSES, IPInterface, Ruleset

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
ALL_HOSTS = ipaddress.IPv4Address("224.0.0.1")
# multicast groups every host joins: all-hosts, all-nodes (link and interface scope)
JOINED = frozenset((ALL_HOSTS, ipaddress.IPv6Address("ff02::1"),
                    ipaddress.IPv6Address("ff01::1")))


def _zero_ok(source: Address, destination: Address) -> bool:
    """0.0.0.0 → 0.0.0.0 is taken as a broadcast; 0.0.0.0 may send to 255.255.255.255
    and 224.0.0.1 (DHCP, IGMP)."""
    zero = ipaddress.IPv4Address(0)
    if destination == zero:
        return source == zero
    return destination in (LIMITED_BROADCAST, ALL_HOSTS)


@dataclass(frozen=True)
class Port:
    """One interface: name, addresses, its MAC and its neighbour's (the next hop on the
    link, which test frames come from and go to)."""

    name: str
    addresses: tuple[IPInterface, ...]
    mac: bytes
    peer_mac: bytes
    gateway: Address | None = None


@dataclass(frozen=True)
class Route:
    kind: str  # "local" | "forward" | "unreachable"
    port: Port | None = None  # the leaving interface (forward; local: the one addressed)
    next_hop: Address | None = None


@dataclass(frozen=True)
class Host:
    ports: tuple[Port, ...]
    forwards: bool = False

    def port(self, name: str) -> Port | None:
        return next((p for p in self.ports if p.name == name), None)

    def is_local(self, address: Address) -> bool:
        if address.is_loopback:
            return True
        return any(a.ip == address for p in self.ports for a in p.addresses)

    def is_broadcast(self, address: Address) -> bool:
        if address == LIMITED_BROADCAST:
            return True
        return any(a.version == 4 and a.network.prefixlen < 31
                   and a.network.broadcast_address == address
                   for p in self.ports for a in p.addresses)

    def addr_type(self, address: Address) -> str:
        """nft's ``fib daddr type`` / iptables' ``addrtype`` for this host."""
        if self.is_local(address):
            return "local"
        if self.is_broadcast(address):
            return "broadcast"
        if address.is_multicast:
            return "multicast"
        return "unicast"

    def martian(self, source: Address, destination: Address, iif: str) -> bool:
        """Whether routing drops a received packet for its addresses (``ip_route_input_
        slow``, ``ip6_route_input`` with the default sysctls: ``accept_local`` 0,
        ``route_localnet`` 0, no multicast routing), measured on Linux 6.18:

        - a multicast or 255.255.255.255 source, a loopback source or destination from
          a device other than ``lo``, a source that is one of the host's own;
        - 0.0.0.0: as a destination only from 0.0.0.0 (a broadcast), as a source only
          to 255.255.255.255 or 224.0.0.1;
        - multicast destinations other than the groups every host joins (224.0.0.1,
          ff02::1, ff01::1); IPv6 link-local destinations the host does not hold and
          link-local sources it would have to forward."""
        if source.version == 6 and destination.is_unspecified:
            return True
        if iif == "lo":
            return False
        if source.is_multicast or source == LIMITED_BROADCAST or source.is_loopback \
                or destination.is_loopback:
            return True
        if destination.is_multicast:
            return destination not in JOINED
        if source.version == 4 and (source.is_unspecified or destination.is_unspecified):
            return not _zero_ok(source, destination)
        if destination.is_link_local and not self.is_local(destination):
            return True
        if source.is_link_local and not self.is_local(destination):
            return True
        return self.is_local(source)

    def route(self, destination: Address) -> Route:
        """The routing decision for a packet to ``destination`` (step 5 of "Received
        packets"): local, forwarded out of a port to a next hop, or unreachable. An
        unspecified destination (0.0.0.0, ::) is the host itself, as a local socket
        sending to it is answered by the host (a received one is ``martian``)."""
        if (self.is_local(destination) or self.is_broadcast(destination)
                or destination.is_multicast or destination.is_unspecified):
            owner = next((p for p in self.ports for a in p.addresses
                          if a.ip == destination), self.port(LOOPBACK))
            return Route("local", owner)
        for port in self.ports:
            if port.name != LOOPBACK and any(destination in a.network for a in port.addresses
                                             if a.version == destination.version):
                return Route("forward", port, destination)
        for port in self.ports:
            if port.gateway is not None and port.gateway.version == destination.version:
                return Route("forward", port, port.gateway)
        return Route("unreachable")

    def source_for(self, port: Port, toward: Address | None) -> Address | None:
        """The address the host sends from on ``port`` toward ``toward`` (masquerade,
        ICMP errors of forwarded packets): the first address of the port whose subnet
        holds it, else the port's first of its family."""
        version = toward.version if toward is not None else 4
        same = [a for a in port.addresses if a.version == version]
        inside = [a for a in same if toward is not None and toward in a.network]
        chosen = (inside or same or [None])[0]
        return None if chosen is None else chosen.ip


    def loopback_source(self, toward: Address) -> Address | None:
        """``masquerade`` of a packet leaving by ``lo``: lo's addresses are host-scoped,
        so IPv4 takes the first interface's first address (``inet_select_addr``: the
        first device in order with a universe-scope address); IPv6 the destination
        itself when it is the host's (source address selection, rule 1), else the
        first interface's first global address of the family."""
        if toward.version == 6 and self.is_local(toward):
            return toward
        return next((a.ip for p in self.ports if p.name != LOOPBACK for a in p.addresses
                     if a.version == toward.version and not a.ip.is_link_local), None)


def mac_of(n: int, peer: bool = False) -> bytes:
    """Locally administered test MACs: 02:00:00:00:NN:01 for the host's port NN, :02 for
    its neighbour."""
    return bytes((2, 0, 0, 0, n & 0xFF, 2 if peer else 1))


def host_of(ruleset: Ruleset) -> Host:
    """The host model of a file: its ``interface`` lines, plus an interface for every
    name its rules use that no line describes (a /24 of 10.250.N.0 and fd00:250:N::/64
    each, so packets can be routed to them), plus ``lo``."""
    described = {i.name: i for i in ruleset.interfaces}
    names = list(described) + [n for n in _named(ruleset) if n not in described]
    ports = [Port(LOOPBACK, LOOPBACK_ADDRESSES, bytes(6), bytes(6))]
    for n, name in enumerate(name for name in names if name != LOOPBACK):
        iface = described.get(name)
        addresses = iface.addresses if iface and iface.addresses else _test_addresses(n)
        gateway = iface.gateway if iface else None
        ports.append(Port(name, addresses, mac_of(n + 1), mac_of(n + 1, True), gateway))
    return Host(tuple(ports), ruleset.forwards)


def _test_addresses(n: int) -> tuple[IPInterface, ...]:
    return (ipaddress.ip_interface(f"10.250.{n}.1/24"),
            ipaddress.ip_interface(f"fd00:250:{n}::1/64"))


def _named(ruleset: Ruleset) -> list[str]:
    """Interface names the rules and block headers use, wildcards left out, in order."""
    names: list[str] = []
    for policy in ruleset.lists:
        names += list(policy.hook.devices)
    for rule in ruleset.rules:
        for m in rule.matches:
            if isinstance(m, ir.IfaceMatch):
                names += [n for n in m.names if not n.endswith("*")]
    return list(dict.fromkeys(names))
