"""pcap-filter expressions (``man 7 pcap-filter``) read as libpcap's grammar reads
them: primitives ``[proto] [dir] [type] ID`` and keyword primitives (``ip``, ``tcp``,
``less 100`` ...), ``not``/``!`` binding tighter than ``and``/``&&`` and ``or``/``||``,
which bind alike, from the left; a bare ID after ``and``/``or`` takes the qualifiers of
the primitive before it (``tcp port 22 or 80`` is ``tcp port 22 or tcp port 80``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pfc.frontend.source import SourceFile, Span

PROTOS = frozenset(("ether", "fddi", "tr", "wlan", "ip", "ip6", "arp", "rarp", "decnet",
                    "tcp", "udp", "sctp", "icmp", "icmp6", "igmp", "igrp", "pim", "vrrp",
                    "carp", "ah", "esp", "link", "ppp", "slip", "radio", "lat", "sca",
                    "moprc", "mopdl", "iso", "esis", "isis", "clnp", "stp", "ipx",
                    "netbeui", "atalk", "aarp", "l1", "l2", "iih", "lsp", "snp", "csnp",
                    "psnp"))
DIRS = frozenset(("src", "dst", "inbound", "outbound", "addr1", "addr2", "addr3",
                  "addr4", "ra", "ta"))
TYPES = frozenset(("host", "net", "port", "portrange", "gateway", "proto", "protochain"))
KEYWORDS = frozenset(("less", "greater", "len", "broadcast", "multicast", "vlan", "mpls",
                      "pppoed", "pppoes", "geneve", "inbound", "outbound", "ifname", "on",
                      "rnr", "rulenum", "reason", "rset", "ruleset", "srnr", "subrulenum",
                      "action", "type", "subtype", "dir", "llc"))
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<word>[A-Za-z0-9_.:][A-Za-z0-9_.:\-]*(?:/[0-9]+)?)
  | (?P<id>\\[^\s!()]+)
  | (?P<op>&&|\|\||!=|==|<=|>=|<<|>>|[()\[\]!<>=&|+\-*/%^])
  | (?P<bad>.)
""", re.X)


class PcapError(Exception):
    def __init__(self, message: str, span: Span):
        super().__init__(message)
        self.message, self.span = message, span


@dataclass(frozen=True)
class Prim:
    """A primitive: its qualifiers (``proto``, ``dir``, ``type``), its ID (``None`` for
    keyword primitives: ``ip``, ``tcp``, ``broadcast`` ...), its words' span."""

    proto: str | None
    dir: str | None
    type: str | None
    id: str | None
    span: Span
    words: str


@dataclass(frozen=True)
class Not:
    expr: object
    span: Span


@dataclass(frozen=True)
class Bin:
    op: str  # and | or
    left: object
    right: object
    span: Span


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str
    start: int
    end: int


def parse(source: SourceFile) -> object | None:
    """The expression's tree (None for an empty expression: every packet)."""
    toks = _tokens(source)
    if not toks:
        return None
    parser = _Parser(source, toks)
    tree = parser.expr()
    parser.check_end()
    if parser.i < len(toks):
        tok = toks[parser.i]
        raise PcapError(f"`{tok.text}`: expected `and`, `or` or the end",
                        source.span(tok.start, tok.end))
    return tree


def _tokens(source: SourceFile) -> list[Tok]:
    text = "\n".join(line.split("#", 1)[0] for line in source.text.splitlines())
    out = []
    for m in _TOKEN.finditer(text):
        if m.lastgroup == "ws":
            continue
        if m.lastgroup == "bad":
            raise PcapError(f"`{m.group()}`: not a pcap-filter character",
                            source.span(m.start(), m.end()))
        out.append(Tok(m.lastgroup, m.group(), m.start(), m.end()))
    return out


class _Parser:
    def __init__(self, source: SourceFile, toks: list[Tok]):
        self.source, self.toks, self.i = source, toks, 0
        self.last: Prim | None = None  # the qualifiers a bare ID inherits

    def peek(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def word(self, *texts: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text in texts

    def span(self, a: Tok, b: Tok) -> Span:
        return self.source.span(a.start, b.end)

    def expr(self) -> object:
        left = self.unary()
        while self.word("and", "&&", "or", "||"):
            op = "and" if self.toks[self.i].text in ("and", "&&") else "or"
            self.i += 1
            right = self.unary(inherit=True)
            left = Bin(op, left, right, _cover(left, right))
        return left

    def unary(self, inherit: bool = False) -> object:
        tok = self.peek()
        if tok is None:
            end = self.toks[-1]
            raise PcapError("the expression ends too soon", self.span(end, end))
        if tok.text in ("not", "!"):
            self.i += 1
            inner = self.unary(inherit)
            return Not(inner, self.source.span(tok.start, _span(inner).end))
        if tok.text == "(":
            self.i += 1
            inner = self.expr()
            if not self.word(")"):
                raise PcapError("`(` without its `)`", self.span(tok, tok))
            self.i += 1
            return inner
        return self.primitive(inherit)

    def primitive(self, inherit: bool) -> Prim:
        first = self.peek()
        proto = dir_ = type_ = None
        if self.word(*PROTOS):
            proto = self.toks[self.i].text
            self.i += 1
        if self.word(*DIRS):
            dir_ = self.toks[self.i].text
            self.i += 1
            if self.word("or", "and") and self.i + 1 < len(self.toks) and \
                    self.toks[self.i + 1].text in DIRS and \
                    self.i + 2 < len(self.toks) and self.toks[self.i + 2].text in TYPES:
                dir_ += f" {self.toks[self.i].text} {self.toks[self.i + 1].text}"
                self.i += 2
        if self.word(*TYPES):
            type_ = self.toks[self.i].text
            self.i += 1
        tok = self.peek()
        qualified = proto or dir_ or type_
        if not qualified and tok is not None and tok.text in KEYWORDS:
            return self.keyword(tok)
        if proto and not (dir_ or type_) and tok is not None and \
                tok.text in ("broadcast", "multicast"):
            self.i += 1
            return Prim(proto, None, tok.text, None, self.span(first, tok),
                        self.source.text[first.start:tok.end])
        if tok is not None and tok.kind in ("word", "id") \
                and tok.text not in ("and", "or", "not") \
                and (type_ or dir_ or (tok.text not in PROTOS and not qualified)):
            self.i += 1
            ident = tok.text.removeprefix("\\")  # `\ip`: the ID `ip`, no keyword
            if not qualified and inherit and self.last is not None:
                last = self.last
                return Prim(last.proto, last.dir, last.type, ident,
                            self.span(tok, tok), tok.text)
            prim = Prim(proto, dir_, type_, ident, self.span(first, tok),
                        self.source.text[first.start:tok.end])
            self.last = prim
            return prim
        if qualified:
            end = self.toks[self.i - 1]
            return Prim(proto, dir_, type_, None, self.span(first, end),
                        self.source.text[first.start:end.end])
        bad = tok or self.toks[-1]
        raise PcapError(f"`{bad.text}`: pfc does not read this part of the expression "
                        "(byte tests such as `ip[6:2]`, arithmetic)", self.span(bad, bad))

    def keyword(self, tok: Tok) -> Prim:
        """``less N``, ``vlan [ID]``, ``broadcast`` ...: a keyword and its value."""
        self.i += 1
        end = tok
        nxt = self.peek()
        if nxt is not None and nxt.kind == "word" and nxt.text not in ("and", "or", "not"):
            end = nxt
            self.i += 1
        return Prim(tok.text, None, None, None, self.span(tok, end),
                    self.source.text[tok.start:end.end])

    def check_end(self) -> None:
        tok = self.peek()
        if tok is not None and tok.text == "[":
            raise PcapError("byte tests (`tcp[13] & 2 != 0`): pfc does not read them "
                            "(its matches name their fields)", self.span(tok, tok))


def _span(node) -> Span:
    return node.span


def _cover(a, b) -> Span:
    return Span(a.span.file, a.span.start, max(a.span.end, b.span.end))
