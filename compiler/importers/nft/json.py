"""``nft -j list ruleset`` (libnftables' JSON, docs: libnftables-json(5)) read into the
same AST as nft's text (``pfc.importers.nft.ast``), so one converter serves both. Each
object of the ``nftables`` array keeps its place in the file (its line for
diagnostics); the command forms (``add``, ``insert``, ``create``, ``flush``) are read
as ``nft -j -f`` reads them.
"""

from __future__ import annotations

import json

from pfc.frontend.source import SourceFile, Span
from pfc.importers.model import Origin
from pfc.importers.nft.ast import NftChain, NftRule, NftSet, Problem, Rel, Ruleset, Stmt, Val

OPS = {"==": "==", "!=": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "in": ""}
TERMINALS = ("accept", "drop", "continue", "return")


class Unreadable(Exception):
    pass


def read_json(source: SourceFile) -> Ruleset:
    ruleset = Ruleset()
    ruleset.sources[source.name] = source
    try:
        items = list(_items(source.text))
    except Unreadable as exc:
        span = source.span(0, 0)
        ruleset.problems.append(Problem(f"not nft JSON: {exc}", span, Origin(span, 1, "")))
        return ruleset
    for start, end, item in items:
        span = source.span(start, end)
        origin = Origin(span, source.position(start)[0], json.dumps(item)[:160])
        try:
            _item(ruleset, item, span, origin)
        except (Unreadable, KeyError, TypeError, ValueError, AttributeError) as exc:
            ruleset.problems.append(Problem(f"an nft JSON object pfc cannot read: {exc}",
                                            span, origin))
    return ruleset


def _items(text: str):
    """Each object of the top-level ``nftables`` array with its offsets."""
    decoder = json.JSONDecoder()
    at = text.find("[", text.find('"nftables"'))
    if at < 0 or '"nftables"' not in text:
        raise Unreadable('no "nftables" array')
    i = at + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text):
            raise Unreadable("the array is not closed")
        if text[i] == "]":
            return
        try:
            item, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise Unreadable(str(exc)) from None
        yield i, end, item
        i = end


def _item(ruleset: Ruleset, item, span: Span, origin: Origin) -> None:
    if not isinstance(item, dict) or len(item) != 1:
        raise Unreadable("expected an object with one key")
    (kind, body), = item.items()
    if kind in ("add", "create", "insert", "replace"):
        _item(ruleset, body, span, origin) if kind != "insert" else _insert(ruleset, body,
                                                                          span, origin)
    elif kind == "flush":
        if "ruleset" in body:
            ruleset.tables.clear()
    elif kind == "table":
        ruleset.table(body["family"], body["name"], span)
    elif kind == "chain":
        _chain(ruleset, body, span)
    elif kind in ("set", "map"):
        _set(ruleset, body, span, kind == "map")
    elif kind == "element":
        table = ruleset.table(body["family"], body["table"], span)
        target = table.sets.get(body["name"])
        if target is None:
            raise Unreadable(f"no set `{body['name']}`")
        target.elements += [_value(e, span) for e in body.get("elem", [])]
    elif kind == "rule":
        _rule(ruleset, body, span, origin, insert=False)
    elif kind == "flowtable":
        ruleset.table(body["family"], body["table"], span).flowtables.append(span)
    # metainfo, counter, quota, limit, ct helper ... objects: nothing to import


def _insert(ruleset: Ruleset, body, span: Span, origin: Origin) -> None:
    if "rule" in body:
        _rule(ruleset, body["rule"], span, origin, insert=True)
    else:
        _item(ruleset, body, span, origin)


def _chain(ruleset: Ruleset, body: dict, span: Span) -> None:
    table = ruleset.table(body["family"], body["table"], span)
    chain = table.chains.setdefault(body["name"], NftChain(body["name"], span))
    if "hook" in body:
        chain.type, chain.hook = body.get("type", "filter"), body["hook"]
        chain.priority = int(body.get("prio", 0))
        policy = body.get("policy", "accept")
        if policy not in ("accept", "drop"):
            chain.hook = None  # not a base chain pfc can place: its rules stay unreached
            raise Unreadable(f"chain policy `{policy}`")
        chain.policy = policy
        chain.policy_span = span
        devices = body.get("dev", body.get("devices", ()))
        chain.devices = (devices,) if isinstance(devices, str) else tuple(devices)


def _set(ruleset: Ruleset, body: dict, span: Span, is_map: bool) -> None:
    table = ruleset.table(body["family"], body["table"], span)
    kind = body.get("type", ())
    flags = tuple(body.get("flags", ()))
    nft_set = NftSet(body["name"], span, _type_words(kind), (), flags, [],
                     "dynamic" in flags or "timeout" in flags or "timeout" in body,
                     is_map)
    for element in body.get("elem", []):
        try:
            nft_set.elements.append(_element(element, span))
        except (Unreadable, KeyError, TypeError, ValueError) as exc:
            nft_set.broken = f"an element pfc cannot read ({exc})"
        if isinstance(element, dict) and set(element.get("elem", {})) - {
                "val", "counter", "timeout", "expires", "comment"}:
            nft_set.dynamic = True  # a limit or a quota every lookup runs
    if any("limit" in s or "quota" in s for s in body.get("stmt", [])):
        nft_set.dynamic = True
    table.sets[body["name"]] = nft_set


def _type_words(kind) -> tuple[str, ...]:
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, list):
        return tuple(k for k in kind if isinstance(k, str))
    return ("typeof",)


def _element(element, span: Span) -> Val:
    if isinstance(element, list) and len(element) == 2:  # a map's [key, value]
        return Val("map", "", span, (_value(element[0], span), _data(element[1], span)))
    return _value(element, span)


def _data(data, span: Span) -> Val:
    if isinstance(data, dict) and len(data) == 1:
        (key, body), = data.items()
        if key in TERMINALS:
            return Val("word", key, span)
        if key in ("jump", "goto"):
            return Val(key, body["target"], span)
    return _value(data, span)


def _value(value, span: Span) -> Val:
    """A JSON right-hand side as a text value would read."""
    if isinstance(value, bool):
        raise Unreadable("a boolean value")
    if isinstance(value, (int, float)):
        return Val("word", str(value), span)
    if isinstance(value, str):
        if value.startswith("@"):
            return Val("ref", value[1:], span)
        return Val("word", value, span)
    if isinstance(value, list):
        return Val("flags", "", span, tuple(_value(v, span) for v in value))
    if not isinstance(value, dict) or len(value) != 1:
        raise Unreadable(f"value {json.dumps(value)[:60]}")
    (key, body), = value.items()
    if key == "set":
        items = body if isinstance(body, list) else [body]
        return Val("set", "", span, tuple(_element(e, span) for e in items))
    if key == "prefix":
        return Val("word", f"{body['addr']}/{body['len']}", span)
    if key == "range":
        return Val("range", "", span, tuple(_value(v, span) for v in body))
    if key == "concat":
        return Val("concat", "", span, tuple(_value(v, span) for v in body))
    if key == "|":
        return Val("flags", "", span, tuple(_value(v, span) for v in body))
    if key == "elem":
        return _value(body["val"], span)
    raise Unreadable(f"value `{key}`")


# ------------------------------------------------------------------ rules

def _rule(ruleset: Ruleset, body: dict, span: Span, origin: Origin, insert: bool) -> None:
    table = ruleset.table(body["family"], body["table"], span)
    chain = table.chains.setdefault(body["chain"], NftChain(body["chain"], span))
    nodes = []
    for expr in body.get("expr", []):
        nodes.append(_node(expr, span))
    rule = NftRule(nodes, origin, body.get("comment", ""))
    chain.rules.insert(0, rule) if insert else chain.rules.append(rule)


def _node(expr, span: Span) -> Rel | Stmt:
    if not isinstance(expr, dict) or len(expr) != 1:
        return Stmt("unreadable", span, {"message": "an expression pfc cannot read"})
    (key, body), = expr.items()
    try:
        if key == "match":
            return _match(body, span)
        if key == "vmap":
            sel, mask = _selector(body["key"])
            return Rel(sel, "vmap", _verdicts(body["data"], span), span, mask)
        return _statement(key, body, span)
    except Unreadable as exc:
        return Stmt("unreadable", span, {"message": f"`{key}`: {exc}"})


def _match(body: dict, span: Span) -> Rel:
    sel, mask = _selector(body["left"])
    op = OPS.get(body.get("op", "=="))
    if op is None:
        raise Unreadable(f"operator `{body.get('op')}`")
    return Rel(sel, op, _value(body["right"], span), span,
               _value(mask, span) if mask is not None else None)


def _selector(left) -> tuple[tuple[str, ...], object]:
    """The selector names of a JSON left-hand side (``payload``, ``meta``, ``ct``,
    ``fib``, ``concat``), and the mask of an ``&``."""
    if isinstance(left, dict) and "&" in left:
        inner, mask = left["&"]
        sel, _ = _selector(inner)
        return sel, mask
    if isinstance(left, dict) and "concat" in left:
        return tuple(s for part in left["concat"] for s in _selector(part)[0]), None
    if not isinstance(left, dict) or len(left) != 1:
        raise Unreadable("a match pfc cannot read")
    (key, body), = left.items()
    if key == "payload" and "protocol" in body:
        return (f"{body['protocol']} {body['field']}",), None
    if key == "meta":
        return (f"meta {body['key']}",), None
    if key == "ct":
        direction = f"{body['dir']} " if "dir" in body else ""
        return (f"ct {direction}{body['key']}",), None
    if key == "fib":
        return ("fib " + " ".join(body.get("flags", [])) + f" {body['result']}",), None
    if key in ("tcp option", "ip option", "sctp chunk", "exthdr", "osf", "socket",
               "rt", "ipsec", "numgen", "jhash", "symhash", "payload"):
        raise Unreadable("a match pfc has no word for")
    raise Unreadable(f"`{key}`")


def _verdicts(data, span: Span) -> Val:
    if isinstance(data, str) and data.startswith("@"):
        return Val("ref", data[1:], span)
    return _value(data, span)


def _statement(key: str, body, span: Span) -> Stmt:
    if key in TERMINALS:
        return Stmt(key, span)
    if key in ("jump", "goto"):
        return Stmt(key, span, value=Val("word", body["target"], span))
    if key == "counter":
        return Stmt("counter", span)
    if key == "log":
        return Stmt("log", span, dict(body or {}))
    if key == "limit":
        return _limit(body, span)
    if key == "reject":
        return _reject(body, span)
    if key in ("dnat", "snat", "masquerade", "redirect"):
        return _nat(key, body or {}, span)
    if key == "mangle":
        sel, _ = _selector(body["key"])
        value = body["value"]
        val = Val("selector", "", span) if isinstance(value, dict) else _value(value, span)
        return Stmt("set", span, value=val, sel=sel)
    if key == "notrack":
        return Stmt("notrack", span)
    if key == "flow":
        return Stmt("flow", span)
    if key in ("set", "map"):
        op = body.get("op", "add") if isinstance(body, dict) else "add"
        return Stmt("update" if op == "update" else "delete" if op == "delete" else "add",
                    span)
    return Stmt(key.split()[0] if key.split()[0] in ("queue", "dup", "fwd", "tproxy",
                                                       "synproxy", "quota", "xt",
                                                       "last") else key, span)


def _limit(body: dict, span: Span) -> Stmt:
    rate = f"{body.get('rate')}/{body.get('per', 'second')}"
    if body.get("rate_unit", "packets") != "packets":
        rate = f"{body.get('rate')} bytes/{body.get('per', 'second')}"
    options = {"rate": ("over " if body.get("inv") else "") + rate}
    if "burst" in body:
        options["burst"] = str(body["burst"])
        if body.get("burst_unit", "packets") != "packets":
            options["burst-unit"] = "bytes"
    return Stmt("limit", span, options)


def _nat_lookup(body: dict, span: Span) -> Val:
    """``dnat to KEY map MAP`` as the text parser reads it: a ``lookup`` of the
    selectors of ``KEY`` in ``MAP`` (``@name`` or ``{ k : v, ... }``)."""
    sel, mask = _selector(body["key"])
    if mask is not None:
        raise Unreadable("a masked NAT map key")
    return Val("lookup", "", span, (_verdicts(body["data"], span),), sel)


def _reject(body, span: Span) -> Stmt:
    if not body:
        return Stmt("reject", span)
    kind = body.get("type", "icmpx")
    if kind == "tcp reset":
        return Stmt("reject", span, {"with": ("tcp", "reset")})
    return Stmt("reject", span, {"with": (kind, str(body.get("expr", "port-unreachable")))})


def _nat(key: str, body: dict, span: Span) -> Stmt:
    options = {}
    if "family" in body:
        options["family"] = body["family"]
    if body.get("flags"):
        options["flags"] = list(body["flags"]) if isinstance(body["flags"], list) else \
            [body["flags"]]
    addr, port = body.get("addr"), body.get("port")
    if isinstance(addr, dict) and "map" in addr and port is None:
        return Stmt(key, span, options, _nat_lookup(addr["map"], span))
    if isinstance(addr, dict) or isinstance(port, dict):
        raise Unreadable("a computed NAT address or port")
    if addr is None and port is None:
        return Stmt(key, span, options)
    if addr is None:
        return Stmt(key, span, options, Val("word", f":{port}", span))
    text = str(addr)
    if port is not None:
        text = f"[{text}]:{port}" if ":" in text else f"{text}:{port}"
    return Stmt(key, span, options, Val("word", text, span))
