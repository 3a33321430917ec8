"""lark → AST. Syntax errors become Diagnostics; every error in a file is reported.

The whole file is parsed in one go. Only when that fails is it split into logical lines
(a rule continues after a trailing ``\\``) and each line parsed on its own, so that every
bad line gets its own diagnostic and the good lines still give statements (the language
server relies on that for half-typed files).
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from importlib import resources

import lark
from lark import Token

from pfc.frontend.diagnostics import MAX_ERRORS, Diagnostic, error
from pfc.frontend.firewall.blocks import block_errors, stand_ins
from pfc.frontend.firewall.parsing import (
    V1_MATCH,
    Builder,
    block_hint,
    describe_expected,
    is_v2_text,
)
from pfc.frontend.hints import (
    KEYWORDS,
    char_hint,
    char_message,
    comma_hint,
    name_hint,
    range_hint,
    rate_hint,
)
from pfc.frontend.source import BOM, SourceFile, Span
from pfc.frontend.syntax import (
    Comment,
    Default,
    Define,
    Flag,
    MatchNode,
    Module,
    OptionNode,
    RateNode,
    RuleNode,
    SetDecl,
    Target,
    Value,
)
from pfc.frontend.text import shorten

__all__ = ["KEYWORDS", "logical_lines", "parse"]
_MATCH = V1_MATCH
_OPTION = "an option (prefix rate snap limit audit num first bypass)"
_EXPECTED = {
    "FIELD": _MATCH, "FLAGS": _MATCH, "FRAG": _MATCH, "PAYLOAD": _MATCH, "NOT": "`!`",
    "CT": _MATCH, "STATE": "`state`", "PREFIX": _OPTION, "RATE": _OPTION, "SNAP": _OPTION,
    "LIMIT": _OPTION, "AUDIT": _OPTION, "NUM": _OPTION, "FIRST": _OPTION, "BYPASS": _OPTION,
    "QUEUE": "an action", "BURST": "`burst`", "PER": "`per`",
    "SLASH": "`/`", "LOG": "an action",
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
    """The LALR parser; ``parse`` builds the AST while it parses (see ``_Builder``)."""
    grammar = resources.files("pfc.grammar").joinpath("pfc.lark").read_text()
    return lark.Lark(grammar, parser="lalr", transformer=_BUILDER, keep_all_tokens=True,
                     maybe_placeholders=False)


_LOCK = threading.Lock()  # _BUILDER's file and base belong to one parse at a time


def _parse_text(text: str, name: str, base: int) -> list:
    """The statements of ``text`` (positions shifted by ``base``); raises LarkError."""
    parser = _parser()
    with _LOCK:
        _BUILDER.file, _BUILDER.base = name, base
        return parser.parse(_terminated(text))


def parse(source: SourceFile) -> tuple[Module, list[Diagnostic]]:
    """Parse a whole file. Never raises on any text. A byte-order mark at the very start
    is read as a space (offsets stay those of the text); anywhere else it is an error."""
    comments = tuple(_scan_comments(source))
    text = " " + source.text[1:] if source.text.startswith(BOM) else source.text
    try:
        statements = _parse_text(text, source.name, 0)
    except lark.exceptions.LarkError:
        statements, diags = _parse_lines(source, text)
        broken = stand_ins(source.name, text, diags)
        diags += block_errors(statements, broken)
        return Module(source, tuple(statements), comments, broken), diags
    return Module(source, tuple(statements), comments), block_errors(statements, ())


def _terminated(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _parse_lines(source: SourceFile, text: str) -> tuple[list, list[Diagnostic]]:
    statements, diags = [], []
    context = _Context(source, text)
    for start, end in logical_lines(text):
        try:
            statements.extend(_parse_text(text[start:end], source.name, start))
        except lark.exceptions.LarkError as exc:
            if len(diags) < MAX_ERRORS:
                diags.append(_syntax_diagnostic(exc, context, start, end))
            else:  # never shown (the pipeline reports the first MAX_ERRORS): only counted
                diags.append(error("syntax error", Span(source.name, start, start),
                                   code="syntax"))
    return statements, diags


_DECLARED = re.compile(r"^[ \t]*(?:define|set)[ \t]+([A-Za-z_][A-Za-z0-9_-]*)", re.M)


class _Context:
    """What hints may look at: the text and (found once, on the first use) the names
    it declares."""

    def __init__(self, source: SourceFile, text: str):
        self.source, self.text = source, text
        self._declared: frozenset[str] | None = None
        self._v2: bool | None = None

    @property
    def v2(self) -> bool:
        """Whether the file uses v2 statements (its syntax errors name v2 words)."""
        if self._v2 is None:
            self._v2 = is_v2_text(self.text)
        return self._v2

    @property
    def declared(self) -> frozenset[str]:
        if self._declared is None:
            self._declared = frozenset(_DECLARED.findall(self.text))
        return self._declared


_SPECIAL = re.compile(r'[\\"#\n]')  # the characters logical_lines acts on
_JOINS = re.compile(r"[ \t]*\n")  # after a backslash: it joins this line to the next


def logical_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of each logical line: physical lines joined by a trailing
    backslash; a ``#`` outside a string starts a comment (its backslash joins nothing)."""
    lines, start, i, in_string, in_comment = [], 0, 0, False, False
    special = _SPECIAL.search
    while (found := special(text, i)) is not None:
        i = found.start()
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
        elif ch == "\\" and not in_comment and _JOINS.match(text, i + 1):
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
    if "#" not in source.text:
        return []
    out = []
    for start, end in logical_lines(source.text):
        line = source.text[start:end]
        pos = _comment_start(line) if "#" in line else None
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

def _syntax_diagnostic(exc: lark.exceptions.LarkError, ctx: _Context, base: int,
                       end: int) -> Diagnostic:
    name = ctx.source.name
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        pos = base + exc.pos_in_stream
        char = ctx.text[pos:pos + 1]
        return error(char_message(char), Span(name, pos, pos + 1), hint=char_hint(char),
                     code="syntax")
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        return _token_diagnostic(exc, ctx, base, end)
    return error("unexpected end of input", Span(name, base, base), code="syntax")


def _token_diagnostic(exc: lark.exceptions.UnexpectedToken, ctx: _Context,
                      base: int, end: int) -> Diagnostic:
    tok = exc.token
    # RATE alone (after `limit`) is the word `rate`, not any option
    expected = ["`rate`"] if set(exc.expected) == {"RATE"} else \
        sorted({d for t in exc.expected
                if (d := describe_expected(t, ctx.v2, _EXPECTED)) is not None})
    if tok.type in ("_NL", "$END"):
        pos = base + (tok.start_pos if tok.start_pos is not None else 0)
        span = Span(ctx.source.name, pos, pos)
        found = "end of line"
    else:
        span = Span(ctx.source.name, base + tok.start_pos, base + tok.end_pos)
        found = f"`{shorten(str(tok))}`"
    message = f"unexpected {found}; expected {_join(expected)}"
    before, after = ctx.text[base:span.start], ctx.text[span.end:end]
    hint = block_hint(tok.type, exc.expected, before)
    if hint is not None:
        pass
    elif before.split()[-1:] == ["to"] and not before.lstrip().startswith("redirect"):
        hint = "`to` is only for `redirect`: to match the destination, write `dst ADDRESS`"
    elif tok.type == "NAME":
        hint = name_hint(str(tok), exc.expected, before, after, ctx.declared)
    elif tok.type == "COMMA":
        hint = comma_hint(before, after)
    elif tok.type == "MINUS":
        hint = range_hint(before, after)
    elif tok.type == "NUMBER" and "RATE" in exc.expected:
        hint = rate_hint(str(tok), before, after)
    return error(message, span, hint=hint, code="syntax")


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


# --------------------------------------------------------------------------- builder

class _Builder(Builder):
    """The AST, built by lark while it parses (an inline transformer: no parse tree).

    lark calls each method with the rule's children as parsed, punctuation included
    (``keep_all_tokens``), so that a node's span runs from its first child's start to
    its last child's end, as ``propagate_positions`` would give. Positions are shifted
    by ``base`` (per-line parsing); ``file`` and ``base`` are set for each parse.
    No attribute may be named like a terminal (lark would take it as a lexer callback).
    """

    file = ""
    base = 0

    def _tok_span(self, tok: Token) -> Span:
        return Span(self.file, self.base + tok.start_pos, self.base + tok.end_pos)

    def _cover(self, first, last) -> Span:
        """From ``first``'s start to ``last``'s end (tokens or AST nodes)."""
        start = self.base + first.start_pos if isinstance(first, Token) else first.span.start
        end = self.base + last.end_pos if isinstance(last, Token) else last.span.end
        return Span(self.file, start, end)

    def _value(self, tok: Token, kind: str) -> Value:
        text = str(tok)[1:] if kind == "var" else str(tok)
        return Value(self.v2_value(tok, kind), text, self._tok_span(tok))

    def start(self, children):
        return [c for c in children if not isinstance(c, Token)]

    def define(self, children):
        _, name, _eq, value = children
        return Define(str(name), self._tok_span(name), self._as_value(value),
                      self._cover(children[0], value))

    def set_decl(self, children):
        _, name, _eq, _file, path = children
        return SetDecl(str(name), self._tok_span(name), self._value(path, "string"),
                       self._cover(children[0], path))

    def default(self, children):
        keyword, verdict = children
        return Default(verdict.text, verdict.span, self._cover(keyword, verdict))

    def action_kw(self, children):
        tok = children[0]
        return Value("name", str(tok), self._tok_span(tok))

    protocol = action_kw

    def rule(self, children):
        action, *rest = children
        chain = None
        if isinstance(action, Token):  # MARK | JUMP NAME | GOTO NAME (v2)
            chain = self._value(rest.pop(0), "name") if action.type != "MARK" else None
            action = self._value(action, "name")
        protocol = rest.pop(0) if rest and isinstance(rest[0], Value) else None
        target = rest.pop() if rest and isinstance(rest[-1], Target) else None
        options = tuple(c for c in rest if isinstance(c, OptionNode) and c.kind != "with")
        withs = tuple(c for c in rest if isinstance(c, OptionNode) and c.kind == "with")
        matches = tuple(c for c in rest if isinstance(c, MatchNode))
        return RuleNode(action.text, action.span, protocol.text if protocol else None,
                        protocol.span if protocol else None, matches, target,
                        self._cover(action, children[-1]), options, chain, withs)

    def option(self, children):
        # PREFIX STRING | RATE NUMBER "/" NAME | SNAP NUMBER | AUDIT
        # | LIMIT RATE NUMBER "/" NAME (BURST NUMBER)? (PER FIELD)?
        keyword = children[0]
        kind = str(keyword)
        span = self._cover(keyword, children[-1])
        if kind == "with":
            return self.with_option(children)
        if kind in ("prefix", "snap", "num", "first"):
            value = self._value(children[1], "string" if kind == "prefix" else "number")
            return OptionNode(kind, self._tok_span(keyword), span, value=value)
        if kind in ("audit", "bypass"):
            return OptionNode(kind, self._tok_span(keyword), span)
        at = 2 if kind == "limit" else 1
        number, unit = children[at], children[at + 2]
        rate = RateNode(self._value(number, "number"), self._value(unit, "name"),
                        self._cover(number, unit))
        burst = per = None
        for i in range(at + 3, len(children) - 1):
            if children[i].type == "BURST":
                burst = self._value(children[i + 1], "number")
            elif children[i].type == "PER":
                per = self._value(children[i + 1], "name")
        return OptionNode(kind, self._tok_span(keyword), span, rate=rate, burst=burst, per=per)

    def match(self, children):
        # NOT? (FIELD value | FLAGS flag ("," flag)* | FRAG
        #       | PAYLOAD "[" NUMBER (":" NUMBER)? "]" EQEQ value)
        negated = children[0].type == "NOT"
        body = children[1:] if negated else children
        field, last = body[0], body[-1]
        field_span, span = self._tok_span(field), self._cover(children[0], last)
        if field.type in ("FIELD", "V2FIELD"):
            return MatchNode(str(field), negated, field_span, span, self._as_value(last))
        if field.type == "FLAGS":
            flags = tuple(c for c in body[1:] if isinstance(c, Flag))
            return MatchNode("flags", negated, field_span, span, flags=flags)
        if field.type == "FRAG":
            return MatchNode("frag", negated, field_span, span)
        if field.type == "CT":
            return self._ct(body, negated, span)
        offset = self._value(body[2], "number")
        length = self._value(body[4], "number") if len(body) == 8 else None
        return MatchNode("payload", negated, field_span, span, self._as_value(last),
                         offset=offset, length=length)

    def _ct(self, body, negated: bool, span: Span) -> MatchNode:
        """``CT (STATE | STATUS) (list | name ("," name)*)``: the names as one list value
        (field ``ct`` / ``ct-status``); ``CT MARK value``: field ``ct-mark``."""
        field = {"STATE": "ct", "STATUS": "ct-status", "MARK": "ct-mark"}[body[1].type]
        values = [c for c in body[2:] if isinstance(c, Value)]
        if field == "ct-mark" or (len(values) == 1 and values[0].kind == "list"):
            states = self._as_value(body[-1]) if field == "ct-mark" else values[0]
        else:
            states = Value("list", "", self._cover(values[0], values[-1]), tuple(values))
        return MatchNode(field, negated, self._cover(body[0], body[1]), span, states)

    def flag(self, children):
        return Flag(str(children[-1]), len(children) == 2, self._cover(children[0], children[-1]))

    def target(self, children):
        return children[1]

    def destination(self, children):
        # address_item (":" port_item)?  |  "[" IPV6 "]" ":" port_item
        first = children[0]
        if isinstance(first, Token) and first.type == "PORTONLY":
            return self.port_only(first)
        bracketed_form = isinstance(first, Token) and first.type == "LSQB"
        address = self._as_value(children[1] if bracketed_form else first)
        port = self._as_value(children[-1]) if len(children) > 1 else None
        bracketed = address.kind == "ipv6" and port is not None
        return Target(address, port, self._cover(first, children[-1]), bracketed)

    def list(self, children):
        items = tuple(self._as_value(c) for c in children[1:-1]
                      if not (isinstance(c, Token) and c.type == "COMMA"))
        return Value("list", "", self._cover(children[0], children[-1]), items)

    def range(self, children):
        lo, hi = self._value(children[0], "number"), self._value(children[2], "number")
        return Value("range", f"{lo.text}-{hi.text}", self._cover(children[0], children[2]),
                     (lo, hi))

    def name(self, children):
        return self._value(children[0], "name")

    _kinds = {"IPV4": "ipv4", "IPV6": "ipv6", "NUMBER": "number", "STRING": "string",
              "VARREF": "var", "NAME": "name", "WILDNAME": "name"}

    def _as_value(self, node) -> Value:
        if isinstance(node, Value):
            return node
        return self._value(node, self._kinds[node.type])


_BUILDER = _Builder()
