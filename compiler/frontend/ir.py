"""The typed IR: what every pass, backend and the interpreter work on.

All nodes are frozen dataclasses and keep the span of the source text they come from.
Values are normalised by the checker: addresses are ``ipaddress`` networks (a host is a
/32 or /128), integers are sorted, merged inclusive ranges, payload values are bytes.

This module is also the *field catalogue*: what each match reads, where, and what it
needs (``FIELDS``). The interpreter, the checker, the backends and the language server
read it; nothing else describes a field.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import StrEnum

from pfc.frontend.source import NO_SPAN, Span

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Family(StrEnum):
    """Which frames a rule can match at all.

    ``ANY``: every frame, IP or not (protocol ``all`` with no IP match).
    ``IP``: IPv4 or IPv6. ``IP4``/``IP6``: one family (EtherType 0x0800 / 0x86DD).
    """

    ANY = "any"
    IP = "ip"
    IP4 = "ip4"
    IP6 = "ip6"

    @property
    def versions(self) -> frozenset[int]:
        return {Family.ANY: frozenset((4, 6)), Family.IP: frozenset((4, 6)),
                Family.IP4: frozenset((4,)), Family.IP6: frozenset((6,))}[self]

    @staticmethod
    def of_versions(versions: frozenset[int] | set[int]) -> Family:
        if versions == {4}:
            return Family.IP4
        if versions == {6}:
            return Family.IP6
        return Family.IP


class Verdict(StrEnum):
    PASS = "pass"
    DROP = "drop"


# --------------------------------------------------------------------------- protocols

PROTO_NUMBERS = {"icmp": 1, "igmp": 2, "ipip": 4, "tcp": 6, "egp": 8, "udp": 17,
                 "ipv6": 41, "rsvp": 46, "gre": 47, "esp": 50, "ah": 51, "icmp6": 58,
                 "ipv6-icmp": 58, "ospf": 89, "pim": 103, "vrrp": 112, "l2tp": 115,
                 "sctp": 132, "udplite": 136, "dccp": 33}
TCP, UDP, ICMP, ICMP6 = 6, 17, 1, 58

# The protocol keywords of a rule: (IP protocol number or None, families allowed).
PROTOCOLS: dict[str, tuple[int | None, Family]] = {
    "all": (None, Family.ANY),
    "ip": (None, Family.IP4),
    "ip6": (None, Family.IP6),
    "tcp": (TCP, Family.IP),
    "udp": (UDP, Family.IP),
    "icmp": (ICMP, Family.IP4),
    "icmp6": (ICMP6, Family.IP6),
}

TCP_FLAGS = {"fin": 0x01, "syn": 0x02, "rst": 0x04, "psh": 0x08,
             "ack": 0x10, "urg": 0x20, "ece": 0x40, "cwr": 0x80}

ICMP_TYPES = {
    "echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5,
    "echo-request": 8, "router-advertisement": 9, "router-solicitation": 10,
    "time-exceeded": 11, "parameter-problem": 12, "timestamp-request": 13,
    "timestamp-reply": 14, "info-request": 15, "info-reply": 16,
    "address-mask-request": 17, "address-mask-reply": 18,
}
ICMP6_TYPES = {
    "destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3,
    "parameter-problem": 4, "echo-request": 128, "echo-reply": 129,
    "mld-listener-query": 130, "mld-listener-report": 131, "mld-listener-done": 132,
    "nd-router-solicit": 133, "nd-router-advert": 134, "nd-neighbor-solicit": 135,
    "nd-neighbor-advert": 136, "nd-redirect": 137, "router-renumbering": 138,
    "mld2-listener-report": 143,
}


# ----------------------------------------------------------------------- field catalogue

class Layer(StrEnum):
    IP = "ip"  # read where it lies once the EtherType says IPv4/IPv6 (semantics.md)
    TRANSPORT = "transport"  # needs an accepted IP header, first fragment, the protocol
    STATE = "state"  # not in the frame: the connection tracker's state (IP frames only)


@dataclass(frozen=True)
class FieldInfo:
    name: str
    layer: Layer
    protocols: frozenset[int] | None  # transport fields: the rule protocols that allow it
    families: Family  # IP fields: families that have it
    values: str  # what the value may be, for diagnostics and hover
    maximum: int | None  # largest integer value, for range checks
    doc: str  # one line, plain English, for hover and docs


FIELDS: dict[str, FieldInfo] = {f.name: f for f in (
    FieldInfo("src", Layer.IP, None, Family.IP, "address, prefix, list or set", None,
              "source address (IPv4 bytes 12-15, IPv6 bytes 8-23 of the IP header)"),
    FieldInfo("dst", Layer.IP, None, Family.IP, "address, prefix, list or set", None,
              "destination address (IPv4 bytes 16-19, IPv6 bytes 24-39)"),
    FieldInfo("proto", Layer.IP, None, Family.IP, "protocol number, name, range or list", 255,
              "IPv4 protocol byte / IPv6 fixed header's Next Header"),
    FieldInfo("ttl", Layer.IP, None, Family.IP, "integer, range or list", 255,
              "IPv4 TTL / IPv6 hop limit"),
    FieldInfo("len", Layer.IP, None, Family.IP, "integer, range or list", 65535,
              "IPv4 total length / IPv6 40 + payload length, in bytes, as written"),
    FieldInfo("frag", Layer.IP, None, Family.IP4, "(no value)", None,
              "IPv4 fragment: more-fragments set or fragment offset not 0"),
    FieldInfo("sport", Layer.TRANSPORT, frozenset((TCP, UDP)), Family.IP,
              "port, range or list", 65535, "TCP/UDP source port"),
    FieldInfo("dport", Layer.TRANSPORT, frozenset((TCP, UDP)), Family.IP,
              "port, range or list", 65535, "TCP/UDP destination port"),
    FieldInfo("flags", Layer.TRANSPORT, frozenset((TCP,)), Family.IP,
              "flag names, `!name` for a clear flag", None,
              "TCP flags byte (fin syn rst psh ack urg ece cwr)"),
    FieldInfo("icmp-type", Layer.TRANSPORT, frozenset((ICMP, ICMP6)), Family.IP,
              "type number, name, range or list", 255, "ICMP / ICMPv6 type byte"),
    FieldInfo("payload", Layer.TRANSPORT, frozenset((TCP, UDP)), Family.IP,
              "byte, one-char string, or LEN bytes (hex or string)", None,
              "bytes after the TCP header (data offset honoured) or the UDP header"),
    FieldInfo("ct", Layer.STATE, None, Family.IP, "states: new established related invalid",
              None, "connection tracking state of the packet (`ct state new,established`)"),
)}

# ``ct state`` values, in the order nft and iptables print them.
CT_STATES = ("invalid", "established", "related", "new")


# ---------------------------------------------------------------------------- matches

@dataclass(frozen=True)
class AddrMatch:
    """``src``/``dst``: the address is inside one of ``prefixes``.

    A mixed IPv4/IPv6 list matches each packet against the entries of its own family.
    ``set_name`` names the ``define``/``set`` the list came from (for named sets/maps).
    """

    field: str  # "src" | "dst"
    prefixes: tuple[IPNetwork, ...]
    negated: bool = False
    span: Span = NO_SPAN
    set_name: str | None = None


@dataclass(frozen=True)
class IntMatch:
    """``sport dport proto ttl len icmp-type``: the value lies in one of ``ranges``.

    ``ranges`` are inclusive (lo, hi) pairs, sorted and merged by the checker.
    """

    field: str
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False
    span: Span = NO_SPAN
    set_name: str | None = None


@dataclass(frozen=True)
class FlagsMatch:
    """``flags``: every bit of ``set`` is 1 and every bit of ``clear`` is 0."""

    set: int
    clear: int
    negated: bool = False
    span: Span = NO_SPAN
    field: str = "flags"


@dataclass(frozen=True)
class FragMatch:
    """``frag``: IPv4 MF set or fragment offset not 0."""

    negated: bool = False
    span: Span = NO_SPAN
    field: str = "frag"


@dataclass(frozen=True)
class PayloadMatch:
    """``payload[offset:len(data)] == data``."""

    offset: int
    data: bytes
    negated: bool = False
    span: Span = NO_SPAN
    field: str = "payload"


@dataclass(frozen=True)
class CtMatch:
    """``ct state S,...``: the packet's connection state is one of ``states`` (names
    from ``CT_STATES``, in that order). Holds on IP frames only (docs/language.md
    "Connection state")."""

    states: tuple[str, ...]
    negated: bool = False
    span: Span = NO_SPAN
    field: str = "ct"


Match = AddrMatch | IntMatch | FlagsMatch | FragMatch | PayloadMatch | CtMatch


# ---------------------------------------------------------------- rates, limits, logs

@dataclass(frozen=True)
class Rate:
    """A token bucket (nft ``limit`` semantics, net/netfilter/nft_limit.c): it holds
    up to ``burst`` packets and starts full; it refills at ``count`` per ``unit``; a
    packet takes one token, and a packet that finds less than one is over the rate."""

    count: int
    unit: str = "second"  # "second" | "minute"
    burst: int = 5  # the bucket's size in packets (nft's and iptables' default is 5)

    @property
    def seconds(self) -> int:
        return 60 if self.unit == "minute" else 1

    @property
    def capacity(self) -> int:
        return self.burst


@dataclass(frozen=True)
class Limit:
    """``limit rate N/UNIT [burst B] [per src|dst]`` on a drop rule: the rule holds only
    on packets over the rate. One bucket per rule and IP version, and per address with
    ``per``."""

    rate: Rate
    per: str | None = None  # "src" | "dst"
    span: Span = NO_SPAN


# ---------------------------------------------------------------------------- actions

@dataclass(frozen=True)
class Drop:
    """``audit``: a would-be drop: the packet passes, counted and logged as a drop."""

    span: Span = NO_SPAN
    name: str = "drop"
    terminal: bool = True
    audit: bool = False


@dataclass(frozen=True)
class Pass:
    span: Span = NO_SPAN
    name: str = "pass"
    terminal: bool = True


@dataclass(frozen=True)
class Count:
    span: Span = NO_SPAN
    name: str = "count"
    terminal: bool = False


@dataclass(frozen=True)
class Redirect:
    """Rewrite the destination address (and port), fix checksums, then pass."""

    address: IPAddress
    port: int | None = None
    span: Span = NO_SPAN
    name: str = "redirect"
    terminal: bool = True


LOG_SNAP_DEFAULT, LOG_SNAP_MAX = 128, 256
LOG_PREFIX_MAX = 32


@dataclass(frozen=True)
class Log:
    """``log``: not terminal, like ``count``; sends an event (oracle ``events``) with
    ``prefix``, at most ``rate`` events (a token bucket per rule and IP version), each
    carrying the first ``snap`` bytes of the packet."""

    prefix: str = ""
    rate: Rate | None = None
    snap: int = LOG_SNAP_DEFAULT
    span: Span = NO_SPAN
    name: str = "log"
    terminal: bool = False


Action = Drop | Pass | Count | Redirect | Log


# ------------------------------------------------------------------------ rules, policy

@dataclass(frozen=True)
class Rule:
    """One rule. ``index`` is its position in the source policy (0-based) and stays
    the rule's identity through every pass (counters are keyed by it).

    ``proto`` is the IP protocol number the rule's protocol keyword asks for (None for
    ``all``/``ip``/``ip6``); ``family`` is what protocol, addresses and redirect target
    allow together (computed by the checker).
    """

    index: int
    action: Action
    family: Family
    proto: int | None
    matches: tuple[Match, ...]
    span: Span = NO_SPAN
    proto_name: str = "all"  # as written, for messages and printing
    line: int = 0  # 1-based source line, for reports and counters
    limit: Limit | None = None  # drop rules only: the rule holds on packets over the rate

    @property
    def terminal(self) -> bool:
        return self.action.terminal

    @property
    def transport_matches(self) -> tuple[Match, ...]:
        return tuple(m for m in self.matches if FIELDS[m.field].layer is Layer.TRANSPORT)



@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    default: Verdict = Verdict.PASS
    default_span: Span = NO_SPAN
    source: str = "<policy>"  # file name
    default_audit: bool = False  # `pfc load --audit`: a default drop passes, logged

    def rule(self, index: int) -> Rule:
        for r in self.rules:
            if r.index == index:
                return r
        raise KeyError(index)

    @property
    def count_rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if isinstance(r.action, Count))

    @property
    def stateful(self) -> bool:
        """Whether judging a frame depends on earlier frames or on time (``ct state``,
        ``limit``, ``log ... rate``): the oracle then judges ordered, timed frames."""
        return any(rule_stateful(r) for r in self.rules)


def flow_features(policy: Policy) -> list[str]:
    """The words of the features a per-frame formula cannot state (``pfc prove``,
    ``pfc diff``): ``log``, ``limit``, ``audit``, ``ct state``, in that order."""
    used = set()
    for r in policy.rules:
        used |= {"log"} if isinstance(r.action, Log) else set()
        used |= {"limit"} if r.limit is not None else set()
        used |= {"audit"} if isinstance(r.action, Drop) and r.action.audit else set()
        used |= {"ct state"} if any(isinstance(m, CtMatch) for m in r.matches) else set()
    used |= {"audit"} if policy.default_audit else set()
    return [w for w in ("log", "limit", "audit", "ct state") if w in used]


def rule_stateful(rule: Rule) -> bool:
    return (rule.limit is not None
            or (isinstance(rule.action, Log) and rule.action.rate is not None)
            or any(isinstance(m, CtMatch) for m in rule.matches))
