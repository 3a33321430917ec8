"""lark → AST. Syntax errors become Diagnostics; every error in a file is reported.

The whole file is parsed in one go. Only when that fails is it split into logical lines
(a rule continues after a trailing ``\\``) and each line parsed on its own, so that every
bad line gets its own diagnostic and the good lines still give statements (the language
server relies on that for half-typed files).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import lark
from lark import Token, Transformer, v_args

from pfc.diagnostics import Diagnostic, error, suggest
from pfc.source import SourceFile, Span
from pfc.syntax import (
    Comment,
    Default,
    Define,
    Flag,
    MatchNode,
    Module,
    RuleNode,
    SetDecl,
    Target,
    Value,
)

KEYWORDS = ("define", "set", "file", "default", "to", "drop", "pass", "accept", "count",
            "redirect", "all", "ip", "ip6", "tcp", "udp", "icmp", "icmp6", "src", "dst",
            "sport", "dport", "proto", "icmp-type", "ttl", "len", "flags", "frag", "payload")

_MATCH = "a match (src dst sport dport proto flags icmp-type ttl len frag payload)"
_EXPECTED = {
    "FIELD": _MATCH, "FLAGS": _MATCH, "FRAG": _MATCH, "PAYLOAD": _MATCH, "NOT": "`!`",
    "TO": "`to`", "_NL": "end of line", "$END": "end of file", "NAME": "a name",
    "NUMBER": "a number", "IPV4": "an IPv4 address", "IPV6": "an IPv6 address",
    "STRING": "a string", "VARREF": "a `$name`", "LBRACE": "`{`", "RBRACE": "`}`",
    "COMMA": "`,`", "COLON": "`:`", "LSQB": "`[`", "RSQB": "`]`", "EQUAL": "`=`",
    "EQEQ": "`==`", "MINUS": "`-`", "DROP": "an action", "PASS": "an action",
    "ACCEPT": "an action", "COUNT": "an action", "REDIRECT": "an action",
    "DEFINE": "`define`", "SET": "`set`", "DEFAULT": "`default`", "FILE": "`file`",
    "ALL": "a protocol", "IP": "a protocol", "IP6": "a protocol", "TCP": "a protocol",
    "UDP": "a protocol", "ICMP": "a protocol", "ICMP6": "a protocol",
}


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    grammar = resources.files("pfc.grammar").joinpath("pfc.lark").read_text()
    return lark.Lark(grammar, parser="lalr", propagate_positions=True,
                     maybe_placeholders=False)


def parse(source: SourceFile) -> tuple[Module, list[Diagnostic]]:
    """Parse a whole file. Never raises on any text."""
    comments = tuple(_scan_comments(source))
    try:
        tree = _parser().parse(_terminated(source.text))
    except lark.exceptions.LarkError:
        statements, diags = _parse_lines(source)
        return Module(source, tuple(statements), comments), diags
    statements = _Builder(source.name, 0).transform(tree).children
    return Module(source, tuple(statements), comments), []


def _terminated(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _parse_lines(source: SourceFile) -> tuple[list, list[Diagnostic]]:
    statements, diags = [], []
    for start, end in logical_lines(source.text):
        try:
            tree = _parser().parse(_terminated(source.text[start:end]))
        except lark.exceptions.LarkError as exc:
            diags.append(_syntax_diagnostic(exc, source, start))
            continue
        statements.extend(_Builder(source.name, start).transform(tree).children)
    return statements, diags


def logical_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each logical line: physical lines joined by a trailing
    backslash; a ``#`` outside a string starts a comment (its backslash joins nothing)."""
    lines, start, i, in_string, in_comment = [], 0, 0, False, False
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch in '"\n':
                in_string = False
        elif ch == "#":
            in_comment = True
        elif ch == '"' and not in_comment:
            in_string = True
        elif ch == "\\" and not in_comment and text[i + 1:].lstrip(" \t").startswith("\n"):
            i = text.index("\n", i)
        elif ch == "\n":
            lines.append((start, i))
            start, in_comment = i + 1, False
        i += 1
    if start < len(text):
        lines.append((start, len(text)))
    return lines


def _scan_comments(source: SourceFile) -> list[Comment]:
    """Every comment, found by a scan that knows strings (comments are not in the tree)."""
    out = []
    for start, end in logical_lines(source.text):
        line = source.text[start:end]
        pos = _comment_start(line)
        if pos is not None:
            text = line[pos:].split("\n", 1)[0].rstrip("\r")
            out.append(Comment(text, Span(source.name, start + pos, start + pos + len(text))))
    return out


def _comment_start(line: str) -> int | None:
    in_string = False
    i = 0
    while i < len(line):
        ch = line[i]
        if in_string and ch == "\\":
            i += 2
            continue
        if ch == '"':
            in_string = not in_string
        elif ch == "#" and not in_string:
            return i
        i += 1
    return None


# ---------------------------------------------------------------------- syntax errors

def _syntax_diagnostic(exc: lark.exceptions.LarkError, source: SourceFile,
                       base: int) -> Diagnostic:
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        pos = base + exc.pos_in_stream
        char = source.text[pos:pos + 1]
        return error(f"unexpected character `{char}`", Span(source.name, pos, pos + 1),
                     hint=_char_hint(char), code="syntax")
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        return _token_diagnostic(exc, source, base)
    pos = base
    return error("unexpected end of input", Span(source.name, pos, pos), code="syntax")


def _token_diagnostic(exc: lark.exceptions.UnexpectedToken, source: SourceFile,
                      base: int) -> Diagnostic:
    tok = exc.token
    expected = sorted({_EXPECTED.get(t, t) for t in exc.expected})
    if tok.type in ("_NL", "$END"):
        pos = base + (tok.start_pos if tok.start_pos is not None else 0)
        span = Span(source.name, pos, pos)
        found = "end of line"
    else:
        span = Span(source.name, base + tok.start_pos, base + tok.end_pos)
        found = f"`{tok}`"
    message = f"unexpected {found}; expected {_join(expected)}"
    hint = suggest(str(tok), KEYWORDS) if tok.type == "NAME" else None
    if hint is None and tok.type == "NAME" and "a name" not in expected:
        hint = f"`{tok}` is not a keyword here; names are used as `${tok}`"
    return error(message, span, hint=hint, code="syntax")


def _char_hint(char: str) -> str | None:
    if char == "'":
        return 'strings use double quotes: "..."'
    if char == ";":
        return "one rule per line; no `;` needed"
    return None


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


# --------------------------------------------------------------------------- builder

@v_args(tree=True)
class _Builder(Transformer):
    """lark tree → AST nodes, shifting positions by ``base`` (per-line parsing)."""

    def __init__(self, name: str, base: int):
        super().__init__()
        self.file = name
        self.base = base

    def _span(self, node) -> Span:
        if isinstance(node, Token):
            return Span(self.file, self.base + node.start_pos, self.base + node.end_pos)
        meta = node.meta
        return Span(self.file, self.base + meta.start_pos, self.base + meta.end_pos)

    def _value(self, tok: Token, kind: str) -> Value:
        text = str(tok)[1:] if kind == "var" else str(tok)
        return Value(kind, text, self._span(tok))

    def start(self, tree):
        return tree

    def define(self, tree):
        _, name, value = tree.children
        return Define(str(name), self._span(name), self._as_value(value), self._span(tree))

    def set_decl(self, tree):
        _, name, _, path = tree.children
        return SetDecl(str(name), self._span(name), self._value(path, "string"),
                       self._span(tree))

    def default(self, tree):
        _, verdict = tree.children
        return Default(verdict.text, verdict.span, self._span(tree))

    def action_kw(self, tree):
        tok = tree.children[0]
        return Value("name", str(tok), self._span(tok))

    def protocol(self, tree):
        tok = tree.children[0]
        return Value("name", str(tok), self._span(tok))

    def rule(self, tree):
        action, *rest = tree.children
        protocol = rest.pop(0) if rest and isinstance(rest[0], Value) else None
        target = rest.pop() if rest and isinstance(rest[-1], Target) else None
        return RuleNode(action.text, action.span, protocol.text if protocol else None,
                        protocol.span if protocol else None, tuple(rest), target,
                        self._span(tree))

    def match(self, tree):
        children = tree.children
        negated = isinstance(children[0], Token) and children[0].type == "NOT"
        body: MatchNode = children[-1]
        return MatchNode(body.field, negated, body.field_span, self._span(tree), body.value,
                         body.flags, body.offset, body.length)

    def field_match(self, tree):
        field, value = tree.children
        return MatchNode(str(field), False, self._span(field), self._span(tree),
                         self._as_value(value))

    def flags_match(self, tree):
        field, *flags = tree.children
        return MatchNode("flags", False, self._span(field), self._span(tree), flags=tuple(flags))

    def flag(self, tree):
        negated = len(tree.children) == 2
        return Flag(str(tree.children[-1]), negated, self._span(tree))

    def frag_match(self, tree):
        tok = tree.children[0]
        return MatchNode("frag", False, self._span(tok), self._span(tok))

    def payload_match(self, tree):
        field, *numbers, _eq, value = tree.children
        offset = self._value(numbers[0], "number")
        length = self._value(numbers[1], "number") if len(numbers) > 1 else None
        return MatchNode("payload", False, self._span(field), self._span(tree),
                         self._as_value(value), offset=offset, length=length)

    def target(self, tree):
        _, dest = tree.children
        return dest

    def destination(self, tree):
        children = tree.children
        address = self._as_value(children[0])
        port = self._as_value(children[1]) if len(children) > 1 else None
        bracketed = address.kind == "ipv6" and port is not None
        return Target(address, port, self._span(tree), bracketed)

    def list(self, tree):
        items = tuple(self._as_value(c) for c in tree.children)
        return Value("list", "", self._span(tree), items)

    def range(self, tree):
        lo, hi = (self._value(t, "number") for t in tree.children)
        return Value("range", f"{lo.text}-{hi.text}", self._span(tree), (lo, hi))

    def name(self, tree):
        return self._value(tree.children[0], "name")

    _KINDS = {"IPV4": "ipv4", "IPV6": "ipv6", "NUMBER": "number", "STRING": "string",
              "VARREF": "var", "NAME": "name"}

    def _as_value(self, node) -> Value:
        if isinstance(node, Value):
            return node
        return self._value(node, self._KINDS[node.type])
