"""The typed IR: what every pass, backend and the interpreter work on.

All nodes are frozen dataclasses and keep the span of the source text they come from.
Values are normalised by the checker: addresses are ``ipaddress`` networks (a host is a
/32 or /128), integers are sorted, merged inclusive ranges, payload values are bytes.

The field catalogue and the language's names (``pfc.frontend.fields``) are
re-exported here, so ``ir.FIELDS``, ``ir.TCP`` and ``ir.Family`` are one import for
every reader. Whole firewalls (v2) add hook blocks and chains (``Policy.hook``,
``Policy.chains``, ``pfc.frontend.firewall``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import StrEnum

from pfc.frontend.fields import (  # noqa: F401  (re-exported: the IR's vocabulary)
    ADDR_TYPES,
    CT_STATES,
    CT_STATUSES,
    ETHER_TYPES,
    FIELDS,
    ICMP,
    ICMP6,
    ICMP6_TYPES,
    ICMP_TYPES,
    PROTO_NUMBERS,
    REJECT_DEFAULT,
    REJECTS,
    TCP,
    TCP_FLAGS,
    UDP,
    Family,
    FieldInfo,
    Layer,
)
from pfc.frontend.options.queue import Queue
from pfc.frontend.source import NO_SPAN, Span

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Verdict(StrEnum):
    PASS = "pass"
    DROP = "drop"

# --------------------------------------------------------------------------- protocols

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


@dataclass(frozen=True)
class CtStatusMatch:
    """``ct status S,...``: every bit named is set in the connection's status (nft's
    ``ct status dnat``; several names: all of them). False on untracked packets."""

    statuses: tuple[str, ...]  # names from CT_STATUSES, in that order
    negated: bool = False
    span: Span = NO_SPAN
    field: str = "ct-status"


@dataclass(frozen=True)
class IfaceMatch:
    """``iif`` / ``oif``: the interface's name is one of ``names``; a name ending in
    ``*`` matches every name that starts with the rest (nft ``iifname "eth*"``,
    iptables ``-i eth+``). Absent (false, negated or not) where the packet has no such
    interface (``oif`` before routing, ``iif`` on a packet the host sent)."""

    field: str  # "iif" | "oif"
    names: tuple[str, ...]
    negated: bool = False
    span: Span = NO_SPAN
    set_name: str | None = None


@dataclass(frozen=True)
class MacMatch:
    """``ether-src`` / ``ether-dst``: the address is one of ``macs`` (6 bytes each)."""

    field: str  # "ether-src" | "ether-dst"
    macs: tuple[bytes, ...]
    negated: bool = False
    span: Span = NO_SPAN
    set_name: str | None = None


@dataclass(frozen=True)
class AddrTypeMatch:
    """``dst-type`` / ``src-type``: the address is of one of ``types`` (ADDR_TYPES) to
    the host the packet is on (semantics.md "The path of a packet")."""

    field: str  # "dst-type" | "src-type"
    types: tuple[str, ...]
    negated: bool = False
    span: Span = NO_SPAN


Match = (AddrMatch | IntMatch | FlagsMatch | FragMatch | PayloadMatch | CtMatch
         | CtStatusMatch | IfaceMatch | MacMatch | AddrTypeMatch)


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


@dataclass(frozen=True)
class Reject:
    """Drop, and send a reply (``REJECTS``): a TCP RST or an ICMP/ICMPv6 destination
    unreachable with the code of ``kind`` (semantics.md "What reject sends")."""

    kind: str = REJECT_DEFAULT
    span: Span = NO_SPAN
    name: str = "reject"
    terminal: bool = True


@dataclass(frozen=True)
class Nat:
    """A nat block's decision for the connection (semantics.md "NAT"): ``dnat`` /
    ``snat`` to ``address`` (and ``port``), ``masquerade`` (the leaving interface's
    address), ``redirect`` (the host itself, ``port``). ``address`` is None for the
    last two."""

    kind: str  # "dnat" | "snat" | "masquerade" | "redirect"
    address: IPAddress | None = None
    port: int | None = None
    span: Span = NO_SPAN
    terminal: bool = True

    @property
    def name(self) -> str:
        return self.kind


@dataclass(frozen=True)
class Mark:
    """``mark ... to N``: set the packet's mark, then go on (not terminal)."""

    value: int
    span: Span = NO_SPAN
    name: str = "mark"
    terminal: bool = False


@dataclass(frozen=True)
class Notrack:
    """``notrack``: conntrack skips the packet (``ct state untracked``); goes on."""

    span: Span = NO_SPAN
    name: str = "notrack"
    terminal: bool = False


@dataclass(frozen=True)
class Jump:
    """``jump NAME`` / ``goto NAME``: run the chain ``chain`` (``Policy.chains``). A
    decision inside it is the rule's; otherwise ``jump`` goes on with the next rule and
    ``goto`` ends with the hook's default. ``terminal`` is False: whether it decides
    depends on the chain (``pfc.passes.inline_chains`` turns it into plain rules)."""

    chain: str
    goto: bool = False
    span: Span = NO_SPAN
    terminal: bool = False

    @property
    def name(self) -> str:
        return "goto" if self.goto else "jump"


Action = Drop | Pass | Count | Redirect | Log | Reject | Nat | Mark | Notrack | Jump | Queue


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
    # drop/reject: the rule holds on packets over the rate; pass: on those within it
    limit: Limit | None = None

    @property
    def terminal(self) -> bool:
        return self.action.terminal

    @property
    def transport_matches(self) -> tuple[Match, ...]:
        return tuple(m for m in self.matches if FIELDS[m.field].layer is Layer.TRANSPORT)


@dataclass(frozen=True)
class Hook:
    """The block a v2 rule list is (docs/language.md "Hook blocks"): ``name`` one of
    ``pfc.frontend.hooks.BLOCKS`` (``input``, ``nat prerouting``, ``ingress`` ...),
    ``devices`` for ``ingress``/``egress`` (empty: the device given at load time)."""

    name: str
    devices: tuple[str, ...] = ()
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Chain:
    """``chain NAME { ... }``: rules reached only by ``jump``/``goto``; no default."""

    name: str
    rules: tuple[Rule, ...]
    span: Span = NO_SPAN


@dataclass(frozen=True)
class Policy:
    """One ordered rule list at one hook: a v1 file (``hook`` None: the target and
    ``--hook`` place it), or one block of a v2 file with the file's named ``chains``
    (``pfc.frontend.firewall``); rule indexes are unique across a whole file."""

    rules: tuple[Rule, ...]
    default: Verdict = Verdict.PASS
    default_span: Span = NO_SPAN
    source: str = "<policy>"  # file name
    default_audit: bool = False  # `pfc load --audit`: a default drop passes, logged
    hook: Hook | None = None
    chains: tuple[Chain, ...] = ()

    def chain(self, name: str) -> Chain:
        for c in self.chains:
            if c.name == name:
                return c
        raise KeyError(name)

    def rule(self, index: int) -> Rule:
        for r in self.rules:
            if r.index == index:
                return r
        raise KeyError(index)

    @property
    def count_rules(self) -> tuple[Rule, ...]:
        every = self.rules + tuple(r for c in self.chains for r in c.rules)
        return tuple({r.index: r for r in every if isinstance(r.action, Count)}.values())

    @property
    def stateful(self) -> bool:
        """Whether judging a frame depends on earlier frames or on time (``ct state``,
        ``limit``, ``log ... rate``): the oracle then judges ordered, timed frames."""
        return any(rule_stateful(r) for r in self.rules)


def flow_features(policy: Policy) -> list[str]:
    """The words of the features a per-frame formula cannot state (``pfc prove``,
    ``pfc diff``): ``log``, ``limit``, ``audit``, ``ct state``, ``queue``, in that order."""
    used = set()
    for r in policy.rules:
        used |= {w for w, kind in (("log", Log), ("queue", Queue)) if isinstance(r.action, kind)}
        used |= {"limit"} if r.limit is not None else set()
        used |= {"audit"} if isinstance(r.action, Drop) and r.action.audit else set()
        used |= {"ct state"} if any(isinstance(m, CtMatch) for m in r.matches) else set()
    used |= {"audit"} if policy.default_audit else set()
    return [w for w in ("log", "limit", "audit", "ct state", "queue") if w in used]


def rule_stateful(rule: Rule) -> bool:
    return (rule.limit is not None or isinstance(rule.action, Queue)
            or (isinstance(rule.action, Log) and rule.action.rate is not None)
            or any(isinstance(m, CtMatch) for m in rule.matches))
