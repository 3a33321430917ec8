"""A cursor over an nft file's tokens (``pfc.importers.nft.lexer``), with the spans
and origins its reader hands on, and the error of a statement that cannot be read."""

from __future__ import annotations

import re

from pfc.frontend.source import SourceFile, Span
from pfc.importers.model import Origin
from pfc.importers.nft.lexer import Tok

END = ("nl", "eof")
_HANDLE = re.compile(r"handle \d+")


class ParseError(Exception):
    def __init__(self, message: str, span: Span | None = None):
        super().__init__(message)
        self.message, self.span = message, span


class Cursor:
    def __init__(self, source: SourceFile, toks: list[Tok], defines: dict):
        self.source, self.toks, self.i, self.defines = source, toks, 0, defines
        self.chain_name = "anon"  # the chain being read (names its chain bindings)
        self.serial = 0
        self.anonymous: list = []  # chain bindings read: (name, rules, span)
        self.stateful = False  # a set element carried a limit or a quota

    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        tok = self.peek()
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def at_end(self) -> bool:
        return self.peek().kind == "eof"

    def span(self, a: Tok, b: Tok) -> Span:
        return Span(self.source.name, a.start, max(a.end, b.end))

    def origin(self, a: Tok, b: Tok) -> Origin:
        span = self.span(a, b)
        line = self.source.position(span.start)[0]
        return Origin(span, line, " ".join(self.source.text[span.start:span.end].split()))

    def trailing_comment(self, last: Tok) -> str:
        """A person's ``# ...`` after the rule ending at ``last``, on the same line (not
        nft's own ``# handle N``); "" when there is none."""
        text = self.source.text
        if not 0 < last.end <= len(text):
            return ""
        stop = text.find("\n", last.end)
        head, hash_, tail = text[last.end:stop if stop >= 0 else len(text)].partition("#")
        tail = tail.strip()
        if not hash_ or head.strip(" \t;") or _HANDLE.fullmatch(tail):
            return ""
        return tail

    def expect(self, text: str) -> Tok:
        tok = self.next()
        if not tok.is_(text):
            raise ParseError(f"expected `{text}`, found `{tok.text or 'the end'}`",
                             self.span(tok, tok))
        return tok

    def expect_word(self) -> Tok:
        tok = self.next()
        if tok.kind not in ("word", "str"):
            raise ParseError(f"expected a name, found `{tok.text or 'the end'}`",
                             self.span(tok, tok))
        return tok

    def expect_kind(self, kind: str) -> Tok:
        tok = self.next()
        if tok.kind != kind:
            raise ParseError(f"expected a {kind}, found `{tok.text or 'the end'}`",
                             self.span(tok, tok))
        return tok

    def rule_end(self) -> bool:
        tok = self.peek()
        return tok.kind in END or tok.is_(";", "}")

    def skip_statement(self) -> None:
        """To the end of the statement: its newline or `;`, past any `{ ... }` it
        opened; a `}` closing an enclosing block is left for it."""
        depth = 0
        while not self.at_end():
            tok = self.peek()
            if tok.is_("{"):
                depth += 1
            elif tok.is_("}"):
                if depth == 0:
                    return
                depth -= 1
            elif depth == 0 and (tok.kind == "nl" or tok.is_(";")):
                self.next()
                return
            self.next()

    def skip_block(self) -> None:
        if not self.peek().is_("{"):
            return
        depth = 0
        while not self.at_end():
            tok = self.next()
            depth += tok.is_("{") - tok.is_("}")
            if depth == 0:
                return

    def words_until(self, *stops: str) -> list[Tok]:
        out = []
        while not self.at_end() and not (self.peek().kind in stops or self.peek().is_(*stops)):
            out.append(self.next())
        return out
