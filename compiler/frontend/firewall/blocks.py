"""Blocks of a whole firewall: a block's opener (``input {``, ``chain web {``) and its
``}`` are statements of their own, one per line; this pairs them.

:func:`block_errors` is part of parsing (a block left open, a ``}`` that closes
nothing, a block inside a block are syntax errors with carets); :func:`layout` gives the
checker and ``pfc fmt`` the nesting, and never fails, whatever the errors: a block
opened inside another ends the first, a stray ``}`` is skipped, an open block runs to
the end of the file.

A line that did not parse but ends with ``{`` (``inptu {``) or starts with ``}`` stands
in for an opener or a closer, so one typo does not also make every ``}`` after it an
error.
"""

from __future__ import annotations

from dataclasses import dataclass

from pfc.frontend.diagnostics import Diagnostic, Note, error
from pfc.frontend.source import Span
from pfc.frontend.syntax import BlockClose, BlockOpen, Statement


@dataclass(frozen=True)
class Block:
    """A block: its opener, the statements inside, its closer (None: never closed)."""

    open: BlockOpen
    body: tuple[Statement, ...]
    close: BlockClose | None


def has_blocks(statements) -> bool:
    return any(isinstance(s, (BlockOpen, BlockClose)) for s in statements)


def block_errors(statements, broken=()) -> list[Diagnostic]:
    """Syntax errors of the block structure (none for a file without blocks);
    ``broken``: the stand-ins of lines that did not parse (``stand_ins``)."""
    if not has_blocks(statements):
        return []
    out: list[Diagnostic] = []
    open_: BlockOpen | None = None
    for item in _merged(statements, broken):
        real = not _is_stand_in(item)
        if isinstance(item, BlockOpen) and not item.closed:
            if open_ is not None and real and not _is_stand_in(open_):
                out.append(_nested(item, open_))
            open_ = item
        elif isinstance(item, BlockClose):
            if open_ is None and real:
                out.append(error("`}` closes no block", item.span, code="stray-close",
                                 hint="delete it, or open the block it should close "
                                 "(`input {`)"))
            open_ = None
        elif isinstance(item, BlockOpen) and open_ is not None and not _is_stand_in(open_):
            out.append(_nested(item, open_))
    if open_ is not None and not _is_stand_in(open_):
        out.append(error(f"{_what(open_)} is never closed", open_.span, code="unclosed",
                         hint="end it with `}` on a line of its own"))
    return out


STAND_IN = "broken"  # the kind of a stand-in opener


def _is_stand_in(item) -> bool:
    return isinstance(item, BlockOpen) and item.kind == STAND_IN or \
        isinstance(item, BlockClose) and item.span.start == item.span.end


def _merged(statements, broken) -> list:
    """Openers and closers, stand-ins included, in text order."""
    items = [s for s in statements if isinstance(s, (BlockOpen, BlockClose))]
    return sorted(items + list(broken), key=lambda s: s.span.start)


def _nested(inner: BlockOpen, outer: BlockOpen) -> Diagnostic:
    return error(f"{_what(inner)} cannot be inside {_what(outer)}", inner.span,
                 code="nested-block", notes=(Note(f"{_what(outer)} opens here, and is "
                                                  "not closed before it", outer.span),),
                 hint=f"close {_what(outer)} with `}}` first")


def _what(block: BlockOpen) -> str:
    return f"chain `{block.name}`" if block.kind == "chain" else f"block `{block.name}`"


def stand_ins(file: str, text: str, syntax: list[Diagnostic]) -> tuple:
    """A stand-in opener (kind ``broken``) or closer (an empty span) for each line
    with a syntax error that ends with ``{`` or starts with ``}``."""
    out, seen = [], set()
    for d in syntax:
        start = text.rfind("\n", 0, d.span.start) + 1
        if start in seen or d.span.start > len(text) or d.span.file != file:
            continue
        seen.add(start)
        end = text.find("\n", start)
        line = text[start:end if end >= 0 else len(text)].split("#", 1)[0].strip()
        span = Span(file, start, start)
        if line.endswith("{"):
            out.append(BlockOpen(STAND_IN, "", span, span))
        elif line.startswith("}"):
            out.append(BlockClose(span))
    return tuple(out)


def layout(statements, broken=()) -> list[Statement | Block]:
    """The top-level statements and blocks, in order (never fails; see the module);
    a stand-in opener (``broken``) makes a block of kind ``broken``."""
    out: list[Statement | Block] = []
    current: BlockOpen | None = None
    body: list[Statement] = []
    if broken:
        statements = sorted([*statements, *broken], key=lambda s: s.span.start)
    for stmt in statements:
        if isinstance(stmt, BlockOpen):
            if current is not None:
                out.append(Block(current, tuple(body), None))
            if stmt.closed:
                out.append(Block(stmt, (), BlockClose(stmt.span)))
                current, body = None, []
            else:
                current, body = stmt, []
        elif isinstance(stmt, BlockClose):
            if current is not None:
                out.append(Block(current, tuple(body), stmt))
                current, body = None, []
        elif current is not None:
            body.append(stmt)
        else:
            out.append(stmt)
    if current is not None:
        out.append(Block(current, tuple(body), None))
    return out


def depths(statements) -> dict[int, int]:
    """Each statement's nesting depth (0 or 1) by ``id``, as ``pfc fmt`` indents it:
    a block's body is 1, its opener and closer 0."""
    out: dict[int, int] = {}
    inside = False
    for stmt in statements:
        if isinstance(stmt, BlockOpen):
            out[id(stmt)] = 0
            inside = not stmt.closed
        elif isinstance(stmt, BlockClose):
            out[id(stmt)] = 0
            inside = False
        else:
            out[id(stmt)] = 1 if inside else 0
    return out
