"""``pfc status``: the sets in the kernel compared with what pfc put there.

nft sets and ipsets are listed; an eBPF program's set maps are read back through its
map ids (the slot of each ``ARRAY_OF_MAPS``, then the map in it). A set fed by a policy
``set`` is compared with pfc's copy (what pfc loaded or last put there with ``pfc
set``); a map of a list of the policy's own with the digest recorded at load.
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


def _netfilter(record: state.Record, copy: snapshot.Copy) -> list[str]:
    from pfc.deploy.sets import ipset, nft

    out = []
    for name in c.set_names(copy):
        want = c.copy_contents(copy, c.set_file(copy, name), name)
        for v in (4, 6):
            if record.target == "nft":
                sname = f"{name}{v}"
                have = nft.held(record.attach, sname)
            else:
                sname = ipset.live_name(record, name, v)
                have = ipset.held(sname) if sname else None
            if have is not None:
                out.append(_differ(f"set {sname}", c.prefixes(v, have[v]),
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
    copy = snapshot.read_loaded(record.netns, record.dev, record.target)
    if copy is None:
        return None
    if record.target in ("nft", "iptables"):
        out = _netfilter(record, copy)
    elif record.target in ("xdp", "tc"):
        out = _ebpf(record, copy)
    else:
        out = []
    if out and state.path(record.netns, record.dev, record.target, ".set-pending").exists():
        out.append("a `pfc set` was interrupted: run it again, or `pfc apply`")
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
