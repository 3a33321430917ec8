"""nft matches in pfc's words: one ``Rel`` (``SELECTOR [& MASK] OP VALUE``) becomes
pfc matches as *alternatives* (disjoint conjunctions: a concatenated set, a verdict
map, ``tcp flags syn,ack`` (any of them) become one pfc rule per part). Two pseudo
fields ride along until the rule is assembled (``nft.assemble``): ``family`` (``4``/
``6``: what ``ip saddr`` or ``meta nfproto`` implies) and ``proto`` (the protocol
keyword's number, from ``meta l4proto``, ``tcp dport``'s dependency ...).

What differs from nft's own reading is in docs/import.md "What differs": nft's ``tcp
dport`` and ``meta l4proto`` follow IPv6 extension headers, pfc's ``tcp`` does not.
"""

from __future__ import annotations

import re
from contextvars import ContextVar

from pfc.importers.model import Match, Refuse
from pfc.importers.nft import values as v
from pfc.importers.nft.ast import Rel, Val

Conj = tuple[Match, ...]
# selector → (pfc field, family, value kind, protocol it depends on)
SELECTORS: dict[str, tuple[str, int | None, str, str | None]] = {
    "ip saddr": ("src", 4, "addr", None), "ip daddr": ("dst", 4, "addr", None),
    "ip6 saddr": ("src", 6, "addr", None), "ip6 daddr": ("dst", 6, "addr", None),
    "ip protocol": ("proto", 4, "proto", None), "ip6 nexthdr": ("proto", 6, "proto", None),
    "meta l4proto": ("proto", None, "proto", None),
    "ip ttl": ("ttl", 4, "int", None), "ip6 hoplimit": ("ttl", 6, "int", None),
    "ip length": ("len", 4, "int", None),
    "tcp sport": ("sport", None, "port", "tcp"), "tcp dport": ("dport", None, "port", "tcp"),
    "udp sport": ("sport", None, "port", "udp"), "udp dport": ("dport", None, "port", "udp"),
    "th sport": ("sport", None, "port", "th"), "th dport": ("dport", None, "port", "th"),
    "tcp flags": ("flags", None, "tcpflags", "tcp"),
    "icmp type": ("icmp-type", 4, "icmp", "icmp"), "icmp code": ("icmp-code", 4, "icmpcode",
                                                                "icmp"),
    "icmpv6 type": ("icmp-type", 6, "icmp6", "icmp6"),
    "icmpv6 code": ("icmp-code", 6, "icmp6code", "icmp6"),
    "meta iifname": ("iif", None, "ifname", None), "meta iif": ("iif", None, "ifname", None),
    "meta oifname": ("oif", None, "ifname", None), "meta oif": ("oif", None, "ifname", None),
    "ct state": ("ct", None, "ctstate", None), "ct status": ("ct-status", None, "ctstatus",
                                                            None),
    "ct mark": ("ct-mark", None, "int", None), "meta mark": ("mark", None, "int", None),
    "fib daddr type": ("dst-type", None, "fib", None),
    "fib saddr type": ("src-type", None, "fib", None),
    "ether saddr": ("ether-src", None, "mac", None),
    "ether daddr": ("ether-dst", None, "mac", None),
    "ether type": ("ether-type", None, "ethertype", None),
    "vlan id": ("vlan-id", None, "int", None),
    "meta nfproto": ("family", None, "nfproto", None),
    "meta protocol": ("family", None, "ethertype", None),
}
PROTO_OF = {"tcp": "6", "udp": "17", "icmp": "1", "icmp6": "58"}
OVERLAP = Match("overlap", ())  # the alternatives it is in may hold together
TCP_FLAGS = ("fin", "syn", "rst", "psh", "ack", "urg", "ecn", "cwr")
PFC_FLAG = {"ecn": "ece"}
NFPROTO = {"ipv4": "4", "ipv6": "6", "ip": "4", "ip6": "6", "2": "4", "10": "6"}
ETHER = {"ip": 0x0800, "ip6": 0x86DD, "arp": 0x0806, "vlan": 0x8100, "8021q": 0x8100,
         "8021ad": 0x88A8}


def rel_alternatives(rel: Rel, sets: dict, family: int | None) -> list[Conj]:
    """The alternatives of one relational match (``family``: the table's, for ``ip`` and
    ``ip6`` tables)."""
    if rel.op == "vmap":
        raise Refuse("a verdict map is read by the rule, not as a match", rel.span)
    if len(rel.sel) > 1:
        return _concat(rel, sets, family)
    return _single(rel.sel[0], rel.op, rel.value, rel.mask, rel, sets, family)


def element_alternatives(sel: tuple[str, ...], key: Val, rel: Rel, sets: dict,
                         family: int | None) -> Conj | None:
    """One element of a set or map, matched (``==``) on ``sel``: a conjunction."""
    parts = key.items if key.kind == "concat" else (key,)
    if len(parts) != len(sel):
        raise Refuse("a set element of another width than its selectors", key.span)
    out: list[Match] = []
    for s, part in zip(sel, parts, strict=True):
        (alt,) = _single(s, "==", part, None, rel, sets, family) or [None]
        if alt is None:
            return None
        out += alt
    return tuple(out)


def _concat(rel: Rel, sets: dict, family: int | None) -> list[Conj]:
    if rel.op not in ("", "==") or rel.mask is not None:
        raise Refuse("a negated or masked concatenation: pfc has no one match for it",
                     rel.span)
    out = []
    for key in v.leaves(rel.value, sets):
        conj = element_alternatives(rel.sel, key, rel, sets, family)
        if conj is not None:
            out.append(conj)
    return out


def _single(sel: str, op: str, value: Val, mask: Val | None, rel: Rel, sets: dict,
            family: int | None) -> list[Conj]:
    entry = SELECTORS.get(sel)
    if entry is None:
        raise Refuse(f"`{sel}`: a match pfc has no word for", rel.span)
    field, fam, kind, needs = entry
    base: tuple[Match, ...] = ()
    if fam is not None:
        base += (Match("family", (str(fam),)),)
    if needs in PROTO_OF:
        base += (Match("proto", (PROTO_OF[needs],)),)
    if kind in ("tcpflags", "ctstate", "ctstatus"):
        return [base + c for c in _bits(kind, op, value, mask, rel, sets)]
    if mask is not None:
        raise Refuse(f"`{sel} & ...`: a masked match pfc has no word for", rel.span)
    op = "==" if op == "" else op
    if op == "!":
        raise Refuse(f"`{sel} ! ...`: a bit test on a field that is not flags", rel.span)
    texts = [t for leaf in v.leaves(value, sets) for t in _texts(kind, leaf, family)]
    if not texts:
        return [] if op != "!=" else [base]
    if field == "family":
        return _family(base, texts, op, rel)
    texts = _ordered(_compare(kind, op, texts, rel))
    if op in ("==", "!=") and value.kind == "ref" and kind in ("addr", "port"):
        texts = _named(value.text, texts)
    if field == "proto" and op == "==" and len(texts) > 1 and all(
            t.isascii() and t.isdigit() for t in texts):  # `meta l4proto { tcp, udp }`
        return [base + (Match(field, (t,)),) for t in texts]
    return [base + (Match(field, tuple(texts), op == "!="),)]


# The named sets an import keeps as pfc defines (pfc name → values), while one is read
# (``pfc.importers.nft.import_nft`` sets it); None: every set is written out in place.
NAMED: ContextVar[dict[str, tuple[str, ...]] | None] = ContextVar("named_sets", default=None)


def _named(name: str, texts: list[str]) -> list[str]:
    """``@name`` as ``$name``, its values defined once (``NAMED``): a second set of the
    same name with other values (another table's) is ``$name-2``."""
    registry = NAMED.get()
    if registry is None:
        return texts
    base = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    base = base if re.match(r"[A-Za-z_]", base) else f"set_{base}"
    for n in range(1, 100):
        pfc = base if n == 1 else f"{base}-{n}"
        if registry.setdefault(pfc, tuple(texts)) == tuple(texts):
            return [f"${pfc}"]
    return texts


def _family(base: Conj, texts: list[str], op: str, rel: Rel) -> list[Conj]:
    families = sorted({t for t in texts if t in ("4", "6")})
    if len(families) != len(set(texts)):
        raise Refuse("a protocol other than IPv4 and IPv6 in a table that sees IP only",
                     rel.span)
    if op == "!=":
        families = sorted({"4", "6"} - set(families))
    if len(families) == 2:
        return [base]
    return [base + (Match("family", tuple(families)),)] if families else []


def _texts(kind: str, val: Val, family: int | None) -> list[str]:
    if kind == "addr":
        return v.addresses(val, family)
    if kind == "port":
        return [v.port_range(val)]
    if kind == "proto":
        return [v.int_range(val, v.PROTOCOLS, "protocol")]
    if kind == "int":
        return [v.int_range(val)]
    if kind == "icmp":
        return [v.int_range(val, v.NFT_ICMP_TYPES, "ICMP type")]
    if kind == "icmp6":
        return [v.int_range(val, v.NFT_ICMP6_TYPES, "ICMPv6 type")]
    if kind == "icmpcode":
        return [v.int_range(val, v.ICMP_CODES, "ICMP code")]
    if kind == "icmp6code":
        return [v.int_range(val, v.ICMP6_CODES, "ICMPv6 code")]
    if kind == "ifname":
        return [v.interface(val)]
    if kind == "mac":
        return [v.mac(val)]
    if kind == "fib":
        if val.text not in v.FIB_TYPES:
            raise Refuse(f"address type `{val.text}`: pfc knows local, broadcast, "
                         "multicast and unicast", val.span)
        return [val.text]
    if kind == "nfproto":
        return [NFPROTO.get(val.text, val.text)]
    if kind == "ethertype":
        number = v.number(val, ETHER, "EtherType")
        return [{0x0800: "4", 0x86DD: "6"}.get(number, hex(number))]
    raise Refuse(f"`{val.text}`", val.span)


def _compare(kind: str, op: str, texts: list[str], rel: Rel) -> list[str]:
    if op in ("==", "!="):
        return texts
    if kind not in ("port", "int", "proto", "icmp", "icmp6", "icmpcode", "icmp6code") \
            or len(texts) != 1 or "-" in texts[0]:
        raise Refuse(f"`{op}` on this value: pfc compares numbers with ranges", rel.span)
    n = int(texts[0])
    top = 65535 if kind == "port" else 255 if kind != "int" else 0xFFFFFFFF
    lo, hi = {"<": (0, n - 1), "<=": (0, n), ">": (n + 1, top), ">=": (n, top)}[op]
    if lo > hi:
        return []
    return [str(lo) if lo == hi else f"{lo}-{hi}"]


def _ordered(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


# ------------------------------------------------------------------ bit fields

def _bits(kind: str, op: str, value: Val, mask: Val | None, rel: Rel, sets: dict
          ) -> list[Conj]:
    """``tcp flags``, ``ct state``, ``ct status`` as nft reads them: an implicit match
    on flags is "any of them set", ``==``/``!=`` the exact value, ``!`` none of them,
    ``& M == V`` the bits of M as V has them, a set its exact values."""
    words = _flag_words(value, sets)
    if kind == "ctstate":
        states = [w for w in words if w in v.CT_STATES]
        if len(states) != len(words):
            raise Refuse(f"connection state `{next(w for w in words if w not in v.CT_STATES)}`",
                         value.span)
        negated = op in ("!=", "!")
        return [(Match("ct", tuple(_ordered(states)), negated),)]
    if kind == "ctstatus":
        return _ct_status(op, words, value, mask, rel)
    return _tcp_flags(op, value, mask, rel, sets)


def _flag_words(value: Val, sets: dict) -> list[str]:
    out = []
    for leaf in v.leaves(value, sets):
        out += [x.text for x in leaf.items] if leaf.kind == "flags" else [leaf.text]
    return out


def _ct_status(op: str, words: list[str], value: Val, mask: Val | None, rel: Rel
               ) -> list[Conj]:
    unknown = [w for w in words if w not in v.CT_STATUS]
    if unknown:
        raise Refuse(f"ct status `{unknown[0]}`: pfc knows expected, seen-reply, confirmed, "
                     "snat and dnat", value.span)
    if mask is not None or op in ("==", "!=") or value.kind in ("set", "ref"):
        raise Refuse("ct status compared whole (`==`, `!=`, a set of values): pfc tests "
                     "status bits one by one", rel.span)
    parts = [Match("ct-status", (w,)) for w in words]
    if op == "!":
        return [tuple(p.negate() for p in parts)]
    if len(parts) == 1:
        return [(parts[0],)]
    # any of them: pfc cannot say "snat and not dnat", so the parts overlap, which only
    # a rule that decides may have (``OVERLAP`` marks them for ``convert``)
    return [(p, OVERLAP) for p in parts]


def _tcp_flags(op: str, value: Val, mask: Val | None, rel: Rel, sets: dict) -> list[Conj]:
    if value.kind == "masked":  # `syn / syn,ack`
        mask, value = value.items[1], value.items[0]
        op = "==" if op in ("==", "") else op
    if mask is not None:
        op = "==" if op == "" else op
        bits_mask = _flag_bits(mask)
        exact = [_flag_bits(leaf) for leaf in v.leaves(value, sets)]
        if op not in ("==", "!=") or (op == "!=" and len(exact) > 1):
            raise Refuse("a masked `tcp flags` match pfc has no word for", rel.span)
        alts = [(_flags_match(bits_mask, e, op == "!="),) for e in exact]
        return alts
    leaves = v.leaves(value, sets)
    if value.kind in ("set", "ref"):
        op = "==" if op == "" else op
        if op not in ("==", "!="):
            raise Refuse("`tcp flags` against a set with a comparison", rel.span)
        exact = [_flag_bits(leaf) for leaf in leaves]
        if op == "!=":
            raise Refuse("`tcp flags != { ... }`: pfc has no one match for it", rel.span)
        return [(_flags_match(0xFF, e, False),) for e in exact]
    bits = _flag_bits(value)
    if op in ("==", "!="):
        return [(_flags_match(0xFF, bits, op == "!="),)]
    if op == "!":
        return [(_flags_match(bits, 0, False),)]
    named = [b for b in range(8) if bits >> b & 1]
    out = []
    for i, b in enumerate(named):  # any of them: disjoint by the first set bit
        clear = sum(1 << c for c in named[:i])
        out.append((_flags_match(clear | 1 << b, 1 << b, False),))
    return out


def _flag_bits(val: Val) -> int:
    words = [x.text for x in val.items] if val.kind == "flags" else [val.text]
    bits = 0
    for w in words:
        if w in TCP_FLAGS:
            bits |= 1 << TCP_FLAGS.index(w)
        else:
            try:
                bits |= int(w, 0)
            except ValueError:
                raise Refuse(f"TCP flag `{w}`", val.span) from None
    return bits


def _flags_match(mask: int, value: int, negated: bool) -> Match:
    words = tuple(("" if value >> b & 1 else "!") + PFC_FLAG.get(f, f)
                  for b, f in enumerate(TCP_FLAGS) if mask >> b & 1)
    return Match("flags", words, negated)
