"""The v2 matches (docs/language.md "Whole firewalls", Matches): ``iif``/``oif``,
``ether-src``/``ether-dst``, ``ether-type``, ``dst-type``/``src-type`` and ``ct
status``, from resolved atoms to IR, with their diagnostics. ``icmp-code``, ``vlan-id``,
``mark`` and ``ct mark`` are plain integer matches (``pfc.frontend.matches.int_match``).
"""

from __future__ import annotations

from collections.abc import Container

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error, suggest
from pfc.frontend.firewall.names import device_atom
from pfc.frontend.matches import int_match
from pfc.frontend.syntax import MatchNode, Value
from pfc.frontend.text import shorten
from pfc.frontend.values import KIND_WORDS, Atom, atom_error

MAC_FORM = "six hex pairs separated by `:` (aa:bb:cc:dd:ee:ff)"
# Fields a rule takes once (one list says all its values): they are not merged.
ONCE = frozenset(("iif", "oif", "ether-src", "ether-dst", "dst-type", "src-type",
                  "ct-status"))


def iface_match(node: MatchNode, atoms: list[Atom], set_name: str | None,
                diags: list[Diagnostic], used: list[tuple[str, Atom]]
                ) -> ir.IfaceMatch | None:
    """``iif``/``oif``: interface names (``used`` gets each name and its atom)."""
    names = []
    for atom in atoms:
        name, diag = device_atom(atom, node.field, wildcard=True)
        if diag is not None:
            diags.append(diag)
            return None
        names.append(name)
        used.append((name, atom))
    return ir.IfaceMatch(node.field, tuple(dict.fromkeys(names)), node.negated, node.span,
                         set_name)


def mac_literals(value: Value, diags: list[Diagnostic]) -> bool:
    """False (after an error) when an address written in the value is not a MAC
    address, before it is read as an IP address."""
    if value.kind == "list":
        return all(mac_literals(item, diags) for item in value.items)
    if value.kind in ("ipv4", "ipv6"):
        diags.append(error(f"`{shorten(value.text)}` is not a MAC address: {MAC_FORM}",
                           value.span, code="bad-mac"))
        return False
    return True


def mac_match(node: MatchNode, atoms: list[Atom], set_name: str | None,
              diags: list[Diagnostic], defined: Container[str]) -> ir.MacMatch | None:
    bad = next((a for a in atoms if a.kind != "mac"), None)
    if bad is not None:
        hint = (f"`{bad.value}` is defined above: write `${bad.value}`"
                if bad.kind == "name" and bad.value in defined else None)
        diags.append(atom_error(f"`{node.field}` needs MAC addresses ({MAC_FORM}); "
                                f"`{shorten(bad.text)}` is {KIND_WORDS[bad.kind]}", bad,
                                hint=hint, code="wrong-type"))
        return None
    macs = tuple(dict.fromkeys(a.value for a in atoms))
    return ir.MacMatch(node.field, macs, node.negated, node.span, set_name)


def ether_type_match(node: MatchNode, atoms: list[Atom], set_name: str | None,
                     diags: list[Diagnostic], defined: Container[str]) -> ir.IntMatch | None:
    """``ether-type``: numbers, ranges or the names of ``ETHER_TYPES``."""
    numbers = []
    for atom in atoms:
        if atom.kind == "name" and atom.value in ir.ETHER_TYPES:
            atom = Atom("int", ir.ETHER_TYPES[atom.value], atom.span, atom.text,
                        atom.origin, atom.defined_at)
        elif atom.kind == "name" and atom.value not in defined:
            diags.append(atom_error(f"unknown EtherType `{shorten(str(atom.value))}`", atom,
                                    hint=suggest(str(atom.value), ir.ETHER_TYPES)
                                    or "known: " + ", ".join(ir.ETHER_TYPES),
                                    code="unknown-value"))
            return None
        numbers.append(atom)
    return int_match(node, numbers, None, set_name, diags, defined)


def names_match(node: MatchNode, diags: list[Diagnostic]):
    """``ct status S,...`` and ``dst-type``/``src-type T,...``: names of a fixed table,
    in the table's order."""
    table, what, make = _NAMED[node.field]
    items = node.value.items if node.value.kind == "list" else (node.value,)
    found: set[str] = set()
    ok = True
    for item in items:
        name = item.text if item.kind == "name" else None
        if name not in table:
            hint = suggest(item.text, table) if name else None
            diags.append(error(f"`{shorten(item.text)}` is not {what}; known: "
                               + ", ".join(table), item.span, hint=hint,
                               code="unknown-value"))
            ok = False
            continue
        found.add(name)
    if not ok:
        return None
    return make(node.field, tuple(n for n in table if n in found), node.negated, node.span)


_NAMED = {
    "ct-status": (tuple(ir.CT_STATUSES), "a connection status",
                  lambda f, names, neg, span: ir.CtStatusMatch(names, neg, span)),
    "dst-type": (ir.ADDR_TYPES, "an address type", ir.AddrTypeMatch),
    "src-type": (ir.ADDR_TYPES, "an address type", ir.AddrTypeMatch),
}


def given_twice(node: MatchNode, earlier: list[MatchNode]) -> Diagnostic | None:
    """A field of ``ONCE`` given a second time in a rule."""
    if node.field not in ONCE or not any(m.field == node.field for m in earlier):
        return None
    word = {"ct-status": "ct status"}.get(node.field, node.field)
    return error(f"`{word}` is given twice", node.field_span, code="given-twice",
                 hint=f"write one list: `{word} {{ a, b }}`")
