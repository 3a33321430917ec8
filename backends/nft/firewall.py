"""The v2 words in nftables (docs/language.md "Whole firewalls"): interface, link-layer,
address-type, mark and connection-status matches, and the ``reject``, NAT, ``mark``
and ``notrack`` statements.

Every match here reads something nft has wherever the language allows the match
(semantics.md "What each block sees"), and is absent exactly where the interpreter's
is: ``ct status`` / ``ct mark`` on an untracked or invalid packet (nft's ``ct``
expression breaks the rule: false, negated or not). Interface names are the checker's
allow-listed names (letters, digits, ``_ . @ -`` and a trailing ``*``), quoted.
"""

from __future__ import annotations

from pfc.backends.nft import expr as x
from pfc.frontend import ir

# reject kind -> nft words: (icmp type, icmpv6 type, icmpx type)
REJECT_WORDS = {
    "port-unreachable": ("port-unreachable", "port-unreachable", "port-unreachable"),
    "admin-prohibited": ("admin-prohibited", "admin-prohibited", "admin-prohibited"),
    "host-unreachable": ("host-unreachable", "addr-unreachable", "host-unreachable"),
    "no-route": ("net-unreachable", "no-route", "no-route"),
    # one family's replies: the checker holds their rules to that family
    "proto-unreachable": ("prot-unreachable", None, None),
    "net-prohibited": ("net-prohibited", None, None),
    "host-prohibited": ("host-prohibited", None, None),
    "policy-fail": (None, "policy-fail", None), "reject-route": (None, "reject-route", None),
}
_FIB_FIELD = {"dst-type": "daddr", "src-type": "saddr"}


def is_v2(m: ir.Match) -> bool:
    return isinstance(m, (ir.IfaceMatch, ir.MacMatch, ir.AddrTypeMatch, ir.CtStatusMatch)) \
        or m.field in ("ether-type", "vlan-id", "mark", "ct-mark")


def match(m: ir.Match) -> list[x.Node]:
    """A v2 match as nft terms."""
    if isinstance(m, ir.IfaceMatch):
        key = "iifname" if m.field == "iif" else "oifname"
        values = [x.Node(f'"{n}"', n) for n in m.names]
        return [x.match(x.meta(key), _one_or_set(values), m.negated)]
    if isinstance(m, ir.MacMatch):
        left = x.field("ether", "saddr" if m.field == "ether-src" else "daddr")
        values = [x.Node(_mac(mac), _mac(mac)) for mac in m.macs]
        return [x.match(left, _one_or_set(values), m.negated)]
    if isinstance(m, ir.AddrTypeMatch):
        left = x.Node(f"fib {_FIB_FIELD[m.field]} type",
                      {"fib": {"result": "type", "flags": [_FIB_FIELD[m.field]]}})
        return [x.match(left, _one_or_set([x.symbol(t) for t in m.types]), m.negated)]
    if isinstance(m, ir.CtStatusMatch):
        return [_ct_status(m)]
    left = {"ether-type": x.meta("protocol"), "vlan-id": x.field("vlan", "id"),
            "mark": x.meta("mark"),
            "ct-mark": x.Node("ct mark", {"ct": {"key": "mark"}})}[m.field]
    values = [x.span(lo, hi) if lo != hi else _number(m.field, lo) for lo, hi in m.ranges]
    if m.negated and len(values) == 1 and m.ranges[0][0] == m.ranges[0][1]:
        v = m.ranges[0][0]  # `V-V`: nft merges adjacent != compares (lower.unmergeable)
        values = [x.Node(f"{v}-{v}", {"range": [v, v]})]
    return [x.match(left, _one_or_set(values), m.negated)]


def _number(field: str, value: int) -> x.Node:
    return x.hexvalue(value) if field in ("ether-type", "mark", "ct-mark") else x.integer(value)


def _ct_status(m: ir.CtStatusMatch) -> x.Node:
    """``ct status & (A|B) == A|B`` (every bit named set) or ``!=``: the masked form,
    since a bare ``ct status A`` in JSON is an ``in`` test and ``!=`` on a bitmask reads
    as "none of them"."""
    names = list(m.statuses)
    both = "|".join(names)
    value = names if len(names) > 1 else names[0]
    left = x.Node(f"ct status & ({both})", {"&": [{"ct": {"key": "status"}}, value]})
    return x.match(left, x.Node(both, value), m.negated)


def _one_or_set(values: list[x.Node]) -> x.Node:
    return values[0] if len(values) == 1 else x.anonymous_set(values)


def _mac(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


# ------------------------------------------------------------------------ statements

def reject(kind: str, version: int | None) -> x.Node:
    """``reject with ...``: by family after ``split_families`` (``icmp``/``icmpv6``),
    ``icmpx`` for a rule of every family."""
    if kind == "tcp-reset":
        return x.Node("reject with tcp reset", {"reject": {"type": "tcp reset"}})
    words = REJECT_WORDS[kind]
    kind_word, name = {4: ("icmp", words[0]), 6: ("icmpv6", words[1])}.get(
        version, ("icmpx", words[2]))
    return x.Node(f"reject with {kind_word} type {name}",
                  {"reject": {"type": kind_word, "expr": name}})


def nat(action: ir.Nat, version: int | None) -> x.Node:
    """``dnat ip to A:P``, ``snat ip6 to [A]:P``, ``masquerade``, ``redirect to :P``."""
    if action.kind == "masquerade":
        return x.Node("masquerade", {"masquerade": None})
    if action.kind == "redirect":
        body = {"port": action.port} if action.port is not None else None
        text = f"redirect to :{action.port}" if action.port is not None else "redirect"
        return x.Node(text, {"redirect": body})
    family = "ip" if action.address.version == 4 else "ip6"
    address = x.address_text(action.address)
    where = address if action.port is None else (
        f"{address}:{action.port}" if action.address.version == 4
        else f"[{address}]:{action.port}")
    body = {"family": family, "addr": str(action.address)}
    if action.port is not None:
        body["port"] = action.port
    return x.Node(f"{action.kind} {family} to {where}", {action.kind: body})


def mark(value: int) -> x.Node:
    return x.Node(f"meta mark set {value:#x}",
                  {"mangle": {"key": {"meta": {"key": "mark"}}, "value": value}})


def notrack() -> x.Node:
    return x.Node("notrack", {"notrack": None})
