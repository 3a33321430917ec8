"""``pfc status``: the sets in the kernel compared with what pfc put there.

nft sets and ipsets are listed; an eBPF program's set maps are read back through its
map ids (the slot of each ``ARRAY_OF_MAPS``, then the map in it): :func:`live`. A set
fed by a policy ``set`` is compared with pfc's copy (what pfc loaded or last put there
with ``pfc set``; only a copy whose digest is the record's); a map of a list of the
policy's own with the digest recorded at load.
"""

from __future__ import annotations

from pfc.deploy import snapshot, state
from pfc.deploy.base import in_netns
from pfc.deploy.sets import contents as c


def _differ(what: str, got: list, want: list) -> str | None:
    if got == want:
        return None
    plus, minus = len(set(got) - set(want)), len(set(want) - set(got))
    return f"{what} holds {len(got)} prefixes, pfc put {len(want)} (+{plus} -{minus})"


def live(record: state.Record, name: str) -> dict[int, c.Ranges]:
    """What the kernel's sets of policy set ``name`` hold, per family that has one
    (nft set ``NAMEv``, the generation's ipset, the eBPF set map), as merged ranges."""
    from pfc.deploy.sets import ebpf, ipset, nft

    out = {}
    if record.target in ("nft", "iptables"):
        for v in (4, 6):
            if record.target == "nft":
                have = nft.held(record.attach, f"{name}{v}")
            else:
                sname = ipset.live_name(record, name, v)
                have = ipset.held(sname) if sname else None
            if have is not None:
                out[v] = c.merge(have[v])
        return out
    held = ebpf.held(record) if record.target in ("xdp", "tc") else {}
    for m in record.attach.get("set_maps") or []:
        found = held.get(m["name"])
        if m.get("set") == name and found is not None:
            v = m["family"]
            out[v] = c.merge([(a, a + (1 << (c.BITS[v] - n)) - 1) for a, n in found])
    return out


def _setname(record: state.Record, name: str, v: int) -> str:
    if record.target == "nft":
        return f"{name}{v}"
    from pfc.deploy.sets import ipset

    return ipset.live_name(record, name, v) or f"{name}{v}"


def _netfilter(record: state.Record, copy: snapshot.Copy) -> list[str]:
    out = []
    for name in c.set_names(copy):
        want = c.copy_contents(copy, c.set_file(copy, name), name)
        for v, have in live(record, name).items():
            out.append(_differ(f"set {_setname(record, name, v)}", c.prefixes(v, have),
                               c.prefixes(v, want[v])))
    return [x for x in out if x]


def _ebpf(record: state.Record, copy: snapshot.Copy) -> list[str]:
    from pfc.deploy.bpf import prefix_digest
    from pfc.deploy.sets import ebpf

    names = set(c.set_names(copy))
    out, held = [], ebpf.held(record)
    for m in record.attach.get("set_maps") or []:
        found = held.get(m["name"])
        if found is None:
            out.append(f"map {m['name']}'s slot is empty (the program drops every packet)")
            continue
        v = m["family"]
        got = c.prefixes(v, c.merge([(a, a + (1 << (c.BITS[v] - n)) - 1) for a, n in found]))
        if m.get("set") in names:
            want = c.copy_contents(copy, c.set_file(copy, m["set"]), m["set"])
            out.append(_differ(f"map {m['name']} (set {m['set']})", got,
                               c.prefixes(v, want[v])))
        elif prefix_digest(got) != m.get("digest"):
            out.append(f"map {m['name']} holds {len(got)} prefixes, not the {m.get('count')} "
                       "pfc loaded")
    return [x for x in out if x]


def drift(record: state.Record) -> str | None:
    """How the kernel's sets of a policy differ from what pfc loaded or last set (pfc's
    copy), one line; None when they agree (or there are none)."""
    copy, _ = snapshot.checked(record)
    if copy is None:
        return None
    if record.target in ("nft", "iptables"):
        out = _netfilter(record, copy)
    elif record.target in ("xdp", "tc"):
        out = _ebpf(record, copy)
    else:
        out = []
    return "; ".join(out) or None


def drifted(entries: list) -> None:
    """``pfc status``: mark entries whose sets changed outside pfc (health ``changed``)."""
    from pfc.deploy.base import Inspection
    from pfc.frontend.pipeline import paused_gc

    for s in entries:
        if s.inspection.health != "ok":
            continue
        with in_netns(s.record.netns), paused_gc():  # 100k tuples, none in a cycle
            detail = drift(s.record)
        if detail:
            s.inspection = Inspection("changed", f"changed outside pfc: {detail}",
                                      s.inspection.counters)
