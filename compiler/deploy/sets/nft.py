"""``pfc set`` on an nft policy: the table's sets ``NAME4`` / ``NAME6`` changed in one
nf_tables transaction (:mod:`pfc.kernel.nfnl`), and read back for drift.

The transaction holds, per changed family, the elements that go (``delete``) and those
that come (``add``), computed from pfc's copy (what pfc last put there) and the new
contents; if the kernel refuses it (the set's elements are not what pfc put there:
changed outside pfc), a second transaction flushes the sets and adds every element. A
set without ``flags interval`` holds addresses: small merged prefixes are expanded.
"""

from __future__ import annotations

from pfc.deploy import state
from pfc.deploy.base import LoadError
from pfc.deploy.sets.contents import BITS, Contents, delta
from pfc.kernel import nfnl

HOST_EXPAND_MAX = 8  # a prefix of at most 2^8 addresses goes into a hash set as addresses


def elements(version: int, ranges: list[tuple[int, int]], interval: bool) \
        -> list[nfnl.Element] | None:
    """The elements of ``ranges`` (without an interval set's leading end element at 0:
    :func:`nfnl.interval_elements` has it); None when a set of addresses would need a
    large prefix."""
    width = BITS[version] // 8
    if interval:
        return nfnl.interval_elements(ranges, width, lead=False)
    out = []
    for lo, hi in ranges:
        if lo == hi:
            out.append((lo.to_bytes(width, "big"), 0))
        elif hi - lo >= 1 << HOST_EXPAND_MAX:
            return None
        else:
            out += [(a.to_bytes(width, "big"), 0) for a in range(lo, hi + 1)]
    return out


def steps(name: str, old: Contents, new: Contents, have: dict[str, nfnl.SetInfo]) \
        -> list[tuple[str, str, list[nfnl.Element]]] | None:
    """The transaction turning ``old`` into ``new``: per changed family, ``delete`` the
    elements that go, ``add`` those that come, from the ranges that differ (a range
    both hold keeps its elements). An interval set loses and gains whole ranges (a
    start and an end element each: the kernel refuses a lone start or end, measured
    on 6.18: ENOENT, EEXIST), a set of addresses single elements. None when a family
    with changes has no set (compiled into the rules) or needs a prefix in a set of
    addresses."""
    out = []
    for v in (4, 6):
        if old[v] == new[v]:
            continue
        sname = f"{name}{v}"
        if sname not in have:
            return None
        interval = have[sname].interval
        gone_r, come_r = delta(old[v], new[v])
        before, after = elements(v, gone_r, interval), elements(v, come_r, interval)
        if after is None:
            return None
        if before is None:  # pfc's copy holds what the set cannot: all anew
            out += [("flush", sname, []), ("add", sname, elements(v, new[v], False))]
            continue
        if interval:  # whole ranges go and come: their start and end elements
            if _lead(old[v]) != _lead(new[v]) or len(gone_r) > max(64, len(new[v]) // 2):
                # the leading end element at 0 changes, or most of the set goes: a
                # flush is cheaper than deleting range by range
                out += [("flush", sname, []), ("add", sname, nfnl.interval_elements(
                    new[v], BITS[v] // 8))]
                continue
            gone, come = before, after
        else:  # addresses: each element on its own
            kept, wanted = set(before), set(after)
            gone = [e for e in before if e not in wanted]
            come = [e for e in after if e not in kept]
        out += ([("delete", sname, gone)] if gone else []) + \
            ([("add", sname, come)] if come else [])
    return out


def _lead(ranges: list[tuple[int, int]]) -> bool:
    return bool(ranges) and ranges[0][0] != 0


def refill(name: str, new: Contents, have: dict[str, nfnl.SetInfo]) \
        -> list[tuple[str, str, list[nfnl.Element]]]:
    out = []
    for v in (4, 6):
        sname = f"{name}{v}"
        if sname in have:
            out.append(("flush", sname, []))
            out.append(("add", sname, nfnl.interval_elements(new[v], BITS[v] // 8)
                        if have[sname].interval else elements(v, new[v], False) or []))
    return out


def change(record: state.Record, name: str, old: Contents, new: Contents,
           interrupted: bool = False) -> str | None:
    """One transaction; None when a family with changes has no set in the table (its
    entries are in the rules): the caller reloads. ``interrupted``: flush and refill
    (the kernel may not hold ``old``)."""
    a = record.attach
    with nfnl.Socket() as nl:
        have = {}
        for v in (4, 6):
            info = nl.get_set(a["family"], a["table"], f"{name}{v}")
            if info is not None:
                have[f"{name}{v}"] = info
        plan = steps(name, old, new, have)
        if plan is not None and interrupted:
            plan = refill(name, new, have)
        if plan is None:
            return None
        try:
            if plan:
                nl.commit(a["family"], a["table"], plan)
        except OSError:  # the kernel's elements are not pfc's (changed outside): anew
            try:
                nl.commit(a["family"], a["table"], refill(name, new, have))
            except OSError as exc:
                raise LoadError(f"nftables refused the set change: {exc.strerror}; the "
                                "set is as it was (one transaction)",
                                hint="`pfc status` shows whether the set changed outside "
                                     "pfc") from None
    return "nft transaction"


def held(a: dict, sname: str) -> Contents | None:
    """What set ``sname`` of the table holds, read over netlink; None if it is gone."""
    v = 6 if sname.endswith("6") else 4
    with nfnl.Socket() as nl:
        info = nl.get_set(a["family"], a["table"], sname)
        found = nl.elements(a["family"], a["table"], sname) if info else None
    if found is None:
        return None
    return {4: [], 6: []} | {v: nfnl.ranges(found, info.interval)}
