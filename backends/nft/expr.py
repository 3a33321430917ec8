"""The lowered nftables data: expressions, matches and statements that know both their
``nft -f`` text and their libnftables JSON (``man libnftables-json``).

The backend builds every rule from these nodes once; ``templates/nft.j2`` prints their
``text`` and ``nft.render_json`` dumps their ``json``, so the two formats cannot drift apart
(tests load both and compare ``list ruleset``). Every value that reaches a node is
generated here from typed IR values (integers, ``ipaddress`` objects, bytes) or was
allow-listed (set and counter names): nothing from the policy text is pasted through.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

Json = Any


@dataclass(frozen=True)
class Node:
    """Anything printable: an expression, a value, a match or a statement."""

    text: str
    json: Json


# ----------------------------------------------------------------------- expressions

def field(protocol: str, name: str) -> Node:
    """A named header field: ``ip saddr``, ``tcp dport``, ``icmpv6 type`` ..."""
    return Node(f"{protocol} {name}", {"payload": {"protocol": protocol, "field": name}})


def raw(base: str, offset_bits: int, length_bits: int) -> Node:
    """A raw payload expression ``@BASE,OFFSET,LENGTH`` (bits), base ``nh``/``th``/``ih``."""
    return Node(f"@{base},{offset_bits},{length_bits}",
                {"payload": {"base": base, "offset": offset_bits, "len": length_bits}})


def meta(key: str) -> Node:
    return Node(f"meta {key}", {"meta": {"key": key}})


def masked(expr: Node, mask: int) -> Node:
    """``EXPR & MASK``."""
    return Node(f"{expr.text} & {mask:#x}", {"&": [expr.json, mask]})


# ---------------------------------------------------------------------------- values

def integer(value: int) -> Node:
    return Node(str(value), value)


def hexvalue(value: int) -> Node:
    return Node(f"{value:#x}", value)


def wide(data: bytes) -> Node:
    """Bytes as one big-endian integer (raw payloads up to 128 bits). JSON carries it
    as a ``0x`` string: libnftables reads JSON numbers into 64 bits only."""
    text = "0x" + data.hex()
    return Node(text, text if len(data) > 6 else int.from_bytes(data, "big"))


def symbol(name: str) -> Node:
    """A keyword value nft knows (``ip``, ``ipv6``, ``tcp`` ...): allow-listed callers."""
    return Node(name, name)


def span(lo: int, hi: int) -> Node:
    """An inclusive integer range (one value when ``lo == hi``)."""
    if lo == hi:
        return integer(lo)
    return Node(f"{lo}-{hi}", {"range": [lo, hi]})


def address(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Node:
    """A host address or a prefix."""
    text = address_text(net.network_address)
    if net.prefixlen == net.max_prefixlen:
        return Node(text, text)
    return Node(f"{text}/{net.prefixlen}", {"prefix": {"addr": text, "len": net.prefixlen}})


def address_text(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """``str(addr)``; IPv4 through ``inet_ntoa`` (5x faster: 100k-entry sets).
    IPv6 stays ``str``: ``inet_ntop`` writes ``::ffff:1.2.3.4`` for mapped addresses."""
    if addr.version == 4:
        return socket.inet_ntoa(int(addr).to_bytes(4, "big"))
    return str(addr)


def address_value(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> Node:
    return Node(str(addr), str(addr))


def anonymous_set(elements: list[Node]) -> Node:
    """``{ a, b }``; a single element is written bare."""
    if len(elements) == 1:
        return elements[0]
    return Node("{ " + ", ".join(e.text for e in elements) + " }",
                {"set": [e.json for e in elements]})


def set_ref(name: str) -> Node:
    return Node(f"@{name}", f"@{name}")


# --------------------------------------------------------------------- matches, stmts

def match(left: Node, right: Node, negated: bool = False) -> Node:
    """``LEFT RIGHT`` (equality, range or set membership) or ``LEFT != RIGHT``."""
    op = "!=" if negated else "=="
    text = f"{left.text} != {right.text}" if negated else f"{left.text} {right.text}"
    return Node(text, {"match": {"op": op, "left": left.json, "right": right.json}})


def compare(left: Node, op: str, right: Node) -> Node:
    """An ordering comparison (``>=``, ``<=``)."""
    if op not in (">=", "<=", ">", "<"):
        raise ValueError(op)
    return Node(f"{left.text} {op} {right.text}",
                {"match": {"op": op, "left": left.json, "right": right.json}})


def mangle(left: Node, value: Node) -> Node:
    """``LEFT set VALUE``: a payload or meta write."""
    return Node(f"{left.text} set {value.text}",
                {"mangle": {"key": left.json, "value": value.json}})


def counter(name: str | None = None) -> Node:
    """An anonymous counter, or a reference to the named counter object ``name``."""
    if name is None:
        return Node("counter", {"counter": None})
    return Node(f'counter name "{name}"', {"counter": name})


def verdict(name: str) -> Node:
    if name not in ("accept", "drop"):
        raise ValueError(name)
    return Node(name, {name: None})
