"""A set's contents as integers: per family, sorted disjoint ranges of addresses.

Parsing, the new contents of ``add``/``del``/``replace``, the prefixes a range is
made of, and pfc's copy of the set file. Everything works on sorted lists of integer
ranges (``Ranges``): no per-address objects, linear merges. 100k IPv4 addresses are
read in ~0.1 s: the plain addresses in one ``inet_pton`` pass, the other lines (prefixes,
IPv6, comments) one by one.
"""

from __future__ import annotations

import array
import re
import socket
from dataclasses import replace
from functools import partial
from pathlib import Path

from pfc.deploy import snapshot
from pfc.deploy.base import LoadError
from pfc.frontend.matches import merge_ranges, subtract_ranges
from pfc.frontend.source import SourceFile
from pfc.frontend.text import shorten
from pfc.frontend.values import read_set_file

Ranges = list[tuple[int, int]]  # sorted, disjoint, not adjacent: (first, last) address
Contents = dict[int, Ranges]  # family 4|6 → its ranges
Net = tuple[int, int, int]  # (family 4|6, address as an integer, prefix length)
BITS = {4: 32, 6: 128}
_AF = {4: socket.AF_INET, 6: socket.AF_INET6}
_PTON4 = partial(socket.inet_pton, socket.AF_INET)


def text(n: Net) -> str:
    """``1.2.3.4`` for a host, ``10.0.0.0/8`` for a prefix."""
    v, a, length = n
    addr = socket.inet_ntop(_AF[v], a.to_bytes(BITS[v] // 8, "big"))
    return addr if length == BITS[v] else f"{addr}/{length}"


def _one(entry: str) -> tuple[int, int, int] | None:
    """(family, first, last) of one address or prefix (host bits cleared)."""
    addr, _, length = entry.partition("/")
    for v, af in _AF.items():
        try:
            raw = socket.inet_pton(af, addr)
        except OSError:
            continue
        bits = BITS[v]
        n = _length(length, bits)
        if not 0 <= n <= bits:
            return None
        size = 1 << (bits - n)
        first = int.from_bytes(raw, "big") & ~(size - 1)
        return v, first, first + size - 1
    return None


def _length(text: str, bits: int) -> int:
    """A prefix length: ``bits`` when absent, -1 unless ASCII digits, at most 64 of
    them (as the compiler reads a prefix length), of a number up to ``bits``."""
    if not text:
        return bits
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 64 else -1


def parse_entries(name: str, entries: list[str], label: str = "<command line>") -> Contents:
    """Addresses and prefixes (the set file format: one a line, ``#`` comments; on the
    command line, one an argument; host bits are cleared), merged. LoadError naming the
    first bad entry, with the compiler's message for it."""
    lines = [e.strip() for e in entries]
    plain = [e for e in lines if e and "/" not in e and ":" not in e and "#" not in e]
    try:
        packed = array.array("I", b"".join(map(_PTON4, plain)))
    except OSError:  # a bad line among them: every line on its own, for the message
        plain, packed = [], array.array("I")
    if socket.htonl(1) != 1:
        packed.byteswap()
    out: dict[int, Ranges] = {4: [(a, a) for a in sorted(packed)], 6: []}
    if len(plain) < sum(1 for e in lines if e):
        out = _slow(name, lines, label, bool(plain), out)
    return {v: merge(r) for v, r in out.items()}


def _slow(name: str, lines: list[str], label: str, done: bool,
          out: dict[int, Ranges]) -> dict[int, Ranges]:
    """The lines the fast pass left (``done``: plain IPv4 addresses are in ``out``)."""
    for number, raw in enumerate(lines, 1):
        entry = raw.split("#", 1)[0].strip()
        if not entry or (done and entry == raw and "/" not in raw and ":" not in raw):
            continue
        one = _one(entry)
        if one is None:
            _, diags = read_set_file(SourceFile(label, entry), name)
            why = diags[0].message if diags else "`pfc set` changes address sets only"
            raise LoadError(f"{label}: entry {number} `{shorten(entry)}`: {why}",
                            hint="one address or prefix per line (or argument), `#` "
                                 "starts a comment; address sets only")
        out[one[0]].append(one[1:])
    return out


def merge(ranges: Ranges) -> Ranges:
    """Sorted, overlapping and adjacent ranges merged."""
    return list(merge_ranges(ranges))


def new_contents(op: str, old: Contents, given: Contents) -> Contents:
    """The set after ``op``: ``add`` the union, ``del`` the old set without the
    addresses the entries cover, ``replace`` the entries."""
    if op == "replace":
        return given
    if op == "add":
        return {v: merge(old[v] + given[v]) for v in (4, 6)}
    return {v: subtract_ranges(old[v], given[v]) for v in (4, 6)}


_memo: dict[tuple[str, int, int], tuple[Ranges, list]] = {}


def _memoized(fn):
    """``fn(version, ranges)`` remembered for the last few lists (by identity, the list
    kept alive): one change asks for the same prefixes and texts several times."""
    def wrapper(version: int, ranges: Ranges) -> list:
        key = (fn.__name__, version, id(ranges))
        hit = _memo.get(key)
        if hit is not None and hit[0] is ranges:
            return hit[1]
        if len(_memo) >= 8:
            _memo.clear()
        _memo[key] = (ranges, fn(version, ranges))
        return _memo[key][1]
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_memoized
def prefixes(version: int, ranges: Ranges) -> list[tuple[int, int]]:
    """The fewest prefixes covering exactly the ranges: (address, length)."""
    bits, out = BITS[version], []
    for lo, hi in ranges:
        if lo == hi:
            out.append((lo, bits))
            continue
        while lo <= hi:
            size = (lo & -lo).bit_length() - 1 if lo else bits
            while lo + (1 << size) - 1 > hi:
                size -= 1
            out.append((lo, bits - size))
            lo += 1 << size
    return out


def nets(contents: Contents) -> dict[int, list[Net]]:
    """The contents as collapsed prefixes, per family."""
    return {v: [(v, a, n) for a, n in prefixes(v, contents[v])] for v in (4, 6)}


def size(contents: Contents) -> int:
    """How many prefixes the contents collapse to."""
    return sum(len(prefixes(v, contents[v])) for v in (4, 6))


_last: list = [None, None, None]  # delta's last (old, new, result): asked twice a change


def delta(old: Ranges, new: Ranges) -> tuple[Ranges, Ranges]:
    """(ranges of ``old`` not in ``new``, ranges of ``new`` not in ``old``): a prefix
    of a range both hold is in both decompositions, and no other one is."""
    if _last[0] is old and _last[1] is new:
        return _last[2]
    before, after = set(old), set(new)
    found = [r for r in old if r not in after], [r for r in new if r not in before]
    _last[:] = [old, new, found]
    return found


def counts(old: Contents, new: Contents) -> tuple[int, int]:
    """(prefixes added, prefixes removed)."""
    added = removed = 0
    for v in (4, 6):
        gone, come = delta(old[v], new[v])
        before, after = prefixes(v, gone), prefixes(v, come)
        known = set(before)
        fresh = sum(1 for p in after if p not in known)
        added, removed = added + fresh, removed + len(before) - (len(after) - fresh)
    return added, removed


# --------------------------------------------------------------------- the copy

_SET_DECL = r'^\s*set\s+{}\s*=\s*file\s+"([^"]*)"'


def set_file(copy: snapshot.Copy, name: str) -> str:
    """The path (as the compiler read it) of set ``name``'s file in the copy."""
    m = re.search(_SET_DECL.format(re.escape(name)), copy.sources[copy.main], re.MULTILINE)
    if m is None:
        raise LoadError(f"the loaded policy {copy.main} has no `set {name} = file ...`",
                        hint="`pfc set` changes sets read from a file; see `pfc status` "
                             "for the policy loaded there")
    path = Path(m.group(1))
    key = str(path if path.is_absolute() else Path(copy.main).parent / path)
    if key not in copy.sources:
        raise LoadError(f"pfc's copy of {copy.main} lacks set file {key}",
                        hint="load the policy again with this pfc")
    return key


@_memoized
def texts(version: int, ranges: Ranges) -> list[str]:
    """The prefixes of the ranges as set file lines (``1.2.3.4``, ``10.0.0.0/8``)."""
    bits = BITS[version]
    if version == 4:
        ntoa = socket.inet_ntoa
        return [ntoa(a.to_bytes(4, "big")) if n == 32 else f"{ntoa(a.to_bytes(4, 'big'))}/{n}"
                for a, n in prefixes(4, ranges)]
    return [socket.inet_ntop(socket.AF_INET6, a.to_bytes(16, "big"))
            + ("" if n == bits else f"/{n}") for a, n in prefixes(6, ranges)]


def with_contents(copy: snapshot.Copy, key: str, contents: Contents) -> snapshot.Copy:
    """The copy with set file ``key`` holding ``contents`` (collapsed prefixes)."""
    body = "\n".join(["# pfc set: the live contents", *texts(4, contents[4]),
                      *texts(6, contents[6])])
    return replace(copy, sources=copy.sources | {key: body + "\n"},
                   origin=copy.origin or copy.digest)


def copy_contents(copy: snapshot.Copy, key: str, name: str) -> Contents:
    return parse_entries(name, copy.sources[key].split("\n"), key)


def set_names(copy: snapshot.Copy) -> list[str]:
    """The ``set NAME = file`` names of the copy's policy."""
    return re.findall(r'^\s*set\s+(\w[\w-]*)\s*=\s*file', copy.sources[copy.main],
                      re.MULTILINE)


def uses(policy: str, name: str) -> int | None:
    """How often the policy text uses ``$name``, all of them as the whole value of a
    ``src``/``dst`` match of a rule; None if some use is anything else (in a list, a
    ``define``, a redirect target)."""
    from dataclasses import fields, is_dataclass

    from pfc.frontend.parse import parse
    from pfc.frontend.syntax import MatchNode, Value

    module, _ = parse(SourceFile("<copy>", policy))
    found = {"direct": 0, "every": 0}

    def walk(node) -> None:
        if isinstance(node, Value) and node.kind == "var" and node.text == name:
            found["every"] += 1
        if isinstance(node, MatchNode) and node.field in ("src", "dst") and \
                node.value is not None and (node.value.kind, node.value.text) == ("var", name):
            found["direct"] += 1
        if isinstance(node, tuple):
            for item in node:
                walk(item)
        elif is_dataclass(node):
            for f in fields(node):
                walk(getattr(node, f.name))

    walk(module.statements)
    return found["direct"] if found["every"] == found["direct"] else None
