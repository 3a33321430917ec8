"""Text helpers of the language server: LSP positions and a lexer that never fails.

LSP positions are 0-based lines and columns counted in the negotiated encoding's code
units (UTF-16 unless the client asked for ``utf-8`` or ``utf-32``); pfc's spans are
character offsets (:class:`pfc.frontend.source.Span`). :class:`LineIndex` converts both ways.

:func:`lex` splits any text, however broken, into the grammar's own terminals (lark's
lexer on ``grammar/pfc.lark``): the language server colours and hovers over half-typed
lines that do not parse, so a character the grammar does not know becomes one ``ERROR``
token and lexing goes on after it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

import lark
from lsprotocol import types

from pfc.frontend.parse import _parser
from pfc.frontend.source import Span

UTF16, UTF8, UTF32 = "utf-16", "utf-8", "utf-32"


def _units(char: str, encoding: str) -> int:
    if encoding == UTF8:
        return len(char.encode("utf-8"))
    if encoding == UTF32:
        return 1
    return 2 if ord(char) > 0xFFFF else 1


@dataclass
class LineIndex:
    """Character offsets ↔ LSP positions of one text. Lines end at ``\\n`` only, as in
    :class:`SourceFile` (a ``\\r`` before it stays part of the line's text)."""

    text: str
    encoding: str = UTF16

    @cached_property
    def starts(self) -> tuple[int, ...]:
        """Offsets of line starts (as :attr:`SourceFile.line_starts`, found faster)."""
        starts, at = [0], self.text.find("\n")
        while at >= 0:
            starts.append(at + 1)
            at = self.text.find("\n", at + 1)
        return tuple(starts)

    def line_of(self, offset: int) -> int:
        """0-based line holding a character offset."""
        offset = max(0, min(offset, len(self.text)))
        return bisect.bisect_right(self.starts, offset) - 1

    def line_text(self, line: int) -> str:
        """A 0-based line without its ``\\n``."""
        if not 0 <= line < len(self.starts):
            return ""
        end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)
        return self.text[self.starts[line]:end]

    def position(self, offset: int) -> types.Position:
        offset = max(0, min(offset, len(self.text)))
        line = self.line_of(offset)
        head = self.text[self.starts[line]:offset]
        return types.Position(line, self._width(head))

    def offset(self, position: types.Position) -> int:
        """The character offset of an LSP position; past the end of a line (or in the
        middle of a surrogate pair) clamps to the line's end (the character)."""
        if position.line >= len(self.starts):
            return len(self.text)
        start = self.starts[max(0, position.line)]
        line = self.line_text(position.line)
        if line.isascii() or self.encoding == UTF32:
            return start + min(position.character, len(line))
        units = 0
        for i, char in enumerate(line):
            if units >= position.character:
                return start + i
            units += _units(char, self.encoding)
        return start + len(line)

    def range(self, span: Span) -> types.Range:
        return types.Range(self.position(span.start), self.position(span.end))

    def end(self) -> types.Position:
        return self.position(len(self.text))

    def _width(self, text: str) -> int:
        if text.isascii() or self.encoding == UTF32:
            return len(text)
        return sum(_units(c, self.encoding) for c in text)


# ---------------------------------------------------------------------------- lexing

@dataclass(frozen=True)
class Tok:
    """One token: the grammar's terminal name (``DROP``, ``FIELD``, ``VARREF`` ...;
    ``ERROR`` for a character the grammar does not know) and its character range."""

    type: str
    text: str
    start: int
    end: int


_SKIP = frozenset(("WS", "_NL", "CONTINUATION"))


def lex(text: str, base: int = 0) -> list[Tok]:
    """Every token of ``text`` (comments included, blanks not), offsets shifted by
    ``base``. Never raises: an unknown character is an ``ERROR`` token."""
    out: list[Tok] = []
    pos = 0
    while pos < len(text):
        try:
            for t in _parser().lex(text[pos:], dont_ignore=True):
                if t.type not in _SKIP:
                    start = base + pos + t.start_pos
                    out.append(Tok(t.type, str(t), start, start + len(t)))
            break
        except lark.exceptions.UnexpectedCharacters as exc:
            bad = pos + exc.pos_in_stream
            out.append(Tok("ERROR", text[bad], base + bad, base + bad + 1))
            pos = bad + 1
    return out


def token_at(tokens: list[Tok], offset: int) -> Tok | None:
    """The token under a cursor: the one holding ``offset``, else the one ending there
    (a cursor just after a word still hovers it)."""
    for tok in tokens:
        if tok.start <= offset < tok.end:
            return tok
    return next((t for t in tokens if t.end == offset), None)
