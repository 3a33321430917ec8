"""Named lists whose contents differ between two policies (``define`` and ``set``):
what ``pfc diff`` and ``pfc load --dry-run`` say changed *inside* one (entries added,
entries removed) instead of naming the whole list.

A list's contents are the values its matches hold (an address list per family, a
port or number list as ranges), so ``{ 80, 81 }`` and ``{ 80-81 }`` are the same and
a list that gains ``82`` shows ``+82``, not a new range. Differences are written back
as the smallest prefixes (addresses) or ranges (numbers).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

from pfc.backends.describe import LISTED_MAX
from pfc.frontend import ir

Interval = tuple[int, int, int]  # (IP version or 0 for numbers, low, high)


@dataclass(frozen=True)
class SetChange:
    name: str
    removed: tuple[Interval, ...]
    added: tuple[Interval, ...]

    def words(self, which: str) -> list[str]:
        return [w for iv in getattr(self, which) for w in _text(iv)]

    def text(self) -> str:
        """``$web: +8443; $admins: -203.0.113.11`` style, at most LISTED_MAX each."""
        parts = [f"{sign}{w}" for sign, which in (("-", "removed"), ("+", "added"))
                 for w in _shown(self.words(which))]
        return f"${self.name}: " + ", ".join(parts)

    def to_json(self) -> dict:
        return {"name": self.name, "removed": self.words("removed"),
                "added": self.words("added")}


def contents(policy: ir.Policy) -> dict[str, tuple[Interval, ...]]:
    """Each named list the rules use, as sorted, merged intervals."""
    out: dict[str, list[Interval]] = {}
    for rule in policy.rules:
        for m in rule.matches:
            name = getattr(m, "set_name", None)
            if name is not None and name not in out:
                out[name] = _intervals(m)
    return {name: tuple(_merged(ivs)) for name, ivs in out.items()}


def changes(old: ir.Policy, new: ir.Policy) -> list[SetChange]:
    """The lists both policies use by one name, whose contents differ."""
    a, b = contents(old), contents(new)
    out = []
    for name in sorted(a.keys() & b.keys()):
        if a[name] != b[name]:
            out.append(SetChange(name, tuple(_minus(a[name], b[name])),
                                 tuple(_minus(b[name], a[name]))))
    return out


def changed_part(m: ir.Match, change: SetChange, which: str) -> ir.Match | None:
    """``m`` restricted to the entries ``change`` removed or added (``which``), or
    None when there are none."""
    ivs = getattr(change, which)
    if not ivs:
        return None
    if isinstance(m, ir.AddrMatch):
        nets = tuple(n for v, lo, hi in ivs for n in ipaddress.summarize_address_range(
            ipaddress.ip_address(_addr(v, lo)), ipaddress.ip_address(_addr(v, hi))))
        return dataclasses.replace(m, prefixes=nets, negated=False)
    return dataclasses.replace(m, ranges=tuple((lo, hi) for _, lo, hi in ivs),
                               negated=False)


def entries_text(change: SetChange, which: str) -> str:
    words = _shown(change.words(which))
    return words[0] if len(words) == 1 else "{ " + ", ".join(words) + " }"


# ------------------------------------------------------------------------ intervals

def _intervals(m: ir.Match) -> list[Interval]:
    if isinstance(m, ir.AddrMatch):
        return [(n.version, int(n.network_address), int(n.broadcast_address))
                for n in m.prefixes]
    if isinstance(m, ir.IntMatch):
        return [(0, lo, hi) for lo, hi in m.ranges]
    return []


def _merged(ivs: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for v, lo, hi in sorted(ivs):
        if out and out[-1][0] == v and lo <= out[-1][2] + 1:
            out[-1] = (v, out[-1][1], max(hi, out[-1][2]))
        else:
            out.append((v, lo, hi))
    return out


def _minus(a: tuple[Interval, ...], b: tuple[Interval, ...]) -> list[Interval]:
    """The values of ``a`` not in ``b`` (both merged)."""
    out = []
    for v, lo, hi in a:
        for v2, lo2, hi2 in b:
            if v2 != v or hi2 < lo or lo2 > hi:
                continue
            if lo2 > lo:
                out.append((v, lo, lo2 - 1))
            lo = hi2 + 1
            if lo > hi:
                break
        if lo <= hi:
            out.append((v, lo, hi))
    return out


def _addr(version: int, value: int):
    return ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)


def _text(iv: Interval) -> list[str]:
    v, lo, hi = iv
    if v == 0:
        return [str(lo) if lo == hi else f"{lo}-{hi}"]
    nets = ipaddress.summarize_address_range(_addr(v, lo), _addr(v, hi))
    return [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n)
            for n in nets]


def _shown(words: list[str]) -> list[str]:
    if len(words) <= LISTED_MAX:
        return words
    return words[:LISTED_MAX] + [f"... {len(words) - LISTED_MAX} more"]
