"""nft's ruleset syntax (``nft list ruleset`` output and ``nft -f`` files) read into
``pfc.importers.nft.ast``: tables, chains, sets and maps, rules; ``define``,
``include``, the ``add``/``insert``/``create`` command forms, ``flush``. What cannot be
read is a ``Problem`` at its place; reading goes on after the statement.
"""

from __future__ import annotations

import glob
import os
from contextvars import ContextVar
from pathlib import Path

from pfc.frontend.source import MAX_POLICY_BYTES, SourceFile, Span
from pfc.importers.model import Origin
from pfc.importers.nft.ast import NftChain, NftSet, NftTable, Problem, Ruleset
from pfc.importers.nft.cursor import Cursor, ParseError
from pfc.importers.nft.lexer import Tok, tokens
from pfc.importers.nft.rules import read_rule, read_value, unreadable

FAMILIES = ("ip", "ip6", "inet", "arp", "bridge", "netdev")
PRIORITIES = {"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50,
              "srcnat": 100, "out": 100}
MAX_INCLUDE_DEPTH = 16
# `pfc import --root DIR`: absolute include paths are read under DIR (a copied /etc)
ROOT: ContextVar[str | None] = ContextVar("pfc_import_root", default=None)


def read_ruleset(source: SourceFile, ruleset: Ruleset | None = None,
                 defines: dict | None = None, depth: int = 0) -> Ruleset:
    ruleset = ruleset if ruleset is not None else Ruleset()
    ruleset.sources[source.name] = source
    cur = Cursor(source, tokens(source.text), defines if defines is not None else {})
    while not cur.at_end():
        start = cur.peek()
        try:
            _top(cur, ruleset, depth)
        except ParseError as exc:
            _problem(ruleset, cur, exc, start)
            cur.skip_statement()
    return ruleset


def _problem(ruleset: Ruleset, cur: Cursor, exc: ParseError, start: Tok) -> None:
    span = exc.span or cur.span(start, start)
    ruleset.problems.append(Problem(exc.message, span, cur.origin(start, start)))


def _top(cur: Cursor, ruleset: Ruleset, depth: int) -> None:
    tok = cur.next()
    if tok.kind == "nl" or tok.is_(";"):
        return
    word = tok.text
    if tok.is_("define", "redefine"):
        name = cur.expect_word()
        cur.expect("=")
        cur.defines[name.text] = read_value(cur)
    elif tok.is_("undefine"):
        cur.defines.pop(cur.expect_word().text, None)
    elif tok.is_("include"):
        _include(cur, ruleset, cur.expect_kind("str"), depth)
    elif tok.is_("flush"):
        _flush(cur, ruleset)
    elif tok.is_("table"):
        _table(cur, ruleset, tok)
    elif tok.is_("add", "create", "insert", "replace"):
        _command(cur, ruleset, tok)
    elif tok.is_("delete", "destroy", "list", "reset", "rename"):
        raise ParseError(f"`{word}`: pfc imports rulesets, not commands that change one",
                         cur.span(tok, tok))
    else:
        raise ParseError(f"`{word}`: expected `table`, `define`, `include`, `flush` or "
                         "`add`", cur.span(tok, tok))


def _include(cur: Cursor, ruleset: Ruleset, path: Tok, depth: int) -> None:
    if depth >= MAX_INCLUDE_DEPTH:
        raise ParseError("includes nested too deep", cur.span(path, path))
    base = Path(cur.source.name).parent if cur.source.name not in ("<stdin>", "<expr>") \
        else Path.cwd()
    pattern = path.text if os.path.isabs(path.text) else str(base / path.text)
    if os.path.isabs(path.text) and ROOT.get() is not None:
        pattern = str(Path(ROOT.get()) / path.text.lstrip("/"))
    found = sorted(glob.glob(pattern)) if any(c in path.text for c in "*?[") else \
        [pattern]
    for name in found:
        try:
            included = SourceFile.read(name, limit=MAX_POLICY_BYTES, regular_only=True)
        except OSError as exc:
            raise ParseError(f"cannot read included `{path.text}`: "
                             f"{exc.strerror or exc}", cur.span(path, path)) from None
        read_ruleset(included, ruleset, cur.defines, depth + 1)


def _flush(cur: Cursor, ruleset: Ruleset) -> None:
    what = cur.next()
    if what.is_("ruleset"):
        ruleset.tables.clear()
    elif what.is_("table"):
        family, name = _family_name(cur)
        for t in ruleset.tables:
            if t.family == family and t.name == name:
                t.chains = {n: NftChain(c.name, c.span, c.type, c.hook, c.priority,
                                        c.policy, c.devices) for n, c in t.chains.items()}
    elif what.is_("chain"):
        family, name = _family_name(cur)
        chain = cur.expect_word().text
        table = ruleset.table(family, name, cur.span(what, what))
        if chain in table.chains:
            table.chains[chain].rules.clear()
    cur.skip_statement()


def _family_name(cur: Cursor) -> tuple[str, str]:
    first = cur.expect_word()
    if first.text in FAMILIES and cur.peek().kind in ("word", "str"):
        return first.text, cur.next().text
    return "ip", first.text


def _table(cur: Cursor, ruleset: Ruleset, tok: Tok) -> NftTable:
    family, name = _family_name(cur)
    table = ruleset.table(family, name, cur.span(tok, tok))
    if cur.peek().is_("{"):
        cur.next()
        _table_body(cur, ruleset, table)
    return table


def _table_body(cur: Cursor, ruleset: Ruleset, table: NftTable) -> None:
    while True:
        tok = cur.next()
        if tok.kind == "eof":
            raise ParseError("the table is not closed (`}` missing)", cur.span(tok, tok))
        if tok.is_("}"):
            return
        if tok.kind == "nl" or tok.is_(";"):
            continue
        try:
            _table_item(cur, ruleset, table, tok)
        except ParseError as exc:
            _problem(ruleset, cur, exc, tok)
            cur.skip_statement()


def _table_item(cur: Cursor, ruleset: Ruleset, table: NftTable, tok: Tok) -> None:
    if tok.is_("define", "redefine"):  # nft takes these inside a table too
        name = cur.expect_word()
        cur.expect("=")
        cur.defines[name.text] = read_value(cur)
    elif tok.is_("include"):
        _include(cur, ruleset, cur.expect_kind("str"), 0)
    elif tok.is_("chain"):
        _chain(cur, ruleset, table, cur.expect_word(), tok)
    elif tok.is_("set", "map"):
        _set(cur, table, cur.expect_word(), tok.text == "map")
    elif tok.is_("flowtable"):
        table.flowtables.append(cur.span(tok, tok))
        cur.next()
        cur.skip_block()
    elif tok.is_("flags", "comment"):
        cur.skip_statement()
    elif tok.is_("counter", "quota", "limit", "ct", "secmark", "synproxy", "tunnel"):
        cur.skip_statement()
        if cur.peek().is_("{"):
            cur.skip_block()
    else:
        raise ParseError(f"`{tok.text}`: expected `chain`, `set`, `map` or `flowtable`",
                         cur.span(tok, tok))


def _chain(cur: Cursor, ruleset: Ruleset, table: NftTable, name: Tok, tok: Tok) -> NftChain:
    chain = table.chains.get(name.text)
    if chain is None:
        chain = table.chains[name.text] = NftChain(name.text, cur.span(tok, name))
    if not cur.peek().is_("{"):
        return chain
    cur.next()
    while True:
        first = cur.peek()
        if first.kind == "eof":
            raise ParseError("the chain is not closed (`}` missing)", cur.span(first, first))
        if first.is_("}"):
            cur.next()
            return chain
        if first.kind == "nl" or first.is_(";"):
            cur.next()
            continue
        try:
            if not _chain_setting(cur, chain):
                cur.chain_name = chain.name
                chain.rules.append(read_rule(cur))
                _bindings(cur, table)
        except ParseError as exc:  # the rule stays, unreadable, where it was
            chain.rules.append(unreadable(cur, exc, first))
            cur.anonymous.clear()


def _bindings(cur: Cursor, table: NftTable) -> None:
    """The chain bindings (``jump { ... }``) a rule held, as chains of the table."""
    for name, rules, span in cur.anonymous:
        while name in table.chains:
            name += "x"
        table.chains[name] = NftChain(name, span, rules=rules)
    cur.anonymous.clear()


def _chain_setting(cur: Cursor, chain: NftChain) -> bool:
    """``type T hook H [device D] priority P;``, ``policy P;``, ``devices = {...}``,
    ``comment "..."``; False for a rule."""
    tok = cur.peek()
    if tok.is_("type") and cur.peek(1).kind == "word" and cur.peek(2).is_("hook"):
        cur.next()
        chain.type = cur.expect_word().text
        cur.expect("hook")
        chain.hook = cur.expect_word().text
        if cur.peek().is_("device"):
            cur.next()
            chain.devices = (cur.next().text,)
        if cur.peek().is_("devices"):
            cur.next()
            cur.expect("=")
            chain.devices = tuple(v.text for v in read_value(cur).items)
        cur.expect("priority")
        chain.priority = _priority(cur)
        return True
    if tok.is_("policy") and cur.peek(1).is_("accept", "drop"):
        cur.next()
        chain.policy_span = cur.span(cur.peek(), cur.peek())
        chain.policy = cur.next().text
        return True
    if tok.is_("devices") and cur.peek(1).is_("="):
        cur.next()
        cur.next()
        chain.devices = tuple(v.text for v in read_value(cur).items)
        return True
    if tok.is_("comment") and cur.peek(1).kind == "str":
        cur.next()
        chain.comment = cur.next().text
        return True
    return False


def _priority(cur: Cursor) -> int:
    tok = cur.next()
    base = PRIORITIES.get(tok.text)
    if base is None:
        try:
            return int(tok.text, 0)
        except ValueError:
            raise ParseError(f"priority `{tok.text}`", cur.span(tok, tok)) from None
    if cur.peek().is_("+", "-"):
        sign = cur.next().text
        offset = cur.next()
        if not (offset.text.isascii() and offset.text.isdigit()):
            raise ParseError(f"priority offset `{offset.text}`", cur.span(offset, offset))
        return base + int(offset.text) * (1 if sign == "+" else -1)
    return base


def _set(cur: Cursor, table: NftTable, name: Tok, is_map: bool) -> NftSet:
    nft_set = table.sets.get(name.text) or NftSet(name.text, cur.span(name, name),
                                                   is_map=is_map)
    table.sets[name.text] = nft_set
    if not cur.peek().is_("{"):
        return nft_set
    cur.next()
    while True:
        tok = cur.next()
        if tok.kind == "eof":
            raise ParseError("the set is not closed (`}` missing)", cur.span(tok, tok))
        if tok.is_("}"):
            return nft_set
        if tok.kind == "nl" or tok.is_(";"):
            continue
        _set_setting(cur, nft_set, tok)


def _set_setting(cur: Cursor, nft_set: NftSet, tok: Tok) -> None:
    if tok.is_("type", "typeof"):
        words = cur.words_until(":", ";", "nl", "}")
        nft_set.type = tuple(w.text for w in words if w.text != ".")
        if cur.peek().is_(":"):
            cur.next()
            nft_set.data = tuple(w.text for w in cur.words_until(";", "nl", "}"))
    elif tok.is_("flags"):
        nft_set.flags = tuple(w.text for w in cur.words_until(";", "nl", "}")
                              if w.text != ",")
        nft_set.dynamic |= "dynamic" in nft_set.flags or "timeout" in nft_set.flags
    elif tok.is_("elements"):
        cur.expect("=")
        cur.stateful = False
        value = read_value(cur)
        nft_set.elements += list(value.items if value.kind == "set" else (value,))
        nft_set.dynamic |= cur.stateful
    elif tok.is_("limit", "quota", "ct"):  # statements every lookup runs
        nft_set.dynamic = True
        cur.skip_statement()
    elif tok.is_("timeout", "gc-interval"):
        nft_set.dynamic = True
        cur.skip_statement()
    else:  # size, policy, auto-merge, counter, comment
        cur.skip_statement()


def _command(cur: Cursor, ruleset: Ruleset, verb: Tok) -> None:
    """``add table|chain|set|map|element|rule ...`` (and ``create``/``insert``)."""
    what = cur.next()
    if what.is_("table"):
        _table(cur, ruleset, what)
        return
    family, name = _family_name(cur)
    table = ruleset.table(family, name, cur.span(what, what))
    if what.is_("chain"):
        _chain(cur, ruleset, table, cur.expect_word(), what)
    elif what.is_("set", "map"):
        _set(cur, table, cur.expect_word(), what.text == "map")
    elif what.is_("element"):
        target = cur.expect_word()
        nft_set = table.sets.get(target.text)
        if nft_set is None:
            raise ParseError(f"no set `{target.text}` in table {name}",
                             cur.span(target, target))
        nft_set.elements += list(read_value(cur).items)
    elif what.is_("rule"):
        chain_tok = cur.expect_word()
        chain = table.chains.get(chain_tok.text) or _chain(cur, ruleset, table, chain_tok,
                                                           what)
        if cur.peek().is_("position", "index", "handle"):
            cur.next()
            cur.next()
        cur.chain_name = chain.name
        rule = read_rule(cur)
        _bindings(cur, table)
        if verb.is_("insert"):
            chain.rules.insert(0, rule)
        else:
            chain.rules.append(rule)
    elif what.is_("flowtable"):
        table.flowtables.append(cur.span(what, what))
        cur.skip_statement()
    else:
        raise ParseError(f"`{verb.text} {what.text}`", cur.span(verb, what))


def origin_of(source: SourceFile, span: Span) -> Origin:
    line = source.position(span.start)[0]
    return Origin(span, line, " ".join(source.text[span.start:span.end].split()))
