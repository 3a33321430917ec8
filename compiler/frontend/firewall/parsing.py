"""The v2 half of the parser: AST nodes for hook blocks, chains, ``interface`` lines and
the v2 rule forms (``mark ... to N``, ``jump NAME``, ``reject ... with R``, ``to :PORT``),
and what syntax errors say about the v2 words.

``Builder`` is a mixin of :class:`pfc.frontend.parse._Builder` (lark calls its methods by
grammar rule name while it parses). The v2 terminals are hidden from the "expected ..."
list of a syntax error in a file that uses no v2 statement (``V2_TERMINALS``), so a v1
file's diagnostics read exactly as they always have.
"""

from __future__ import annotations

import re

from lark import Token

from pfc.frontend.source import Span
from pfc.frontend.syntax import BlockClose, BlockOpen, InterfaceDecl, OptionNode, Target, Value

MAC = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}")

V1_MATCH = "a match (src dst sport dport proto flags icmp-type ttl len frag payload ct)"
V2_MATCH = ("a match (src dst sport dport proto flags icmp-type icmp-code ttl len frag "
            "payload ct iif oif ether-src ether-dst ether-type vlan-id dst-type src-type "
            "mark)")
EXPECTED = {
    "INGRESS": "a block", "EGRESS": "a block", "RAW": "a block", "NAT": "a block",
    "PREROUTING": "a block", "INPUT": "a block", "FORWARD": "a block", "OUTPUT": "a block",
    "POSTROUTING": "a block", "CHAIN": "`chain`", "INTERFACE": "`interface`",
    "ADDRESS": "`address`", "GATEWAY": "`gateway`", "REJECT": "an action",
    "NOTRACK": "an action", "MARK": "an action", "DNAT": "an action", "SNAT": "an action",
    "MASQUERADE": "an action", "JUMP": "an action", "GOTO": "an action", "WITH": "`with`",
    "STATUS": "`status`", "V2FIELD": V2_MATCH, "CLOSE": "`}`",
    "WILDNAME": "a name", "PORTONLY": "`:PORT`",
}
V2_TERMINALS = frozenset(EXPECTED)
# The first word of a line that makes a file a v2 file (for the expected lists).
_V2_LINE = re.compile(r"^[ \t]*(?:ingress|egress|raw|nat|prerouting|input|forward|output"
                      r"|postrouting|chain|interface)(?![A-Za-z0-9_-])[^\n]*", re.M)


def is_v2_text(text: str) -> bool:
    """Whether the text has a line starting with a block or ``interface`` word."""
    return _V2_LINE.search(text) is not None


def block_hint(found: str, expected, before: str) -> str | None:
    """``input`` with its ``{`` on the next line; rules after ``input {`` on its line."""
    if found in ("_NL", "$END") and "LBRACE" in expected and _V2_LINE.match(before):
        return f"the `{{` goes on the line of `{before.strip()}`: `{before.strip()} {{`"
    if "CLOSE" in expected and before.rstrip().endswith("{") and _V2_LINE.match(before):
        return f"a block's rules go on lines of their own, after `{before.strip()}`"
    return None


def describe_expected(terminal: str, v2: bool, v1_table: dict[str, str]) -> str | None:
    """What an expected terminal is called in a syntax error, or None to leave it out
    (a v2 terminal in a v1 file)."""
    if terminal in V2_TERMINALS:
        return EXPECTED[terminal] if v2 else None
    if v2 and v1_table.get(terminal) == V1_MATCH:
        return V2_MATCH
    return v1_table.get(terminal, terminal)


class Builder:
    """The v2 AST nodes (a mixin: ``_tok_span``, ``_cover``, ``_value`` and ``_as_value``
    come from the parser's builder)."""

    def hook(self, children):
        words = " ".join(str(c).lower() for c in children)
        return Value("name", words, self._cover(children[0], children[-1]))

    def device(self, children):
        tok = children[0]
        return self._value(tok, "string" if tok.type == "STRING" else "name")

    def devices(self, children):
        return tuple(c for c in children if isinstance(c, Value))

    def block_open(self, children):
        # hook devices? "{" CLOSE?  |  CHAIN NAME "{" CLOSE?
        closed = isinstance(children[-1], Token) and children[-1].type == "CLOSE"
        span = self._cover(children[0], children[-1])
        if isinstance(children[0], Value):
            devices = children[1] if isinstance(children[1], tuple) else ()
            head = children[0]
            return BlockOpen("hook", head.text, head.span, span, devices, closed)
        name = children[1]
        return BlockOpen("chain", str(name), self._tok_span(name), span, (), closed)

    def block_close(self, children):
        return BlockClose(self._tok_span(children[0]))

    def interface(self, children):
        # INTERFACE device (ADDRESS value)? (GATEWAY value)?
        name = children[1]
        addresses = gateway = None
        for i in range(2, len(children) - 1, 2):
            value = self._as_value(children[i + 1])
            if children[i].type == "ADDRESS":
                addresses = value
            else:
                gateway = value
        return InterfaceDecl(name, self._cover(children[0], children[-1]), addresses,
                             gateway)

    def iface_address(self, children):
        return self._as_value(children[0])

    def iface_addresses(self, children):
        if len(children) == 1:
            return children[0]
        items = tuple(c for c in children if isinstance(c, Value))
        return Value("list", "", self._cover(children[0], children[-1]), items)

    def mark_to(self, children):
        keyword, value = children
        return Target(self._as_value(value), None, self._cover(keyword, value))

    def with_option(self, children) -> OptionNode:
        """``with NAME``, kept apart from the other options (``RuleNode.reject_with``)."""
        keyword, name = children
        return OptionNode("with", self._tok_span(keyword), self._cover(keyword, name),
                          value=name)

    def v2_value(self, tok: Token, kind: str) -> str:
        """The kind of a token's value: a MAC address is lexed as IPv6 text."""
        if kind == "ipv6" and MAC.fullmatch(str(tok)):
            return "mac"
        return kind

    def port_only(self, tok: Token) -> Target:
        """``to :PORT`` (``PORTONLY``): no address."""
        text = str(tok)[1:]
        span = self._tok_span(tok)
        port_span = Span(span.file, span.start + 1, span.end)
        kind = "var" if text.startswith("$") else "number"
        port = Value(kind, text[1:] if kind == "var" else text, port_span)
        return Target(None, port, span)
