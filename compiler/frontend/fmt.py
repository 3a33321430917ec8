"""``pfc fmt``: the canonical text of a policy. Idempotent, comments kept.

Canonical form: one statement per line (continued lines are joined), single spaces,
lists as ``{ a, b }``, ``accept`` written ``pass``, IPv6 in RFC 5952 form, hex digits in
lower case (MAC addresses too), a trailing comment two spaces after its statement, at
most one blank line in a row, none at the start or end. Whole firewalls (v2): a block's
statements and comments indented by 4 spaces, no blank line just inside its braces, and
one blank line between a top-level block (with the comments right above it) and its
neighbours. Only the syntax is needed: a file with type errors is still formatted, a
file with syntax errors (an unclosed block included) is not.
"""

from __future__ import annotations

import ipaddress

from pfc.frontend.diagnostics import Diagnostic, capped
from pfc.frontend.firewall.blocks import depths
from pfc.frontend.parse import parse
from pfc.frontend.pipeline import text_errors
from pfc.frontend.source import SourceFile
from pfc.frontend.syntax import (
    BlockClose,
    BlockOpen,
    Comment,
    Default,
    Define,
    InterfaceDecl,
    MatchNode,
    Module,
    OptionNode,
    RuleNode,
    SetDecl,
    Statement,
    Target,
    Value,
)


def format_source(source: SourceFile) -> tuple[str | None, list[Diagnostic]]:
    """The formatted text, or None and the diagnostics (syntax errors, a file that is
    not UTF-8, text that is not valid Unicode). Never raises. A leading byte-order
    mark is dropped."""
    diags = text_errors(source)
    if diags:
        return None, diags
    module, diags = parse(source)
    if diags:
        return None, capped(diags)
    return format_module(module), []


def format_module(module: Module) -> str:
    items: list[tuple[int, int, object]] = [(s.span.start, s.span.end, s)
                                            for s in module.statements]
    trailing = _trailing_comments(module)
    items += [(c.span.start, c.span.end, c) for c in module.comments if id(c) not in trailing]
    items.sort(key=lambda item: item[0])
    rows: list[_Row] = []
    prev_end = None
    text = module.source.text
    depth = depths(module.statements)
    level = 0  # of the last statement: where a comment on its own line belongs
    for start, end, item in items:
        if prev_end is not None and text.count("\n", prev_end, start) > 1:
            rows.append(_BLANK)
        code, comment = _row(item, trailing)
        if not isinstance(item, Comment):
            level = depth.get(id(item), 0)
            level += isinstance(item, BlockOpen) and not item.closed
            at = depth.get(id(item), 0)
        else:
            at = level
        rows.append(_Row(_kind(item), at, code, comment))
        prev_end = end
    return "".join(line + "\n" for line in _aligned(_spaced(rows)))


class _Row:
    """One line: ``kind`` (blank, comment, open, close, stmt), its depth, code and
    trailing comment."""

    def __init__(self, kind: str, depth: int = 0, code: str = "", comment: str = ""):
        self.kind, self.depth, self.code, self.comment = kind, depth, code, comment

    def line(self) -> tuple[str, str] | None:
        if self.kind == "blank":
            return None
        indent = "    " * self.depth
        if not self.code:
            return "", indent + self.comment
        return indent + self.code, self.comment


_BLANK = _Row("blank")


def _kind(item: object) -> str:
    if isinstance(item, Comment):
        return "comment"
    if isinstance(item, BlockOpen):
        return "block" if item.closed else "open"
    return "close" if isinstance(item, BlockClose) else "stmt"


def _spaced(rows: list[_Row]) -> list[tuple[str, str] | None]:
    """No blank line just inside a block's braces; one around each top-level block
    (before the comments right above it)."""
    kept = [r for i, r in enumerate(rows) if not (r.kind == "blank" and (
        (i > 0 and rows[i - 1].kind == "open")
        or (i + 1 < len(rows) and rows[i + 1].kind == "close")))]
    out: list[_Row] = []
    for row in kept:
        if row.kind in ("open", "block") and row.depth == 0:
            j = len(out)
            while j > 0 and out[j - 1].kind == "comment" and out[j - 1].depth == 0:
                j -= 1
            if j > 0 and out[j - 1].kind != "blank":
                out.insert(j, _BLANK)
        elif out and out[-1].kind in ("close", "block") and out[-1].depth == 0 \
                and row.kind != "blank":
            out.append(_BLANK)
        out.append(row)
    return [r.line() for r in out]


def _aligned(rows: list[tuple[str, str] | None]) -> list[str]:
    """Trailing comments line up within a block of statement lines (a blank line or a
    comment on its own line ends the block)."""
    out: list[str] = []
    block: list[tuple[str, str]] = []
    for row in rows + [None]:
        if row is not None and row[0]:
            block.append(row)
            continue
        width = max((len(code) for code, comment in block if comment), default=0)
        out.extend(f"{code.ljust(width)}  {comment}" if comment else code
                   for code, comment in block)
        block = []
        out.append("" if row is None else row[1])
    while out and out[-1] == "":
        out.pop()
    return out


def _trailing_comments(module: Module) -> dict[int, Comment]:
    """Comments on a statement's (last) line, keyed by id, mapped to the statement."""
    text = module.source.text
    by_line_end = {}
    for stmt in module.statements:
        line_end = text.find("\n", stmt.span.end)
        by_line_end[line_end if line_end >= 0 else len(text)] = stmt
    found = {}
    for c in module.comments:
        line_end = text.find("\n", c.span.start)
        stmt = by_line_end.get(line_end if line_end >= 0 else len(text))
        if stmt is not None and stmt.span.end <= c.span.start:
            found[id(c)] = c
            found[id(stmt)] = c
    return found


def _row(item: object, trailing: dict[int, Comment]) -> tuple[str, str]:
    if isinstance(item, Comment):
        return "", item.text.rstrip()
    comment = trailing.get(id(item))
    return statement(item), comment.text.rstrip() if comment is not None else ""


def statement(stmt: Statement) -> str:
    if isinstance(stmt, (BlockOpen, BlockClose, InterfaceDecl)):
        return _v2_statement(stmt)
    if isinstance(stmt, Define):
        return f"define {stmt.name} = {value(stmt.value)}"
    if isinstance(stmt, SetDecl):
        return f"set {stmt.name} = file {stmt.path.text}"
    if isinstance(stmt, Default):
        return f"default {_verdict(stmt.verdict)}"
    return rule(stmt)


def _v2_statement(stmt: BlockOpen | BlockClose | InterfaceDecl) -> str:
    if isinstance(stmt, BlockClose):
        return "}"
    if isinstance(stmt, InterfaceDecl):
        parts = ["interface", value(stmt.name)]
        if stmt.addresses is not None:
            parts += ["address", value(stmt.addresses)]
        if stmt.gateway is not None:
            parts += ["gateway", value(stmt.gateway)]
        return " ".join(parts)
    head = f"chain {stmt.name}" if stmt.kind == "chain" else stmt.name
    if stmt.devices:
        head += " " + ", ".join(value(d) for d in stmt.devices)
    return head + (" { }" if stmt.closed else " {")


def rule(node: RuleNode) -> str:
    """``ACTION [NAME] [PROTO] MATCH* OPTION* [with R] [to TARGET]``."""
    parts = [_verdict(node.action)]
    if node.chain is not None:
        parts.append(node.chain.text)
    if node.protocol:
        parts.append(node.protocol)
    parts.extend(match(m) for m in node.matches)
    parts.extend(option(o) for o in node.options)
    parts.extend(f"with {w.value.text}" for w in node.reject_with)
    if node.target is not None:
        parts.append("to " + target(node.target))
    return " ".join(parts)


def match(node: MatchNode) -> str:
    neg = "!" if node.negated else ""
    if node.field == "frag":
        return f"{neg}frag"
    if node.field in ("ct", "ct-status"):
        word = "state" if node.field == "ct" else "status"
        return f"{neg}ct {word} " + ",".join(value(i) for i in node.value.items)
    if node.field == "ct-mark":
        return f"{neg}ct mark {value(node.value)}"
    if node.field == "flags":
        return f"{neg}flags " + ",".join(("!" if f.negated else "") + f.name for f in node.flags)
    if node.field == "payload":
        window = _number(node.offset)
        if node.length is not None:
            window += ":" + _number(node.length)
        return f"{neg}payload[{window}] == {value(node.value)}"
    return f"{neg}{node.field} {value(node.value)}"


def option(node: OptionNode) -> str:
    """``prefix "web"``, ``rate 10/second``, ``snap 64``, ``audit``,
    ``limit rate 100/second burst 10 per src``."""
    if node.kind in ("prefix", "snap", "num", "first"):
        return f"{node.kind} {value(node.value)}"
    if node.kind in ("audit", "bypass"):
        return node.kind
    rate = f"rate {_number(node.rate.count)}/{node.rate.unit.text}"
    if node.kind == "rate":
        return rate
    out = f"limit {rate}"
    if node.burst is not None:
        out += f" burst {_number(node.burst)}"
    if node.per is not None:
        out += f" per {node.per.text}"
    return out


def target(node: Target) -> str:
    if node.address is None:  # `to :PORT`
        return ":" + value(node.port)
    address = value(node.address)
    if node.port is None:
        return address
    if node.address.kind == "ipv6":
        address = f"[{address}]"
    return f"{address}:{value(node.port)}"


def value(v: Value) -> str:
    if v.kind == "list":
        return "{ " + ", ".join(value(i) for i in v.items) + " }"
    if v.kind == "var":
        return "$" + v.text
    if v.kind == "ipv6":
        return _ipv6(v.text)
    if v.kind == "number":
        return _number(v)
    if v.kind == "range":
        return "-".join(_number(i) for i in v.items)
    if v.kind == "mac":
        return v.text.lower()
    return v.text


def _number(v: Value) -> str:
    return "0x" + v.text[2:].lower() if v.text.lower().startswith("0x") else v.text


def _ipv6(text: str) -> str:
    address, _, length = text.partition("/")
    try:
        canonical = str(ipaddress.IPv6Address(address))
    except ValueError:
        return text
    return f"{canonical}/{length}" if length else canonical


def _verdict(word: str) -> str:
    return "pass" if word == "accept" else word
