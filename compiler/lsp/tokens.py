"""Semantic tokens (full document) from the grammar's own terminals.

Token types (the legend): the LSP's standard ``keyword``, ``number``, ``string``,
``variable``, ``comment``, ``operator``, ``enumMember`` and three of pfc's own, declared
with a standard super type in the VS Code extension so themes colour them anyway:
``action`` (keyword), ``protocol`` (type), ``field`` (property), plus ``address``
(number). Modifier ``declaration`` marks the name in ``define``/``set``.
"""

from __future__ import annotations

from pfc.lsp.text import LineIndex, Tok, lex

TOKEN_TYPES = ("keyword", "action", "protocol", "field", "number", "address", "string",
               "variable", "comment", "operator", "enumMember")
TOKEN_MODIFIERS = ("declaration",)

_KIND = {
    **dict.fromkeys(("DEFINE", "SET", "FILE", "DEFAULT", "TO", "CHAIN", "INTERFACE",
                     "ADDRESS", "GATEWAY", "WITH", "INGRESS", "EGRESS", "RAW", "NAT",
                     "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING", "CLOSE"),
                    "keyword"),
    **dict.fromkeys(("DROP", "PASS", "ACCEPT", "COUNT", "REDIRECT", "REJECT", "NOTRACK",
                     "MARK", "DNAT", "SNAT", "MASQUERADE", "JUMP", "GOTO"), "action"),
    **dict.fromkeys(("ALL", "IP", "IP6", "TCP", "UDP", "ICMP", "ICMP6"), "protocol"),
    **dict.fromkeys(("FIELD", "FLAGS", "FRAG", "PAYLOAD", "V2FIELD", "STATUS"), "field"),
    "WILDNAME": "enumMember", "PORTONLY": "number",
    "NUMBER": "number", "IPV4": "address", "IPV6": "address", "STRING": "string",
    "VARREF": "variable", "COMMENT": "comment", "NOT": "operator", "EQEQ": "operator",
}
_VALUE_BEFORE = frozenset(("FIELD", "V2FIELD", "COMMA", "LBRACE"))


def classify(tokens: list[Tok], text: str | None = None) -> list[tuple[Tok, str, int]]:
    """(token, type, modifier bits) for every token that gets a colour (``text``: the
    text lexed, so a line's first token is known: ``{`` ending the line above makes
    no value of it, ``mark`` starting a line is the action)."""
    out = []
    prev = None
    for tok in tokens:
        if text is not None and prev is not None and "\n" in text[prev.end:tok.start]:
            prev = None
        kind, mods = _KIND.get(tok.type), 0
        if tok.type == "V2FIELD" and tok.text == "mark" and prev is None:
            kind = "action"
        if kind in ("action", "protocol") and prev is not None and prev.type in _VALUE_BEFORE:
            kind = "enumMember"  # `proto tcp`, `icmp-type { redirect, ... }`: a value
        if tok.type == "NAME":
            declares = prev is not None and prev.type in ("DEFINE", "SET", "CHAIN")
            kind, mods = ("variable", 1) if declares else ("enumMember", 0)
        if kind is not None:
            out.append((tok, kind, mods))
        prev = tok
    return out


def encode(text: str, index: LineIndex | None = None) -> list[int]:
    """The LSP's relative 5-integer encoding of every coloured token."""
    index = index or LineIndex(text)
    data: list[int] = []
    last_line = last_col = 0
    for tok, kind, mods in classify(lex(text), text):
        start, end = index.position(tok.start), index.position(tok.end)
        if start.line != end.line:  # tokens never span lines; be safe anyway
            continue
        delta_line = start.line - last_line
        delta_col = start.character - (last_col if delta_line == 0 else 0)
        data += [delta_line, delta_col, end.character - start.character,
                 TOKEN_TYPES.index(kind), mods]
        last_line, last_col = start.line, start.character
    return data


def decode(data: list[int]) -> list[tuple[int, int, int, str, int]]:
    """(line, column, length, type, modifiers) from the encoding (for tests and tools)."""
    out, line, col = [], 0, 0
    for i in range(0, len(data), 5):
        delta_line, delta_col, length, kind, mods = data[i:i + 5]
        line += delta_line
        col = col + delta_col if delta_line == 0 else delta_col
        out.append((line, col, length, TOKEN_TYPES[kind], mods))
    return out
