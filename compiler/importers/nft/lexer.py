"""nft's ruleset syntax as tokens, each with its place in the file.

Words are runs of letters, digits and ``_ . : / - * +`` (addresses, prefixes, ranges
``10-20``, names ``echo-request``, ``1.2.3.4:80``); ``$name`` and ``@set`` are words of
their own kind; strings are ``"..."``; the rest is punctuation. A standalone ``.`` is
the concatenation operator, a standalone ``:`` a map's separator, ``-``/``+`` a range
or priority offset when spaced. ``#`` starts a comment (``# handle 4`` included), a
backslash at a line's end continues it. Newlines are tokens: they end rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+|\\\r?\n)
  | (?P<comment>\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<var>\$[A-Za-z_][A-Za-z0-9_]*)
  | (?P<setref>@[A-Za-z_][A-Za-z0-9_./-]*)
  | (?P<op>==|!=|<=|>=)
  | (?P<word>[A-Za-z0-9_.:/*-][A-Za-z0-9_.:/*+-]*)
  | (?P<punct>[{}()\[\];,=<>&|^!~+])
  | (?P<bad>.)
""", re.X)


@dataclass(frozen=True)
class Tok:
    kind: str  # word str var setref op punct nl bad eof
    text: str
    start: int
    end: int

    def is_(self, *texts: str) -> bool:
        return self.kind in ("word", "punct", "op") and self.text in texts


def tokens(text: str) -> list[Tok]:
    out: list[Tok] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        value = m.group()
        if kind == "str":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        if kind == "word" and value in (".", ":", "-", "/"):
            kind = "punct"
        out.append(Tok(kind, value, m.start(), m.end()))
    out.append(Tok("eof", "", len(text), len(text)))
    return out
