"""IR rules → C for the netfilter module: one boolean expression per rule over the
packet as the hook holds it (``struct pfc_pkt`` and the helpers of the template), and
the constant tables the expressions look up.

Every field is read where semantics.md "Reading a frame" puts it, relative to the
network header, and only when all its bytes are in the packet (``skb_copy_bits`` fails
beyond the end): ``pfc_ip_field`` for ``ttl len proto frag``, ``pfc_addr`` for
``src``/``dst``, ``pfc_l4_field`` for transport fields (the transport readable, the
packet's protocol the rule's), ``pfc_payload`` for ``payload[OFF:LEN]``. A negated
match holds when the field is present and the test fails.

Address lists and integer lists of more than ``INLINE`` entries become sorted interval
tables (``pfc_in4``, ``pfc_in6``, ``pfc_in_ranges``: binary search, O(log n) for a
set of any size: the longest-prefix question "is this address in one of these
prefixes" is the same as "in one of these merged intervals").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pfc.frontend import ir

INLINE = 4  # lists up to this many ranges are tested inline, longer ones in a table
IP_FIELDS = {"ttl": "PFC_TTL", "len": "PFC_LEN", "proto": "PFC_PROTO", "frag": "PFC_FRAG"}
L4_FIELDS = {"sport": (0, 2), "dport": (2, 2), "flags": (13, 1), "icmp-type": (0, 1),
             "icmp-code": (1, 1)}


@dataclass
class Tables:
    """The constant tables of one module, in the order they are first used."""

    ranges: list[dict] = field(default_factory=list)  # {name, entries: [(lo, hi)]}
    nets4: list[dict] = field(default_factory=list)
    nets6: list[dict] = field(default_factory=list)
    sets: list[dict] = field(default_factory=list)  # {name, v4, v6}: address tables
    payloads: list[dict] = field(default_factory=list)  # {name, data: [bytes]}
    targets: list[dict] = field(default_factory=list)  # redirect targets

    def add(self, kind: list[dict], prefix: str, **values) -> str:
        name = f"{prefix}{len(kind)}"
        kind.append({"name": name, **values})
        return name


def merged(ranges) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _range_test(var: str, ranges, tables: Tables) -> str:
    pairs = merged(ranges)
    if not pairs:
        return "false"
    if len(pairs) > INLINE:
        name = tables.add(tables.ranges, "pfc_ranges", entries=pairs)
        return f"pfc_in_ranges({var}, {name}, {len(pairs)})"  # static_assert'ed
    terms = [f"{var} == {lo}" if lo == hi else f"({var} >= {lo} && {var} <= {hi})"
             for lo, hi in pairs]
    return terms[0] if len(terms) == 1 else "(" + " || ".join(terms) + ")"


def _intervals(prefixes, version: int) -> list[tuple[int, int]]:
    nets = [n for n in prefixes if n.version == version]
    return merged((int(n.network_address), int(n.broadcast_address)) for n in nets)


def _presence(read: str, test: str, negated: bool) -> str:
    return f"({read} && {'!' if negated else ''}{_paren(test)})"


def _paren(text: str) -> str:
    simple = text.replace("_", "").replace("(", "").replace(")", "").replace(",", "")
    return text if simple.replace(" ", "").isalnum() or text.startswith("(") else f"({text})"


def addr_term(m: ir.AddrMatch, tables: Tables) -> str:
    """``src``/``dst``: the address of the packet's own version against that version's
    entries (an IPv4 packet against a list of IPv6 prefixes only: the test fails)."""
    v4, v6 = _intervals(m.prefixes, 4), _intervals(m.prefixes, 6)
    name4 = tables.add(tables.nets4, "pfc_nets", entries=v4) if v4 else None
    name6 = tables.add(tables.nets6, "pfc_nets6_", entries=[
        (_halves(lo), _halves(hi)) for lo, hi in v6]) if v6 else None
    name = tables.add(tables.sets, "pfc_set", v4=name4, v6=name6)
    off4, off6 = (12, 8) if m.field == "src" else (16, 24)
    return f"pfc_addr_in(skb, p, {off4}, {off6}, &{name}, {str(m.negated).lower()})"


def _halves(value: int) -> tuple[str, str]:
    return (f"0x{value >> 64:016x}ULL", f"0x{value & (2**64 - 1):016x}ULL")


def int_term(m: ir.IntMatch, proto: int | None, n: int, tables: Tables) -> str:
    test = _range_test(f"v{n}", m.ranges, tables)
    if m.field in IP_FIELDS:
        read = f"pfc_ip_field(skb, p, {IP_FIELDS[m.field]}, &v{n})"
    else:
        read = _l4_read(m.field, proto, n)
    return "false" if read == "false" else _presence(read, test, m.negated)


def _l4_read(name: str, proto: int | None, n: int) -> str:
    if proto is None:
        return "false"  # a transport field without a protocol keyword is never present
    off, size = L4_FIELDS[name]
    return f"pfc_l4_field(skb, p, {proto}, {off}, {size}, &v{n})"


def flags_term(m: ir.FlagsMatch, proto: int | None, n: int) -> str:
    read = _l4_read("flags", proto, n)
    if read == "false":
        return "false"
    parts = []
    if m.set:
        parts.append(f"(v{n} & 0x{m.set:02x}) == 0x{m.set:02x}")
    if m.clear:
        parts.append(f"!(v{n} & 0x{m.clear:02x})")
    test = " && ".join(parts) or "true"
    return _presence(read, f"({test})" if len(parts) > 1 else test, m.negated)


def payload_term(m: ir.PayloadMatch, proto: int | None, n: int, tables: Tables) -> str:
    if proto is None:
        return "false"
    name = tables.add(tables.payloads, "pfc_data", data=list(m.data))
    size = len(m.data)
    read = f"pfc_payload(skb, p, {proto}, {m.offset}, b{n}, {size})"
    return _presence(read, f"!memcmp(b{n}, {name}, {size})", m.negated)


def frag_term(m: ir.FragMatch, n: int) -> str:
    return _presence(f"pfc_ip_field(skb, p, PFC_FRAG, &v{n})", f"v{n} != 0", m.negated)


@dataclass(frozen=True)
class CRule:
    """One rule as C: the locals its expression needs and the expression."""

    index: int
    line: int
    text: str  # the rule described (a C comment, escaped by the caller)
    locals: tuple[str, ...]
    terms: tuple[str, ...]
    action: str  # "drop" | "pass" | "count" | "redirect"
    target: str | None = None  # redirect: the name of its ``struct pfc_target``


VERSIONS = {ir.Family.IP4: "p->version == 4", ir.Family.IP6: "p->version == 6"}


def rule_c(rule: ir.Rule, tables: Tables, text: str) -> CRule:
    terms: list[str] = []
    local: list[str] = []
    if rule.family in VERSIONS:
        terms.append(VERSIONS[rule.family])
    if rule.proto is not None:
        terms.append(f"p->proto == {rule.proto}")
    for n, m in enumerate(rule.matches):
        term, decl = _match(m, rule.proto, n, tables)
        terms.append(term)
        local += decl
    target = None
    if isinstance(rule.action, ir.Redirect):
        target = _target(rule, tables)
        terms.append(f"p->version == {rule.action.address.version}")
    return CRule(rule.index, rule.line, text, tuple(local), tuple(terms) or ("true",),
                 rule.action.name, target)


def _match(m: ir.Match, proto: int | None, n: int, tables: Tables) -> tuple[str, list[str]]:
    if isinstance(m, ir.AddrMatch):
        return addr_term(m, tables), []
    if isinstance(m, ir.IntMatch):
        return int_term(m, proto, n, tables), [f"u32 v{n};"]
    if isinstance(m, ir.FlagsMatch):
        return flags_term(m, proto, n), [f"u32 v{n};"]
    if isinstance(m, ir.FragMatch):
        return frag_term(m, n), [f"u32 v{n};"]
    if isinstance(m, ir.PayloadMatch):
        return payload_term(m, proto, n, tables), [f"u8 b{n}[{len(m.data)}];"]
    raise TypeError(f"nfmod: no lowering for {type(m).__name__}")


def _target(rule: ir.Rule, tables: Tables) -> str:
    action = rule.action
    addr = ipaddress.ip_address(action.address).packed
    return tables.add(tables.targets, "pfc_to", version=action.address.version,
                      addr=", ".join(f"0x{b:02x}" for b in addr),
                      port=-1 if action.port is None else action.port,
                      proto=rule.proto if rule.proto in (ir.TCP, ir.UDP) else 0)


def used_locals(crule: CRule) -> list[str]:
    """The declarations a rule's expression reads (a match lowered to ``false`` reads
    none of its variables)."""
    text = " ".join(crule.terms)
    return [d for d in crule.locals if d.split()[-1].split("[")[0].rstrip(";") in
            _names(text)]


def _names(text: str) -> set[str]:
    import re
    return set(re.findall(r"\b[abv]\d+\b", text))
