"""The AST: the policy as written, before names are resolved or types checked.

``pfc fmt`` prints it back, the checker turns it into IR, the language server reads
names and spans from it. Every node keeps its span.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend.source import SourceFile, Span


@dataclass(frozen=True)
class Value:
    """A value as written.

    ``kind`` is one of ``ipv4 ipv6 number string var range name list mac``; ``text`` is the
    source text (for ``var`` without the ``$``); ``items`` holds a list's items or a
    range's two ends.
    """

    kind: str
    text: str
    span: Span
    items: tuple[Value, ...] = ()


@dataclass(frozen=True)
class Define:
    name: str
    name_span: Span
    value: Value
    span: Span


@dataclass(frozen=True)
class SetDecl:
    name: str
    name_span: Span
    path: Value  # kind "string"
    span: Span


@dataclass(frozen=True)
class Default:
    verdict: str
    verdict_span: Span
    span: Span


@dataclass(frozen=True)
class Flag:
    name: str
    negated: bool
    span: Span


@dataclass(frozen=True)
class MatchNode:
    """One match. ``field`` is the keyword (``src`` ... ``payload``, ``ct`` for ``ct
    state`` with its states as a list ``value``); ``value`` is None for ``frag`` and
    ``flags``; ``flags`` holds the flag list; ``offset`` and
    ``length`` the payload window (length None means one byte)."""

    field: str
    negated: bool
    field_span: Span
    span: Span
    value: Value | None = None
    flags: tuple[Flag, ...] = ()
    offset: Value | None = None
    length: Value | None = None


@dataclass(frozen=True)
class RateNode:
    """``N/UNIT`` as written (``10/second``)."""

    count: Value  # kind "number"
    unit: Value  # kind "name"
    span: Span


@dataclass(frozen=True)
class OptionNode:
    """An option after the matches. ``kind`` is ``prefix rate snap limit audit``;
    ``value`` holds prefix's string or snap's number, ``rate`` the rate of ``rate`` and
    ``limit``, ``burst`` and ``per`` (a name ``src``/``dst``) belong to ``limit``."""

    kind: str
    keyword_span: Span
    span: Span
    value: Value | None = None
    rate: RateNode | None = None
    burst: Value | None = None
    per: Value | None = None


@dataclass(frozen=True)
class Target:
    """``to ADDR[:PORT]``; ``address`` is None for ``to :PORT`` (``redirect`` in a nat
    block) and holds the number of ``mark ... to N``."""

    address: Value | None
    port: Value | None
    span: Span
    bracketed: bool = False


@dataclass(frozen=True)
class RuleNode:
    """One rule. v2: ``chain`` is the name after ``jump``/``goto``; ``reject_with``
    holds each ``with R`` (``OptionNode`` of kind ``with``, its ``value`` the name)."""

    action: str
    action_span: Span
    protocol: str | None
    protocol_span: Span | None
    matches: tuple[MatchNode, ...]
    target: Target | None
    span: Span
    options: tuple[OptionNode, ...] = ()
    chain: Value | None = None
    reject_with: tuple[OptionNode, ...] = ()


# ------------------------------------------------------------------ v2: whole firewalls

@dataclass(frozen=True)
class BlockOpen:
    """``HOOK [DEV, ...] {`` or ``chain NAME {``, a statement of its own line; its ``}``
    is a ``BlockClose`` (pfc.frontend.firewall.blocks pairs them). ``kind`` is ``hook``
    or ``chain``; ``name`` the hook (``nat prerouting``) or the chain's name; ``closed``
    when ``}`` follows on the same line (an empty block)."""

    kind: str
    name: str
    name_span: Span
    span: Span
    devices: tuple[Value, ...] = ()
    closed: bool = False


@dataclass(frozen=True)
class BlockClose:
    span: Span


@dataclass(frozen=True)
class InterfaceDecl:
    """``interface NAME [address A/LEN | { ... }] [gateway ADDR]``."""

    name: Value  # kind "name" or "string"
    span: Span
    addresses: Value | None = None
    gateway: Value | None = None


Statement = Define | SetDecl | Default | RuleNode | BlockOpen | BlockClose | InterfaceDecl


@dataclass(frozen=True)
class Comment:
    text: str
    span: Span


@dataclass(frozen=True)
class Module:
    """A parsed file. ``broken``: the statements standing in for lines that did not
    parse but open or close a block (``inptu {``), so the block structure holds."""

    source: SourceFile
    statements: tuple[Statement, ...]
    comments: tuple[Comment, ...]
    broken: tuple[BlockOpen | BlockClose, ...] = ()
