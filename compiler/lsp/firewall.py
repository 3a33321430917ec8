"""Whole firewalls (v2) in the editor: the block the cursor is in (from the text, which
may not parse while it is typed), the chains and interfaces a completion can offer,
folding ranges of blocks, and chain names for go-to-definition and references (from
the parsed module)."""

from __future__ import annotations

import re

from pfc.frontend.firewall.blocks import Block, layout
from pfc.frontend.source import Span
from pfc.frontend.syntax import BlockOpen, Module, RuleNode

_OPENER = re.compile(
    r"^[ \t]*(?:(chain)[ \t]+([A-Za-z_][A-Za-z0-9_-]*)|((?:raw|nat)[ \t]+[a-z]+|ingress"
    r"|egress|prerouting|input|forward|output|postrouting)(?![A-Za-z0-9_-]))[^\n{#]*\{"
    r"[ \t]*(\})?", re.M)
_CLOSER = re.compile(r"^[ \t]*\}", re.M)
_INTERFACE = re.compile(r"^[ \t]*interface[ \t]+([A-Za-z0-9_.@-]+)", re.M)


def enclosing(text: str, offset: int) -> str | None:
    """The block the line at ``offset`` is in: a hook name (``nat prerouting``),
    ``chain``, or None (top level)."""
    line_start = text.rfind("\n", 0, offset) + 1
    current = None
    events = [(m.start(), m) for m in _OPENER.finditer(text, 0, line_start)]
    events += [(m.start(), None) for m in _CLOSER.finditer(text, 0, line_start)]
    for _, m in sorted(events, key=lambda e: e[0]):
        if m is None or m.group(4):
            current = None
        else:
            current = "chain" if m.group(1) else " ".join(m.group(3).split())
    return current


def chains_above(text: str, offset: int) -> list[str]:
    """The chains defined above ``offset`` (a `jump` may use only those)."""
    return [m.group(2) for m in _OPENER.finditer(text, 0, offset) if m.group(1)]


def interfaces(text: str) -> list[str]:
    return list(dict.fromkeys(["lo", *_INTERFACE.findall(text)]))


def is_v2(text: str) -> bool:
    return _OPENER.search(text) is not None or _INTERFACE.search(text) is not None


def folding_ranges(module: Module) -> list[tuple[int, int]]:
    """(first line, last line), 0-based, of every block that spans lines."""
    out = []
    for item in layout(module.statements):
        if isinstance(item, Block) and item.close is not None:
            first = module.source.position(item.open.span.start)[0] - 1
            last = module.source.position(item.close.span.start)[0] - 1
            if last > first:
                out.append((first, last))
    return out


def chain_definitions(module: Module) -> dict[str, list[Span]]:
    """Every definition of each chain name (the name in ``chain NAME {``)."""
    out: dict[str, list[Span]] = {}
    for stmt in module.statements:
        if isinstance(stmt, BlockOpen) and stmt.kind == "chain":
            out.setdefault(stmt.name, []).append(stmt.name_span)
    return out


def chain_uses(module: Module) -> list[tuple[str, Span]]:
    """Every ``jump NAME`` / ``goto NAME``."""
    return [(s.chain.text, s.chain.span) for s in module.statements
            if isinstance(s, RuleNode) and s.chain is not None]


def chain_at(module: Module, offset: int) -> str | None:
    """The chain name under the cursor (a use or a definition)."""
    for name, span in chain_uses(module):
        if span.start <= offset <= span.end:
            return name
    for name, spans in chain_definitions(module).items():
        if any(s.start <= offset <= s.end for s in spans):
            return name
    return None
