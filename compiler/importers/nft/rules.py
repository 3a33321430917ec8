"""One nft rule read into matches and statements (``pfc.importers.nft.ast``), and the
values they take: words, ``{ sets }``, ``@refs``, ``$defines``, concatenations
``a . b``, flag lists ``a,b`` / ``a | b``, masks ``a / b``, maps ``k : v``.
"""

from __future__ import annotations

from pfc.importers.nft.ast import (
    HEADERS,
    META_KEYS,
    OPS,
    STATEMENTS,
    VERDICTS,
    NftRule,
    Rel,
    Stmt,
    Val,
)
from pfc.importers.nft.cursor import Cursor, ParseError
from pfc.importers.nft.lexer import Tok

# ------------------------------------------------------------------------ rules

def unreadable(cur: Cursor, exc: ParseError, first: Tok) -> NftRule:
    """A rule pfc could not read, kept in its place so that it is refused there (and
    counts for nothing in a chain no hook reaches); the cursor skips it."""
    start = cur.i
    cur.skip_statement()
    end = cur.toks[max(start, cur.i - 1)]
    if end.kind == "nl" or end.is_(";"):
        end = cur.toks[max(start, cur.i - 2)]
    return NftRule([Stmt("unreadable", exc.span or cur.span(first, first),
                         {"message": exc.message})], cur.origin(first, end))

def read_rule(cur: Cursor) -> NftRule:
    """One rule; on ``ParseError`` the cursor is back at the rule's first token, so the
    caller skips the whole rule, braces balanced (a set literal over lines included)."""
    start = cur.i
    try:
        return _rule(cur)
    except ParseError:
        cur.i = start
        raise


def _rule(cur: Cursor) -> NftRule:
    first = cur.peek()
    nodes = []
    comment = ""
    last = first
    while not cur.rule_end():
        node = _node(cur)
        if isinstance(node, Stmt) and node.name == "comment":
            comment = node.value.text if node.value else ""
        else:
            nodes.append(node)
        last = cur.toks[cur.i - 1]
    return NftRule(nodes, cur.origin(first, last), comment or cur.trailing_comment(last))


def _node(cur: Cursor) -> Rel | Stmt:
    tok = cur.peek()
    if tok.kind != "word":
        raise ParseError(f"`{tok.text}`: an nft expression pfc does not read (expected "
                         "a match or a statement here)", cur.span(tok, tok))
    if tok.text in VERDICTS:
        cur.next()
        return Stmt(tok.text, cur.span(tok, tok))
    if tok.text in STATEMENTS:
        return _statement(cur)
    sel = [_selector(cur)]
    if cur.peek().is_("set"):
        cur.next()
        if cur.peek().kind == "word" and (cur.peek().text in HEADERS | META_KEYS or
                                          cur.peek().text in ("meta", "ct", "rt", "fib",
                                                              "numgen", "jhash", "symhash")):
            start = cur.peek()
            value = Val("selector", _selector(cur), cur.span(start, start))
            if cur.peek().is_("map"):
                cur.next()
                value = Val("lookup", "", value.span, (_primary(cur),), (value.text,))
        else:
            value = read_value(cur)
        return Stmt("set", cur.span(tok, cur.toks[cur.i - 1]), value=value,
                    sel=tuple(sel))
    while cur.peek().is_("."):
        cur.next()
        sel.append(_selector(cur))
    return _relation(cur, tuple(sel), tok)


def _selector(cur: Cursor) -> str:
    tok = cur.next()
    word = tok.text
    if tok.kind != "word":
        raise ParseError(f"`{word}`: expected a match", cur.span(tok, tok))
    if word in META_KEYS:
        return f"meta {word}"
    if word == "meta":
        return f"meta {cur.expect_word().text}"
    if word == "ct":
        parts = [cur.expect_word().text]
        if parts[0] in ("original", "reply") and cur.peek().kind == "word":
            parts.append(cur.next().text)
        return "ct " + " ".join(parts)
    if word == "fib":
        parts = [cur.expect_word().text]
        while cur.peek().is_("."):
            cur.next()
            parts.append(cur.expect_word().text)
        parts.append(cur.expect_word().text)
        return "fib " + " ".join(parts)
    if word in ("tcp", "ip") and cur.peek().is_("option"):
        cur.next()
        parts = [cur.expect_word().text]
        if cur.peek().kind == "word" and cur.peek().text not in ("set", "exists",
                                                                  "missing"):
            parts.append(cur.next().text)
        return f"{word} option " + " ".join(parts)
    if word in HEADERS or word in ("rt", "numgen", "jhash", "symhash", "exthdr"):
        return f"{word} {cur.expect_word().text}"
    raise ParseError(f"`{word}`: an nft expression pfc does not read (an unknown match, "
                     "arithmetic or bit operations on a value)", cur.span(tok, tok))


def _relation(cur: Cursor, sel: tuple[str, ...], first: Tok) -> Rel:
    mask = None
    if cur.peek().is_("&"):
        cur.next()
        mask = _primary(cur, flags=True)
    op = ""  # implicit: on flags "any of them", elsewhere equality
    if cur.peek().is_("vmap"):
        cur.next()
        op = "vmap"
    elif cur.peek().kind in ("op", "punct", "word") and cur.peek().text in OPS:
        op = OPS[cur.next().text]
    if cur.rule_end():
        raise ParseError(f"`{' . '.join(sel)}` without a value", cur.span(first, first))
    value = read_value(cur)
    return Rel(sel, op, value, cur.span(first, cur.toks[cur.i - 1]), mask)


# ------------------------------------------------------------------------ values

def read_value(cur: Cursor, in_set: bool = False) -> Val:
    """A value: a concatenation, flags (``a,b`` outside sets, ``a | b``), a spaced
    range ``a - b``, a mask ``a / b``."""
    first = cur.peek()
    parts = [_primary(cur)]
    while cur.peek().is_("."):
        cur.next()
        parts.append(_primary(cur))
    value = parts[0] if len(parts) == 1 else Val("concat", "", cur.span(first, first),
                                                 tuple(parts))
    if cur.peek().is_("-") and not in_set or cur.peek().is_("-") and in_set:
        cur.next()
        value = Val("range", "", value.span, (value, _primary(cur)))
    flags = [value]
    while cur.peek().is_("|") or (cur.peek().is_(",") and not in_set
                                   and cur.peek(1).kind == "word"):
        cur.next()
        flags.append(_primary(cur))
    if len(flags) > 1:
        value = Val("flags", "", value.span, tuple(flags))
    if cur.peek().is_("/"):
        cur.next()
        value = Val("masked", "", value.span, (value, read_value(cur, in_set)))
    return value


def _primary(cur: Cursor, flags: bool = False) -> Val:
    tok = cur.next()
    span = cur.span(tok, tok)
    if tok.is_("{"):
        return _set_literal(cur, tok)
    if tok.is_("("):
        inner = read_value(cur)
        cur.expect(")")
        return inner
    if tok.kind == "var":
        if tok.text[1:] not in cur.defines:
            raise ParseError(f"`{tok.text}` is not defined", span)
        return cur.defines[tok.text[1:]]
    if tok.kind == "setref":
        return Val("ref", tok.text[1:], span)
    if tok.kind == "str":
        return Val("str", tok.text, span)
    if tok.kind == "word":
        if flags and cur.peek().is_("|"):
            items = [Val("word", tok.text, span)]
            while cur.peek().is_("|"):
                cur.next()
                items.append(_primary(cur))
            return Val("flags", "", span, tuple(items))
        return Val("word", tok.text, span)
    raise ParseError(f"`{tok.text or 'the end'}`: expected a value", span)


def _set_literal(cur: Cursor, open_tok: Tok) -> Val:
    items = []
    while True:
        while cur.peek().kind == "nl" or cur.peek().is_(","):
            cur.next()
        if cur.peek().is_("}"):
            end = cur.next()
            return Val("set", "", cur.span(open_tok, end), tuple(items))
        if cur.at_end():
            raise ParseError("a set without its `}`", cur.span(open_tok, open_tok))
        item = _element(cur)
        if item.kind == "set":  # `{ $defined_set, x }`
            items += list(item.items)
        else:
            items.append(item)


def _element(cur: Cursor) -> Val:
    key = read_value(cur, in_set=True)
    _element_options(cur)
    if key.kind == "word" and ":" in key.text and key.text.rsplit(":", 1)[1] in VERDICTS:
        left, right = key.text.rsplit(":", 1)  # `25:accept`
        key = Val("map", "", key.span, (Val("word", left, key.span),
                                        Val("word", right, key.span)))
    elif cur.peek().is_(":"):
        cur.next()
        target = _verdict_or_value(cur)
        key = Val("map", "", key.span, (key, target))
        _element_options(cur)
    return key


def _element_options(cur: Cursor) -> None:
    """``timeout 1s``, ``expires 2s``, ``comment "x"``, ``counter packets 0 bytes 0``;
    ``limit rate ...`` and ``quota ...`` (statements a lookup runs: ``cur.stateful``)."""
    while cur.peek().is_("timeout", "expires", "comment", "counter", "packets", "bytes",
                         "limit", "quota", "rate", "burst", "over", "until", "used"):
        word = cur.next()
        if word.is_("limit", "quota"):
            cur.stateful = True
        if not word.is_("counter", "limit", "quota", "over") and not cur.peek().is_(
                ",", "}", ":") and cur.peek().kind != "nl":
            cur.next()
            if cur.peek().is_("/"):  # `1 / second`
                cur.next()
                cur.next()


def _verdict_or_value(cur: Cursor) -> Val:
    tok = cur.peek()
    if tok.is_("jump", "goto"):
        cur.next()
        target = cur.expect_word()
        return Val(tok.text, target.text, cur.span(tok, target))
    return read_value(cur, in_set=True)


# ------------------------------------------------------------------------ statements

def _statement(cur: Cursor) -> Stmt:
    tok = cur.next()
    name = tok.text
    options: dict = {}
    value = None
    if name in ("jump", "goto") and cur.peek().is_("{"):
        value = Val("word", _anonymous(cur), cur.span(tok, tok))
    elif name in ("jump", "goto"):
        value = Val("word", cur.expect_word().text, cur.span(tok, tok))
    elif name == "reject":
        if cur.peek().is_("with"):
            cur.next()
            options["with"] = tuple(t.text for t in _words(cur, 3))
    elif name == "comment":
        value = Val("str", cur.expect_kind("str").text, cur.span(tok, tok))
    elif name in ("counter", "log", "limit", "masquerade", "redirect", "notrack",
                  "flow", "dnat", "snat"):
        options, value = _options(cur, name)
    else:
        options["words"] = tuple(t.text for t in _rest(cur))
    return Stmt(name, cur.span(tok, cur.toks[cur.i - 1]), options, value)


def _anonymous(cur: Cursor) -> str:
    """``jump { rules }`` (a chain binding): its rules as a chain named after the
    chain it is bound in, ``NAME-N`` (``cur.anonymous`` collects them)."""
    open_tok = cur.next()
    cur.serial += 1
    name = f"{cur.chain_name}-{cur.serial}"
    rules = []
    while True:
        tok = cur.peek()
        if tok.kind == "eof":
            raise ParseError("a chain binding without its `}`", cur.span(open_tok, open_tok))
        if tok.is_("}"):
            cur.next()
            break
        if tok.kind == "nl" or tok.is_(";"):
            cur.next()
            continue
        try:
            rules.append(read_rule(cur))
        except ParseError as exc:  # one rule of the binding, not the binding, is lost
            rules.append(unreadable(cur, exc, tok))
    cur.anonymous.append((name, rules, cur.span(open_tok, open_tok)))
    return name


def _words(cur: Cursor, n: int) -> list[Tok]:
    out = []
    while len(out) < n and cur.peek().kind in ("word", "str") and not cur.rule_end() \
            and cur.peek().text not in VERDICTS | STATEMENTS:
        out.append(cur.next())
    return out


def _rest(cur: Cursor) -> list[Tok]:
    out = []
    while not cur.rule_end():
        if cur.peek().is_("{"):
            start = cur.i
            cur.skip_block()
            out += cur.toks[start:cur.i]
        else:
            out.append(cur.next())
    return out


_NAT_FLAGS = frozenset(("random", "fully-random", "persistent", "netmap", "prefix"))
_OPTION_WORDS = {
    "counter": ("packets", "bytes", "name"),
    "log": ("prefix", "level", "group", "snaplen", "queue-threshold", "flags"),
    "limit": ("rate", "burst", "name", "over"),
    "queue": ("num", "to", "flags", "bypass", "fanout"),
    "flow": ("add", "offload"),
}


def _options(cur: Cursor, name: str) -> tuple[dict, Val | None]:
    """Keyword options of a statement (``log prefix "x" level warn``), up to the next
    match, statement or the rule's end."""
    options: dict = {}
    value = None
    if name in ("dnat", "snat", "masquerade", "redirect"):
        return _nat_options(cur, name)
    keys = _OPTION_WORDS.get(name, ())
    while not cur.rule_end() and cur.peek().text in keys:
        key = cur.next().text
        if name == "limit" and key == "rate":
            options["rate"] = _rate(cur)
        elif key in ("over", "bypass", "fanout"):
            options[key] = True
        elif key == "name" and name in ("counter", "limit"):  # a named object, maybe by map
            if cur.peek().kind == "word" and cur.peek().text in HEADERS | META_KEYS | {
                    "meta", "ct"}:
                options["name"] = _selector(cur)
                while cur.peek().is_("."):
                    cur.next()
                    _selector(cur)
            else:
                options["name"] = _primary(cur).text
            if cur.peek().is_("map"):
                cur.next()
                _primary(cur)
        elif key == "burst":
            options["burst"] = cur.next().text
            if cur.peek().is_("packets", "bytes"):
                options["burst-unit"] = cur.next().text
        elif key == "flags" and name == "log":
            options["flags"] = []
            while not cur.rule_end() and cur.peek().kind == "word" and \
                    cur.peek().text not in keys and cur.peek().text not in VERDICTS | \
                    STATEMENTS or cur.peek().is_(","):
                options["flags"].append(cur.next().text)
        else:
            options[key] = cur.next().text
    return options, value


def _rate(cur: Cursor) -> str:
    """``10/second``, ``10 / second``, ``over 10/minute``, ``1 mbytes/second``."""
    words = []
    if cur.peek().is_("over"):
        cur.next()
        words.append("over")
    while not cur.rule_end() and len(words) < 5 and not cur.peek().is_("burst") \
            and cur.peek().text not in VERDICTS | STATEMENTS:
        tok = cur.next()
        words.append(tok.text)
        if "/" in tok.text and not tok.text.endswith("/"):
            break
        if tok.is_("/"):
            words.append(cur.next().text)
            break
    return " ".join(words)


def _nat_options(cur: Cursor, name: str) -> tuple[dict, Val | None]:
    options: dict = {}
    value = None
    if cur.peek().is_("ip", "ip6") and not cur.peek(1).is_("saddr", "daddr"):
        options["family"] = cur.next().text
    if cur.peek().is_("addr", "prefix"):
        options["kind"] = cur.next().text
        if cur.peek().is_(".") and cur.peek(1).is_("port"):  # `dnat ip addr . port to`
            cur.next()
            cur.next()
            options["kind"] = "addr . port"
    if cur.peek().is_("to"):
        cur.next()
        value = _nat_target(cur)
    while not cur.rule_end() and (cur.peek().text in _NAT_FLAGS or cur.peek().is_(",")):
        options.setdefault("flags", []).append(cur.next().text)
    return options, value


def _nat_target(cur: Cursor) -> Val:
    """``1.2.3.4``, ``1.2.3.4:80``, ``[::1]:80``, ``:8080``, ``ip saddr map { ... }``."""
    tok = cur.peek()
    if tok.is_(":"):
        cur.next()
        port = _primary(cur)
        return Val("port", port.text, cur.span(tok, tok), (port,))
    if tok.is_("["):
        cur.next()
        addr = cur.next()
        cur.expect("]")
        port = None
        if cur.peek().is_(":") or (cur.peek().kind == "word" and cur.peek().text.startswith(":")):
            colon = cur.next()
            port = colon.text[1:] if colon.text != ":" else cur.next().text
        text = f"[{addr.text}]" + (f":{port}" if port else "")
        return Val("word", text, cur.span(tok, tok))
    if tok.kind == "word" and (tok.text in HEADERS or tok.text in META_KEYS
                               or tok.text in ("meta", "ct", "numgen", "jhash")):
        sel = [_selector(cur)]
        while cur.peek().is_("."):
            cur.next()
            sel.append(_selector(cur))
        cur.expect("map")
        mapping = _primary(cur)
        return Val("lookup", "", cur.span(tok, tok), (mapping,), tuple(sel))
    value = read_value(cur)
    if cur.peek().is_(":"):
        cur.next()
        port = _primary(cur)
        return Val("word", f"{value.text}:{port.text}", value.span)
    return value
