"""Completion: what may come next at the cursor, from the line typed so far.

Half-typed lines do not parse, so the context comes from the text of the (logical) line
up to the cursor, split by a simple tokenizer (:func:`context`); what is valid in that
context comes from the field catalogue (``FIELDS[...].protocols``/``families``,
``PROTOCOLS``, ``TCP_FLAGS``, ``ICMP_TYPES``, ``ICMP6_TYPES``, ``PROTO_NUMBERS``), and
``$names`` from the declarations above the cursor. :func:`completion_list` turns the
items into the LSP answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from lsprotocol import types

from pfc.frontend import ir
from pfc.frontend.firewall.check import V1_FIELDS
from pfc.frontend.firewall.hooks import BLOCKS, allows_field
from pfc.lsp import firewall
from pfc.lsp.analysis import Analysis, declarations
from pfc.lsp.hover import ACTIONS, KEYWORDS, OPTIONS, PROTOCOL_DOCS
from pfc.lsp.text import LineIndex
from pfc.lsp.words import (
    SECOND_WORDS,
    TOP_WORDS,
    V2_ACTIONS,
    V2_KEYWORDS,
    block_doc,
    value_items,
)

_WORD = re.compile(r'#.*|"(?:\\.|[^"\\])*"?|\$[A-Za-z0-9_-]*|[A-Za-z_][A-Za-z0-9_-]*'
                   r'|[0-9A-Fa-f.:]+(?:/[0-9]*)?|==|\S')
_PARTIAL = re.compile(r"[$A-Za-z0-9_-]*$")
_VALUE_FIELDS = frozenset(("src", "dst", "sport", "dport", "ttl", "len"))
STATEMENT_WORDS = ("drop", "pass", "accept", "count", "redirect", "log", "define", "set",
                   "default")
# options after the matches, per action (``limit``'s own words once it is there); v2
# blocks add ``limit`` on pass and reject, and reject's ``with``
ACTION_OPTIONS = {"log": ("prefix", "rate", "snap"), "drop": ("limit", "audit")}
V2_OPTIONS = {"pass": ("limit",), "accept": ("limit",), "reject": ("limit", "with")}
# values after a v2 keyword: the context kind that offers them
_V2_VALUES = {"with": "reject-kind", "dst-type": "addr-type", "src-type": "addr-type",
              "ether-type": "ether-type", "iif": "iface", "oif": "iface"}
LIMIT_OPTIONS = ("burst", "per")
_VALUE_OPTIONS = frozenset(("prefix", "rate", "snap", "burst"))


@dataclass(frozen=True)
class Context:
    """``kind``: statement, default, set-file, protocol-or-match, match, flag, proto-value,
    icmp-type, name, ct-keyword, ct-state, limit-rate, per, unit, options (matches are
    over), none. ``partial`` is the word being typed (replaced by the item),
    starting at ``start`` (a character offset); ``used`` the fields (or flags) the rule
    already has."""

    kind: str
    partial: str = ""
    start: int = 0
    protocol: str | None = None
    action: str | None = None
    used: frozenset[str] = field(default_factory=frozenset)
    versions: frozenset[int] = frozenset((4, 6))
    options: tuple[str, ...] = ()  # the options still open to this rule
    block: str | None = None  # v2: the enclosing hook block, "chain", or None
    v2: bool = False  # the text is a whole firewall
    names: tuple[str, ...] = ()  # chains or interfaces to offer


def logical_prefix(text: str, offset: int) -> tuple[int, str]:
    """(start, text) of the logical line holding ``offset``, up to ``offset``: physical
    lines ending in ``\\`` (outside a comment) continue onto the next."""
    start = text.rfind("\n", 0, offset) + 1
    while start > 0:
        prev = text.rfind("\n", 0, start - 1) + 1
        line = text[prev:start - 1].rstrip("\r \t")
        if not line.endswith("\\") or "#" in line:
            break
        start = prev
    return start, text[start:offset]


def context(text: str, offset: int) -> Context:
    start, prefix = logical_prefix(text, offset)
    partial = _PARTIAL.search(prefix).group()
    words = [w for w in _WORD.findall(prefix[:len(prefix) - len(partial)]) if w != "\\"]
    if any(w.startswith("#") for w in words) or (words and _open_string(words[-1])):
        return Context("none")
    at = offset - len(partial)
    if partial.startswith("$"):
        return Context("name", partial, at)
    v2 = firewall.is_v2(text)
    block = firewall.enclosing(text, start) if v2 else None
    if not words:
        return Context("statement", partial, at, block=block, v2=v2)
    if words[0] in ("jump", "goto") and len(words) == 1:
        return Context("chain-name", partial, at, names=tuple(firewall.chains_above(text, start)))
    ctx = _statement_context(words, partial, at)
    ctx = replace(ctx, block=block, v2=v2)
    if ctx.kind == "iface":
        ctx = replace(ctx, names=tuple(firewall.interfaces(text)))
    return _v2_options(ctx, words) if v2 else ctx


def _open_string(word: str) -> bool:
    return word.startswith('"') and (len(word) == 1 or not word.endswith('"')
                                     or word.endswith('\\"'))


def _statement_context(words: list[str], partial: str, at: int) -> Context:
    first = words[0]
    if first in SECOND_WORDS and len(words) == 1:
        return Context("hook-second", partial, at, names=SECOND_WORDS[first])
    if first in ("jump", "goto"):
        words = [first, *words[2:]]  # the chain's name is not part of the rule
    if first == "interface":
        return Context("interface" if len(words) >= 2 and words[-1] not in (
            "address", "gateway") and "{" not in words else "none", partial, at)
    if first == "default":
        return Context("default" if len(words) == 1 else "none", partial, at)
    if first == "define":
        return Context("name" if words[2:3] == ["="] else "none", partial, at)
    if first == "set":
        return Context("set-file" if words[2:] == ["="] else "none", partial, at)
    if first not in ACTIONS and first not in V2_ACTIONS:
        return Context("none", partial, at)
    return _rule_context(words, partial, at)


def _rule_context(words: list[str], partial: str, at: int) -> Context:
    action = words[0]
    protocol = words[1] if len(words) > 1 and words[1] in ir.PROTOCOLS else None
    used = frozenset(w for w in words if w in ir.FIELDS)
    base = Context("match", partial, at, protocol, action, used, _versions(words, protocol),
                   _open_options(words))
    if "to" in words:
        return _with(base, "name" if words[-1] == "to" else "none")
    if len(words) == 1:
        return _with(base, "protocol-or-match")
    listed = _open_list_field(words)
    last = words[-1]
    if listed in ("proto", "icmp-type"):
        return _with(base, "proto-value" if listed == "proto" else "icmp-type")
    flags = _flag_list(words)
    if flags is not None:
        return _with(base, "flag", flags)
    special = _option_context(words)
    if special is not None:
        return _with(base, special[0], special[1])
    if last == "proto":
        return _with(base, "proto-value")
    if last == "icmp-type":
        return _with(base, "icmp-type")
    if last in _V2_VALUES or listed in _V2_VALUES:
        return _with(base, _V2_VALUES[last if last in _V2_VALUES else listed])
    if last in _VALUE_FIELDS or listed is not None:
        return _with(base, "name")
    if _in_payload(words):
        return _with(base, "none")
    if any(w in OPTIONS and w != "state" for w in words):
        return _with(base, "options")
    return base


def _in_payload(words: list[str]) -> bool:
    """Inside ``payload[OFF:LEN] == VALUE`` before its value is typed."""
    if "payload" not in words:
        return False
    tail = words[len(words) - words[::-1].index("payload"):]
    return "==" not in tail or tail[-1] == "=="


def _with(ctx: Context, kind: str, used: frozenset[str] | None = None) -> Context:
    return Context(kind, ctx.partial, ctx.start, ctx.protocol, ctx.action,
                   ctx.used if used is None else used, ctx.versions, ctx.options)


def _v2_options(ctx: Context, words: list[str]) -> Context:
    """In a whole firewall ``pass`` and ``reject`` take ``limit``, ``reject`` ``with``."""
    extra = tuple(o for o in V2_OPTIONS.get(words[0], ())
                  if o not in words and o not in ctx.options)
    if not extra or ctx.kind not in ("match", "options", "protocol-or-match"):
        return ctx
    return replace(ctx, options=ctx.options + extra)


def _open_options(words: list[str]) -> tuple[str, ...]:
    opts = ACTION_OPTIONS.get(words[0], ())
    if "limit" in words:
        opts += LIMIT_OPTIONS
    return tuple(o for o in opts if o not in words)


def _option_context(words: list[str]) -> tuple[str, frozenset[str] | None] | None:
    """Inside ``ct state ...``, after ``limit``/``per``/a rate's ``/``, or before an
    option's value: (context kind, states used), else None."""
    last = words[-1]
    if last == "ct":
        return "ct-keyword", None
    if "status" in words and words[words.index("status") - 1] == "ct":
        given = frozenset(w for w in words[words.index("status") + 1:] if w in ir.CT_STATUSES)
        if last in ("status", ",", "{"):
            return "ct-status", given
    states = _state_list(words)
    if states is not None:
        return "ct-state", states
    if last == "limit":
        return "limit-rate", None
    if last == "per":
        return "per", None
    if last.endswith("/") and len(words) > 1 and words[-2] == "rate":
        return "unit", None
    if last in _VALUE_OPTIONS:
        return "none", None
    return None


def _state_list(words: list[str]) -> frozenset[str] | None:
    """The states given so far when the cursor is inside a ``ct state`` list."""
    if "state" not in words:
        return None
    tail = words[len(words) - words[::-1].index("state"):]
    if any(w not in ir.CT_STATES and w not in (",", "{", "}") for w in tail):
        return None
    if tail and tail[-1] in ir.CT_STATES + ("}",) and "{" not in tail:
        return None  # `ct state new` + space: the list is done
    if "}" in tail:
        return None
    return frozenset(w for w in tail if w in ir.CT_STATES)


def _open_list_field(words: list[str]) -> str | None:
    """The field whose ``{`` list is still open at the cursor, if any."""
    depth = 0
    for i in range(len(words) - 1, -1, -1):
        if words[i] == "}":
            depth += 1
        elif words[i] == "{":
            if depth == 0:
                return words[i - 1] if i > 0 else ""
            depth -= 1
    return None


def _flag_list(words: list[str]) -> frozenset[str] | None:
    """The flags given so far when the cursor is inside a ``flags`` list, else None."""
    if "flags" not in words:
        return None
    i = len(words) - 1 - words[::-1].index("flags")
    tail = words[i + 1:]
    if any(w not in ir.TCP_FLAGS and w not in (",", "!") for w in tail):
        return None
    if tail and tail[-1] in ir.TCP_FLAGS:  # `flags syn` + space: the list is done
        return None
    return frozenset(w for w in tail if w in ir.TCP_FLAGS)


def _versions(words: list[str], protocol: str | None) -> frozenset[int]:
    versions = set(ir.PROTOCOLS[protocol or "all"][1].versions)
    if any(w.count(":") >= 2 for w in words):
        versions &= {6}
    if any(re.fullmatch(r"\d+\.\d+\.\d+\.\d+(/\d+)?", w) for w in words):
        versions &= {4}
    return frozenset(versions)


def fields_for(protocol: str | None, versions: frozenset[int] = frozenset((4, 6)),
               block: str | None = None, v2: bool = False) -> list[str]:
    """The match keywords valid in a rule of this protocol (and IP versions), in
    ``block`` (a hook block, ``chain``, or None: a v1 file, or outside blocks)."""
    proto, family = ir.PROTOCOLS[protocol or "all"]
    versions = versions & family.versions
    out = []
    for name, info in ir.FIELDS.items():
        if not _in_block(name, block, v2):
            continue
        if name == "ether-type" and protocol not in (None, "all"):
            continue
        if info.protocols is not None and proto not in info.protocols:
            continue
        if name == "proto" and protocol not in (None, "all", "ip", "ip6"):
            continue
        if not info.families.versions & versions:
            continue
        out.append(name)
    return out


def _in_block(field: str, block: str | None, v2: bool) -> bool:
    if block in BLOCKS:
        return allows_field(BLOCKS[block], field)
    return field in V1_FIELDS or (v2 and block == "chain")


# ---------------------------------------------------------------------------- items

@dataclass(frozen=True)
class Item:
    """A completion item before it becomes LSP data: ``kind`` is one of keyword,
    protocol, field, flag, value, variable."""

    label: str
    kind: str
    detail: str = ""
    doc: str = ""


def items(ctx: Context, names: dict[str, str]) -> list[Item]:
    """What to offer. ``names``: declared names (without ``$``) → their declaration."""
    if ctx.kind == "statement":
        return _statement_items(ctx)
    v2 = value_items(ctx.kind, ctx.names, ctx.used)
    if v2 is not None:
        return [Item(*i) for i in v2]
    if ctx.kind == "default":
        return [Item(v, "keyword", "default verdict") for v in ("pass", "drop")]
    if ctx.kind == "set-file":
        return [Item("file", "keyword", "set file", KEYWORDS["file"])]
    if ctx.kind == "name":
        return [Item("$" + n, "variable", "name", decl) for n, decl in names.items()]
    if ctx.kind == "flag":
        return [Item(f, "flag", f"TCP flag 0x{v:02x}", f"`{f}` set; `!{f}` clear")
                for f, v in ir.TCP_FLAGS.items() if f not in ctx.used]
    if ctx.kind == "proto-value":
        return [Item(p, "value", f"IP protocol {n}") for p, n in ir.PROTO_NUMBERS.items()]
    if ctx.kind == "icmp-type":
        return _icmp_items(ctx.protocol)
    if ctx.kind == "options":
        return _option_items(ctx)
    if ctx.kind in _OPTION_ITEMS:
        return _OPTION_ITEMS[ctx.kind](ctx)
    if ctx.kind == "protocol-or-match":
        return _protocol_items() + _field_items(ctx) + _option_items(ctx)
    if ctx.kind == "match":
        extra = [Item("to", "keyword", "redirect target", KEYWORDS["to"])] \
            if ctx.action == "redirect" else []
        return _field_items(ctx) + _option_items(ctx) + extra
    return []


def _option_items(ctx: Context) -> list[Item]:
    return [Item(o, "keyword", "option", OPTIONS[o][0] if o in OPTIONS else V2_KEYWORDS[o])
            for o in ctx.options]


def _statement_items(ctx: Context) -> list[Item]:
    """At the start of a line: the v1 words, the block words at the top level, the
    actions a block allows (and its ``default``) inside it."""
    if ctx.block is None:
        words = [w for w in STATEMENT_WORDS if not ctx.v2 or w in ("define", "set")]
        return [Item(w, "keyword", "action" if w in ACTIONS else "declaration",
                     ACTIONS[w][0] if w in ACTIONS else KEYWORDS[w]) for w in words] + \
            [Item(w, "keyword", "block" if w not in V2_KEYWORDS else "declaration",
                  V2_KEYWORDS.get(w) or block_doc(w)) for w in TOP_WORDS]
    spec = BLOCKS.get(ctx.block)
    allowed = spec.actions | {"accept"} if spec else set(ACTIONS) | set(V2_ACTIONS)
    out = [Item(w, "keyword", "action", doc) for w, (doc, _) in {**ACTIONS, **V2_ACTIONS}.items()
           if w in allowed and (w != "accept" or "pass" in allowed)]
    if spec is not None and spec.has_default:
        out.append(Item("default", "keyword", "declaration", KEYWORDS["default"]))
    return out


def _ct_words(ctx: Context) -> list[Item]:
    out = [Item("state", "keyword", "connection state", OPTIONS["state"][0])]
    if ctx.v2 and ctx.block not in ("ingress", "egress", "raw prerouting", "raw output"):
        out += [Item("status", "keyword", "connection status", V2_KEYWORDS["status"]),
                Item("mark", "keyword", "connection mark", ir.FIELDS["ct-mark"].doc)]
    return out


_OPTION_ITEMS = {
    "ct-keyword": _ct_words,
    "ct-state": lambda ctx: [Item(s, "value", "connection state") for s in ir.CT_STATES
                             if s not in ctx.used],
    "limit-rate": lambda ctx: [Item("rate", "keyword", "rate", OPTIONS["rate"][0])],
    "per": lambda ctx: [Item(f, "value", "bucket key", ir.FIELDS[f].doc)
                        for f in ("src", "dst")],
    "unit": lambda ctx: [Item(u, "value", "rate unit") for u in ("second", "minute")],
}


def _protocol_items() -> list[Item]:
    return [Item(p, "protocol", "protocol", doc) for p, (doc, _) in PROTOCOL_DOCS.items()]


def _field_items(ctx: Context) -> list[Item]:
    fields = [f for f in fields_for(ctx.protocol, ctx.versions, ctx.block, ctx.v2)
              if f not in ("ct-status", "ct-mark")]  # written `ct status`, `ct mark`
    return [Item(f, "field", ir.FIELDS[f].values, ir.FIELDS[f].doc)
            for f in fields if f not in ctx.used or f == "payload"]


def _icmp_items(protocol: str | None) -> list[Item]:
    tables = {"icmp": [("ICMP", ir.ICMP_TYPES)], "icmp6": [("ICMPv6", ir.ICMP6_TYPES)]}
    out: dict[str, Item] = {}
    for what, table in tables.get(protocol, tables["icmp"] + tables["icmp6"]):
        for name, number in table.items():
            detail = f"{what} type {number}"
            if name in out:
                detail = f"{out[name].detail}, {detail}"
            out[name] = Item(name, "value", detail)
    return list(out.values())


# ------------------------------------------------------------------- LSP items

def completion_list(text: str, position: types.Position, encoding: str,
                    last: Analysis | None) -> types.CompletionList:
    """LSP items for the cursor, from the current text (names from ``last``, the latest
    check, declared above the cursor's line)."""
    index = LineIndex(text, encoding)
    offset = index.offset(position)
    ctx = context(text, offset)
    line_start = index.starts[index.line_of(offset)]
    names = {} if last is None else {
        n: last.source.text[d.span.start:d.span.end]
        for n, d in declarations(last.module).items() if d.span.end <= line_start}
    edit_range = types.Range(index.position(ctx.start), position)
    return types.CompletionList(False, [_lsp_item(i, n, edit_range)
                                        for n, i in enumerate(items(ctx, names))])


def no_items() -> types.CompletionList:
    return types.CompletionList(False, [])


_KINDS = {"keyword": types.CompletionItemKind.Keyword,
          "protocol": types.CompletionItemKind.EnumMember,
          "field": types.CompletionItemKind.Field,
          "flag": types.CompletionItemKind.EnumMember,
          "value": types.CompletionItemKind.Value,
          "variable": types.CompletionItemKind.Variable}


def _lsp_item(item: Item, n: int, edit_range: types.Range) -> types.CompletionItem:
    doc = types.MarkupContent(types.MarkupKind.Markdown, item.doc) if item.doc else None
    return types.CompletionItem(item.label, kind=_KINDS[item.kind], detail=item.detail or None,
                                documentation=doc, sort_text=f"{n:03d}",
                                filter_text=item.label,
                                text_edit=types.TextEdit(edit_range, item.label))
