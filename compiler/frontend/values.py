"""Values as written → typed atoms: addresses, integers, ranges, names, bytes.

Used by the checker for `define`s, rule values and set files alike, so a value means the
same wherever it is written. Errors are returned as Diagnostics, never raised.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter

from pfc.frontend.diagnostics import Diagnostic, Note, error, warning
from pfc.frontend.ir import IPNetwork
from pfc.frontend.source import SourceFile, Span
from pfc.frontend.syntax import Value
from pfc.frontend.text import describe_char, is_plain, shorten, visible


@dataclass(frozen=True)
class Atom:
    """One resolved item. ``kind``: ``addr`` (value: network), ``int`` (value: int),
    ``range`` (value: (lo, hi)), ``name`` (value: str), ``bytes`` (value: bytes, from a
    string) — ``text`` keeps the source text (hex payload values need its digits)."""

    kind: str
    value: object
    span: Span
    text: str
    origin: str | None = None  # the `$name` it came through, for notes
    defined_at: Span | None = None  # where the item is written, when used through a name


def atom_error(message: str, atom: Atom, hint: str | None = None,
               code: str = "") -> Diagnostic:
    """An error at the atom's use site; a note points at its definition if elsewhere."""
    notes = ()
    if atom.defined_at is not None and atom.origin:
        notes = (Note(f"`{shorten(atom.text)}` comes from `${atom.origin}`, defined here",
                      atom.defined_at),)
    return error(message, atom.span, hint=hint, code=code, notes=notes)


KIND_WORDS = {"addr": "an address", "int": "a number", "range": "a range",
              "name": "a name", "bytes": "a string", "mac": "a MAC address"}

_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{0,2}|.)", re.S)
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_NUMBER_CHARS = 64  # a number written longer is an error (0x + 32 hex digits fit)


def parse_address(text: str, span: Span, diags: list[Diagnostic]) -> IPNetwork | None:
    """An address or prefix. Host bits under the prefix length are cleared with a warning
    (``192.168.0.79/24`` means ``192.168.0.0/24``, as iptables reads it)."""
    net = _clean_network(text)
    if net is not None:
        return net
    address, _, length = text.partition("/")
    try:
        host = ipaddress.ip_address(address)
    except ValueError:
        diags.append(error(f"`{shorten(address)}` is not a valid "
                           f"IPv{6 if ':' in address else 4} address", span,
                           code="bad-address"))
        return None
    if len(length) > MAX_NUMBER_CHARS:
        diags.append(error(f"prefix length /{shorten(length)} is too long: {len(length):,} "
                           f"digits (at most {MAX_NUMBER_CHARS})", span, code="bad-address"))
        return None
    bits = int(length) if length else host.max_prefixlen  # at most 64 digits: int is safe
    if bits > host.max_prefixlen:
        diags.append(error(f"prefix length /{shorten(length)} is longer than "
                           f"{host.max_prefixlen}, the bits of an IPv{host.version} "
                           "address", span, code="bad-address"))
        return None
    net = ipaddress.ip_network((host, bits), strict=False)
    if net.network_address != host:
        diags.append(warning(
            f"`{shorten(text)}` has host bits set; it means `{net}`", span,
            hint=f"write `{net}`, or `{address}` for the single host", code="host-bits"))
    return net


@functools.lru_cache(maxsize=1 << 16)
def _clean_network(text: str) -> IPNetwork | None:
    """``text`` as a network when nothing is to be said about it (a valid address, a
    prefix length within its bits, no host bits), else None: ``parse_address`` then
    says why. Cached: an imported ruleset repeats its addresses (a RETURN's negation on
    every later rule of the chain)."""
    address, _, length = text.partition("/")
    if len(length) > MAX_NUMBER_CHARS:
        return None
    try:
        host = ipaddress.ip_address(address)
    except ValueError:
        return None
    bits = int(length) if length else host.max_prefixlen
    if bits > host.max_prefixlen:
        return None
    net = ipaddress.ip_network((host, bits), strict=False)
    return net if net.network_address == host else None


def parse_int(text: str) -> int:
    """A NUMBER token's value; only for text ``read_number`` (or the token's own
    grammar with a length check) has let through: Python refuses to convert decimal
    strings of more than 4,300 digits."""
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def read_number(text: str, span: Span, diags: list[Diagnostic]) -> int | None:
    """A decimal or ``0x`` number as written, or None after an error when it is longer
    than ``MAX_NUMBER_CHARS`` (no field of pfc takes a number that long)."""
    if len(text) > MAX_NUMBER_CHARS:
        diags.append(error(f"number `{shorten(text)}` is too long: {len(text):,} "
                           f"characters (at most {MAX_NUMBER_CHARS})", span,
                           code="out-of-range"))
        return None
    return parse_int(text)


def shown_int(n: int) -> str:
    """An integer for a message; a huge one in hex, cut short (hex formatting has no
    digit limit, decimal does)."""
    return shorten(hex(n), 24) if n.bit_length() > 64 else str(n)


def decode_string(value: Value, diags: list[Diagnostic]) -> bytes | None:
    """A double-quoted string with ``\\\\``, ``\\"`` and ``\\xHH`` escapes → bytes (UTF-8)."""
    body = value.text[1:-1]
    bad = next((m for m in _ESCAPE.finditer(body) if not _known_escape(m.group(1))), None)
    if bad is not None:
        start = value.span.start + 1 + bad.start()
        esc = bad.group(0)
        why = (f"bad escape `{esc}` in string: `\\x` takes two hex digits" if esc[1] == "x"
               else f"unknown escape `{esc}` in string")
        diags.append(error(why,
                           Span(value.span.file, start, start + len(esc)),
                           hint='strings know only \\\\, \\" and \\xHH (e.g. \\x41)',
                           code="bad-escape"))
        return None
    surrogate = _SURROGATE.search(body)
    if surrogate is not None:
        start = value.span.start + 1 + surrogate.start()
        diags.append(error(f"{describe_char(surrogate.group())} in a string",
                           Span(value.span.file, start, start + 1), code="bad-char"))
        return None
    out = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(body):
        out += body[pos:m.start()].encode()
        esc = m.group(1)
        out += bytes([int(esc[1:], 16)]) if esc.startswith("x") else esc.encode()
        pos = m.end()
    out += body[pos:].encode()
    return bytes(out)


def _known_escape(esc: str) -> bool:
    return esc in ("\\", '"') or (len(esc) == 3 and esc[0] == "x")


def literal_atom(value: Value, diags: list[Diagnostic]) -> Atom | None:
    """A single (non-list, non-variable) value → Atom, or None after a diagnostic."""
    if value.kind in ("ipv4", "ipv6"):
        net = parse_address(value.text, value.span, diags)
        return Atom("addr", net, value.span, value.text) if net is not None else None
    if value.kind == "number":
        number = read_number(value.text, value.span, diags)
        return None if number is None else Atom("int", number, value.span, value.text)
    if value.kind == "range":
        lo, hi = (read_number(v.text, v.span, diags) for v in value.items)
        if lo is None or hi is None:
            return None
        if lo > hi:
            short = len(value.text) <= 40
            diags.append(error(f"range `{shorten(value.text)}` is empty: {shown_int(lo)} > "
                               f"{shown_int(hi)}", value.span,
                               hint=f"write `{hi}-{lo}`" if short else None, code="bad-range"))
            return None
        return Atom("range", (lo, hi), value.span, value.text)
    if value.kind == "string":
        data = decode_string(value, diags)
        return Atom("bytes", data, value.span, value.text) if data is not None else None
    if value.kind == "mac":  # v2: `ether-src aa:bb:cc:dd:ee:ff`
        return Atom("mac", bytes.fromhex(value.text.replace(":", "")), value.span, value.text)
    return Atom("name", value.text, value.span, value.text)


# ------------------------------------------------------------------------- set files

_NUMBER = re.compile(r"^(0[xX][0-9a-fA-F]+|[0-9]+)$")
_RANGE = re.compile(r"^([0-9]+)-([0-9]+)$")


def read_set_file(source: SourceFile,
                  origin: str | None = None) -> tuple[list[Atom], list[Diagnostic]]:
    """Entries of a ``set NAME = file`` file: one address, prefix, port or port range
    per line; ``#`` starts a comment. Every entry of a file must be of one kind
    (addresses of both families may mix). ``origin`` (the set's name) goes on every
    atom. Built for 100k+ lines: plain addresses and ``/len`` prefixes take a fast path
    (``inet_pton`` and integer masks); anything else the general one."""
    atoms: list[Atom] = []
    diags: list[Diagnostic] = []
    offset = 0
    name = source.name
    for raw in source.text.split("\n"):
        entry = (raw.split("#", 1)[0] if "#" in raw else raw).strip()
        if entry:
            start = offset if raw.startswith(entry) else offset + raw.index(entry)
            span = Span(name, start, start + len(entry))
            net = fast_network(entry)
            if net is not None:
                atoms.append(Atom("addr", net, span, entry, origin))
            else:
                atom = _set_entry(entry, span, diags)
                if atom is not None:
                    atoms.append(atom if origin is None else Atom(
                        atom.kind, atom.value, span, entry, origin))
        offset += len(raw) + 1
    _check_one_kind(atoms, diags)
    return atoms, diags


_PTON = ((socket.AF_INET, 32, ipaddress.IPv4Network),
         (socket.AF_INET6, 128, ipaddress.IPv6Network))


def fast_network(entry: str) -> IPNetwork | None:
    """``ADDR`` or ``ADDR/LEN`` (host bits cleared) as ``ip_network(entry,
    strict=False)`` reads it, or None for anything this cannot decide (the caller then
    takes the general path, which also words the error). ``inet_pton`` is at least as
    strict as ``ipaddress``: no leading zeros, no short forms, no scope ids."""
    address, slash, length = entry.partition("/")
    family, bits, network = _PTON[":" in address]
    try:
        value = int.from_bytes(socket.inet_pton(family, address), "big")
    except (OSError, ValueError, UnicodeError):  # ValueError: a NUL in the entry
        return None
    if slash:
        if not (length.isascii() and length.isdigit() and len(length) <= 3):
            return None
        prefixlen = int(length)
        if prefixlen > bits:
            return None
        value &= ((1 << bits) - 1) ^ ((1 << (bits - prefixlen)) - 1)
        return network((value, prefixlen))
    return network((value, bits))


def _set_entry(entry: str, span: Span, diags: list[Diagnostic]) -> Atom | None:
    if _NUMBER.match(entry):
        number = read_number(entry, span, diags)
        return None if number is None else Atom("int", number, span, entry)
    m = _RANGE.match(entry)
    if m:
        return literal_atom(Value("range", entry, span, (
            Value("number", m.group(1), span), Value("number", m.group(2), span))), diags)
    odd = next((c for c in entry if not is_plain(c)), None)
    if odd is None and len(entry) <= 2 * MAX_NUMBER_CHARS:
        try:
            return Atom("addr", ipaddress.ip_network(entry, strict=False), span, entry)
        except ValueError:
            pass
    why = f": it holds {describe_char(odd)}" if odd is not None else ""
    diags.append(error(f"`{shorten(entry)}` is not an address, prefix, port or port "
                       f"range{why}", span, code="bad-set-entry"))
    return None


def _check_one_kind(atoms: list[Atom], diags: list[Diagnostic]) -> None:
    if not atoms:
        return
    first_is_addr = atoms[0].kind == "addr"
    for atom in atoms:
        if (atom.kind == "addr") != first_is_addr:
            diags.append(error(
                f"a set holds addresses or ports, not both: `{shorten(atom.text)}` after "
                f"`{shorten(atoms[0].text)}`", atom.span, code="mixed-set"))
            return


MAX_SET_FILE_ERRORS = 10  # errors shown per set file; the rest are counted in one


def at_declaration(diags: list[Diagnostic], source: SourceFile, where: Span,
                   written: str) -> list[Diagnostic]:
    """A set file's diagnostics placed on the policy's ``set`` declaration (``where``,
    its path as ``written``): ``line N of FILE: MESSAGE``, the place in the file kept as
    a note's span (editors and JSON jump there; no diagnostic shows the file's lines,
    see ``SourceFile.echo``, and every message quotes at most ~40 characters of an
    entry). At most ``MAX_SET_FILE_ERRORS``, then one counting the rest."""
    shown = visible(shorten(written, 60))
    out = []
    for d in diags[:MAX_SET_FILE_ERRORS]:
        line = source.position(d.span.start)[0]
        out.append(Diagnostic(d.severity, f"line {line:,} of {shown}: {d.message}", where,
                              d.hint, (Note("here, in the set file", d.span),) + d.notes,
                              d.code))
    rest = len(diags) - MAX_SET_FILE_ERRORS
    if rest > 0:
        out.append(error(f"{rest:,} more error{'s' * (rest != 1)} in {shown} not shown",
                         where, hint=f"pfc shows the first {MAX_SET_FILE_ERRORS} errors "
                         "of a set file; is it really a list of addresses or ports?",
                         code=diags[MAX_SET_FILE_ERRORS].code))
    return out


# ------------------------------------------------------------------- prefix lists

def outermost(nets: Iterable[IPNetwork]) -> list[IPNetwork]:
    """The prefixes not inside another one of ``nets``, sorted by address (the same
    addresses, no two overlapping). Linear after sorting and on plain integers, so a
    100k-entry set takes well under a second (``broadcast_address`` is not used: it
    builds two address objects per prefix)."""
    keyed = sorted(((int(n.network_address), n.prefixlen, n) for n in nets),
                   key=itemgetter(0, 1))
    out: list[IPNetwork] = []
    end = -1
    for start, prefixlen, net in keyed:
        if start > end:
            out.append(net)
            end = start + (1 << (net.max_prefixlen - prefixlen)) - 1
    return out
