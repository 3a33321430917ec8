"""nft rulesets as read (text or JSON), before they are said in pfc's words.

A ruleset is tables of chains, sets and maps; a chain holds its hook (base chains) and
rules; a rule is a list of relational matches (``Rel``: a selector, possibly a
concatenation, an operator, a value) and statements (``Stmt``: a verdict, ``counter``,
``log``, ``dnat`` ...). Values keep their words: the converter knows each selector's
type and reads them then. Everything keeps its span for diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pfc.frontend.source import Span
from pfc.importers.model import Origin


@dataclass(frozen=True)
class Val:
    """``kind``: ``word`` (``22``, ``10.0.0.0/8``, ``10-20``, ``established``), ``str``
    (``"eth0"``), ``set`` (``{ a, b }``: ``items``), ``ref`` (``@name``), ``concat``
    (``a . b``: ``items``), ``flags`` (``syn,ack`` / ``syn | ack``: ``items``),
    ``range`` (``a - b`` spaced: ``items``), ``map`` (``key : value`` in a set:
    ``items`` = key, value), ``lookup`` (``SELECTOR map { ... }``: ``sel`` and
    ``items`` = the map value), ``number`` (a JSON number)."""

    kind: str
    text: str
    span: Span
    items: tuple[Val, ...] = ()
    sel: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rel:
    """``SELECTOR [& MASK] [OP] VALUE`` or ``SELECTOR vmap { ... }`` (``op`` ``vmap``);
    ``sel`` one selector name per part of a concatenation (``("ip saddr", "tcp
    dport")``)."""

    sel: tuple[str, ...]
    op: str
    value: Val
    span: Span
    mask: Val | None = None


@dataclass(frozen=True)
class Stmt:
    """A statement: ``name`` (``accept``, ``jump``, ``counter``, ``log``, ``dnat``,
    ``set`` for ``SELECTOR set VALUE`` ...), its options by keyword, its value."""

    name: str
    span: Span
    options: dict = field(default_factory=dict, hash=False, compare=False)
    value: Val | None = None
    sel: tuple[str, ...] = ()


Node = Rel | Stmt


@dataclass
class NftRule:
    nodes: list[Node]
    origin: Origin
    comment: str = ""


@dataclass
class NftSet:
    """A named set or map: its element type words, flags, elements (for a map, ``map``
    values with ``items`` key, value)."""

    name: str
    span: Span
    type: tuple[str, ...] = ()
    data: tuple[str, ...] = ()  # a map's value type
    flags: tuple[str, ...] = ()
    elements: list[Val] = field(default_factory=list)
    dynamic: bool = False  # timeouts, `dynamic`: filled from the packet path
    is_map: bool = False
    broken: str | None = None  # why pfc could not read its definition


@dataclass
class NftChain:
    name: str
    span: Span
    type: str | None = None  # filter, nat, route
    hook: str | None = None
    priority: int | None = None
    policy: str = "accept"
    devices: tuple[str, ...] = ()
    rules: list[NftRule] = field(default_factory=list)
    policy_span: Span | None = None
    comment: str = ""

    @property
    def base(self) -> bool:
        return self.hook is not None


@dataclass
class NftTable:
    family: str
    name: str
    span: Span
    chains: dict[str, NftChain] = field(default_factory=dict)
    sets: dict[str, NftSet] = field(default_factory=dict)
    flowtables: list[Span] = field(default_factory=list)


@dataclass
class Problem:
    message: str
    span: Span
    origin: Origin


@dataclass
class Ruleset:
    tables: list[NftTable] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    sources: dict = field(default_factory=dict)  # name → SourceFile (includes)

    def table(self, family: str, name: str, span: Span) -> NftTable:
        for t in self.tables:
            if t.family == family and t.name == name:
                return t
        table = NftTable(family, name, span)
        self.tables.append(table)
        return table


# The words of nft's rule grammar pfc tells apart (``pfc.importers.nft.rules``).
HEADERS = frozenset(("ip", "ip6", "tcp", "udp", "udplite", "sctp", "dccp", "icmp",
                     "icmpv6", "igmp", "ether", "vlan", "arp", "th", "ah", "esp", "comp",
                     "dst", "frag", "hbh", "mh", "srh", "gre", "gretap", "vxlan",
                     "geneve", "cgroupv2", "socket", "osf", "ipsec", "tunnel"))
META_KEYS = frozenset(("iif", "iifname", "oif", "oifname", "mark", "l4proto", "nfproto",
                       "protocol", "pkttype", "skuid", "skgid", "length", "priority",
                       "cpu", "iifgroup", "oifgroup", "cgroup", "iiftype", "oiftype",
                       "nftrace", "rtclassid", "secmark", "random", "ibrname",
                       "obrname", "ibriport", "obriport", "time", "day", "hour", "sdif",
                       "sdifname", "broute", "ibrpvid", "ibrvproto", "ipsec"))
VERDICTS = frozenset(("accept", "drop", "continue", "return"))
STATEMENTS = frozenset(("reject", "counter", "log", "limit", "jump", "goto", "queue",
                        "dnat", "snat", "masquerade", "redirect", "notrack", "comment",
                        "flow", "dup", "fwd", "tproxy", "synproxy", "quota", "meter",
                        "add", "update", "delete", "xt", "last"))
OPS = {"==": "==", "!=": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "eq": "==",
       "ne": "!=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "!": "!"}
