"""One match as written (resolved atoms) → one IR match, with its type checks.

Each converter takes the match node, the atoms its value resolved to and the rule's
protocol number, and returns the IR match or None after appending diagnostics.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error, suggest, warning
from pfc.frontend.syntax import MatchNode
from pfc.frontend.text import shorten
from pfc.frontend.values import KIND_WORDS, Atom, atom_error, read_number, shown_int

MAX_PAYLOAD_LEN = 16
MAX_PAYLOAD_OFFSET = 65535


# Well-known services, for the hint on `dport ssh` (pfc does not read /etc/services:
# the meaning of a policy must not depend on the machine that compiles it).
SERVICES = {"ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "dns": 53, "domain": 53,
            "dhcp": 67, "bootps": 67, "bootpc": 68, "tftp": 69, "http": 80, "www": 80,
            "pop3": 110, "ntp": 123, "imap": 143, "snmp": 161, "bgp": 179, "ldap": 389,
            "https": 443, "smtps": 465, "syslog": 514, "submission": 587, "ldaps": 636,
            "imaps": 993, "pop3s": 995, "openvpn": 1194, "mysql": 3306, "rdp": 3389,
            "postgres": 5432, "postgresql": 5432, "redis": 6379, "http-alt": 8080}


def address_match(node: MatchNode, atoms: list[Atom], set_name: str | None,
                  diags: list[Diagnostic],
                  defined: Container[str] = ()) -> ir.AddrMatch | None:
    bad = [a for a in atoms if a.kind != "addr"]
    if bad:
        diags.append(_wrong_kind(node.field, "addresses or prefixes", bad[0], defined))
        return None
    prefixes = tuple(dict.fromkeys(a.value for a in atoms))
    return ir.AddrMatch(node.field, prefixes, node.negated, node.span, set_name)


def int_match(node: MatchNode, atoms: list[Atom], proto: int | None, set_name: str | None,
              diags: list[Diagnostic],
              defined: Container[str] = ()) -> ir.IntMatch | None:
    info = ir.FIELDS[node.field]
    ranges = []
    for atom in atoms:
        r = _int_range(node.field, atom, proto, info.maximum, diags, defined)
        if r is None:
            return None
        ranges.append(r)
    return ir.IntMatch(node.field, merge_ranges(ranges), node.negated, node.span, set_name)


def _int_range(field: str, atom: Atom, proto: int | None, maximum: int | None,
               diags: list[Diagnostic], defined: Container[str] = ()) -> tuple[int, int] | None:
    if atom.kind == "name":
        number = _named_number(field, atom, proto, diags, defined)
        return None if number is None else (number, number)
    if atom.kind == "int":
        lo = hi = atom.value
    elif atom.kind == "range":
        lo, hi = atom.value
    else:
        diags.append(_wrong_kind(field, ir.FIELDS[field].values, atom))
        return None
    if maximum is not None and hi > maximum:
        diags.append(atom_error(f"{shown_int(hi)} is out of range for `{field}` "
                                f"(0-{maximum})", atom, code="out-of-range"))
        return None
    return lo, hi


def _named_number(field: str, atom: Atom, proto: int | None,
                  diags: list[Diagnostic], defined: Container[str] = ()) -> int | None:
    if field == "proto":
        table, what = ir.PROTO_NUMBERS, "protocol"
    elif field == "icmp-type":
        table = ir.ICMP6_TYPES if proto == ir.ICMP6 else ir.ICMP_TYPES
        what = "ICMPv6 type" if proto == ir.ICMP6 else "ICMP type"
    else:
        diags.append(_wrong_kind(field, ir.FIELDS[field].values, atom, defined))
        return None
    if atom.value in table:
        return table[atom.value]
    diags.append(atom_error(f"unknown {what} `{atom.value}`", atom,
                            hint=_name_hint(field, atom.value, proto, table),
                            code="unknown-value"))
    return None


def _name_hint(field: str, name: str, proto: int | None, table: dict[str, int]) -> str:
    if field == "icmp-type" and proto == ir.ICMP and name in ir.ICMP6_TYPES:
        return f"`{name}` is an ICMPv6 type: write `icmp6`"
    if field == "icmp-type" and proto == ir.ICMP6 and name in ir.ICMP_TYPES:
        return f"`{name}` is an ICMP (IPv4) type: write `icmp`"
    return suggest(name, table) or f"known: {', '.join(table)}"


def merge_ranges(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, with overlapping and adjacent ranges merged."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def complement_ranges(ranges: Iterable[tuple[int, int]], top: int
                      ) -> tuple[tuple[int, int], ...]:
    """The values of 0..top in none of ``ranges`` (inclusive; any order, overlaps
    allowed), sorted and merged."""
    out, lo = [], 0
    for a, b in sorted(ranges):
        if a > lo:
            out.append((lo, a - 1))
        lo = max(lo, b + 1)
    if lo <= top:
        out.append((lo, top))
    return tuple(out)


def intersect_ranges(a: Sequence[tuple[int, int]],
                     b: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intersection of two sorted lists of disjoint inclusive ranges (linear)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract_ranges(a: Sequence[tuple[int, int]],
                    b: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``a`` without ``b``: both sorted lists of disjoint inclusive ranges (linear)."""
    out: list[tuple[int, int]] = []
    j = 0
    for lo, hi in a:
        while j < len(b) and b[j][1] < lo:
            j += 1
        k = j
        while k < len(b) and b[k][0] <= hi:
            if b[k][0] > lo:
                out.append((lo, b[k][0] - 1))
            lo = max(lo, b[k][1] + 1)
            k += 1
        if lo <= hi:
            out.append((lo, hi))
    return out


def flags_match(node: MatchNode, diags: list[Diagnostic]) -> ir.FlagsMatch | None:
    set_bits = clear_bits = 0
    ok = True
    for flag in node.flags:
        bit = ir.TCP_FLAGS.get(flag.name)
        if bit is None:
            diags.append(error(f"unknown TCP flag `{flag.name}`", flag.span,
                               hint=suggest(flag.name, ir.TCP_FLAGS)
                               or f"flags are {' '.join(ir.TCP_FLAGS)}", code="unknown-flag"))
            ok = False
            continue
        if bit & (set_bits | clear_bits):
            both = bit & (clear_bits if not flag.negated else set_bits)
            if both:
                diags.append(error(f"flag `{flag.name}` is asked to be both set and clear",
                                   flag.span, code="flag-conflict"))
                ok = False
            else:
                diags.append(warning(f"flag `{flag.name}` given twice", flag.span,
                                     code="duplicate"))
        if flag.negated:
            clear_bits |= bit
        else:
            set_bits |= bit
    return ir.FlagsMatch(set_bits, clear_bits, node.negated, node.span) if ok else None


def payload_match(node: MatchNode, atoms: list[Atom],
                  diags: list[Diagnostic]) -> ir.PayloadMatch | None:
    offset = read_number(node.offset.text, node.offset.span, diags)
    length = None
    if node.length is not None:
        length = read_number(node.length.text, node.length.span, diags)
        if length is None:
            return None
    if offset is None:
        return None
    if offset > MAX_PAYLOAD_OFFSET:
        diags.append(error(f"payload offset {shown_int(offset)} is too large (at most "
                           f"{MAX_PAYLOAD_OFFSET})", node.offset.span, code="out-of-range"))
        return None
    if length is not None and not 1 <= length <= MAX_PAYLOAD_LEN:
        diags.append(error(f"payload length {shown_int(length)} is out of range "
                           f"(1-{MAX_PAYLOAD_LEN})", node.length.span, code="out-of-range"))
        return None
    if len(atoms) != 1:
        diags.append(error("`payload` compares with one value, not a list", node.value.span,
                           code="wrong-type"))
        return None
    data = _payload_bytes(atoms[0], length, diags)
    if data is None:
        return None
    return ir.PayloadMatch(offset, data, node.negated, node.span)


def _payload_bytes(atom: Atom, length: int | None, diags: list[Diagnostic]) -> bytes | None:
    want = length or 1
    if atom.kind == "bytes":
        data = atom.value
    elif atom.kind == "int" and atom.text.lower().startswith("0x") and length is not None:
        digits = atom.text[2:]
        if len(digits) % 2:
            digits = "0" + digits
        data = bytes.fromhex(digits)
    elif atom.kind == "int" and want == 1:
        if atom.value > 255:
            diags.append(atom_error(f"{shown_int(atom.value)} does not fit in one byte "
                                    "(0-255)", atom, code="out-of-range"))
            return None
        data = bytes([atom.value])
    else:
        diags.append(atom_error(f"`payload` needs a byte value, a string or hex bytes, "
                                f"not {KIND_WORDS[atom.kind]}", atom, code="wrong-type"))
        return None
    if len(data) != want:
        window = f"payload[...:{length}]" if length else "payload[...]"
        diags.append(atom_error(f"{window} compares {want} byte{'s' * (want > 1)}; "
                                f"`{shorten(atom.text)}` is {len(data)}", atom,
                                hint=f"write {want} bytes, e.g. 0x{'00' * want}",
                                code="bad-length"))
        return None
    return data


def _wrong_kind(field: str, wanted: str, atom: Atom,
                defined: Container[str] = ()) -> Diagnostic:
    return atom_error(f"`{field}` needs {wanted}; `{shorten(atom.text)}` is "
                      f"{KIND_WORDS[atom.kind]}", atom, code="wrong-type",
                      hint=_kind_hint(field, atom, defined))


def _kind_hint(field: str, atom: Atom, defined: Container[str]) -> str | None:
    """``$lan`` for a defined name written bare; the number of a well-known service."""
    if atom.kind != "name":
        return None
    if atom.value in defined:
        return f"`{atom.value}` is defined above: write `${atom.value}`"
    if atom.value in ("any", "all"):
        return f"leave the match out to match any value: `{field} {atom.value}` is not needed"
    if field in ("sport", "dport"):
        port = SERVICES.get(str(atom.value).lower())
        if port is not None:
            return f"ports are numbers: `{atom.value}` is {port}, write `{field} {port}`"
        return "ports are numbers (0-65535); pfc does not look up service names"
    return None
