"""``pfc set add|del|replace``: change a loaded policy's address set in place, in one
atomic step, without reloading the policy (a blocklist a bouncer updates all day).

The set is a ``set NAME = file "PATH"`` of the loaded policy (address sets only; a
``define`` list is policy text: edit the file and ``pfc apply``). The new contents are
computed on integer ranges (:mod:`.contents`: ``add`` the union, ``del`` the set
without the addresses the entries cover, ``replace`` the entries) and put in the kernel:

- ``nft`` (:mod:`.nft`): the table's sets ``NAME4`` / ``NAME6``, one nf_tables
  transaction over netlink deleting the elements that go and adding those that come
  (the rules, their counters and the other sets are not touched);
- ``iptables`` (:mod:`.ipset`): the generation's ipsets, each ``ipset swap``-ed with a
  new one filled by ``ipset restore``;
- ``xdp``, ``tc`` (:mod:`.ebpf`): each changed family's map filled anew and swapped
  into its ``ARRAY_OF_MAPS`` slot with one update (program and counters stay);
- a family whose entries the backend compiled into the rules or code (small sets are
  inlined), an eBPF set used more than once or inside a list: the policy is recompiled
  from pfc's copy with the new contents and replaced atomically (``pfc load``'s
  replace: no gap), which restarts its counters and takes the compiler's time.

The new contents become the set file's text in pfc's copy of the loaded policy
(:mod:`pfc.deploy.snapshot`), which keeps the digest of what ``apply`` applied: ``pfc
apply`` with an unchanged config leaves live sets alone, ``pfc status`` compares the
kernel's sets with them (:mod:`.drift`), and ``--dry-run`` diffs against them. A ``pfc
load`` or an ``apply`` of a changed policy loads the set file's contents.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pfc.deploy import journal, snapshot, state
from pfc.deploy.base import LoadError, check_privileges, in_netns
from pfc.deploy.sets.contents import (
    Contents,
    copy_contents,
    counts,
    new_contents,
    parse_entries,
    set_file,
    size,
    text,
    with_contents,
)
from pfc.deploy.sets.drift import drift, drifted
from pfc.frontend.pipeline import paused_gc

__all__ = ["OPS", "Change", "change", "drift", "drifted", "new_contents", "parse_entries",
           "text"]
OPS = ("add", "del", "replace")
# Written before a change touches the kernel, removed after: a ``pfc set`` that finds
# it was interrupted (pfc's copy and the kernel may differ) and rewrites every family.
PENDING = ".set-pending"


@dataclass
class Change:
    """One place's set change: what was done and how long the kernel part took."""

    target: str
    dev: str
    name: str
    size: int  # entries (collapsed prefixes) after the change
    added: int
    removed: int
    how: str  # "nft transaction", "ipset swap", "map swap", "policy replaced (...)"
    seconds: float


def change(op: str, name: str, entries: Contents, dev: str, target: str,
           netns: str | None = None) -> Change:
    """``pfc set OP NAME ...`` on the policy pfc loaded at (netns, dev, target)."""
    if op not in OPS:
        raise LoadError(f"unknown set operation `{op}`", hint="add, del or replace")
    check_privileges(target, netns, "set")
    with paused_gc(), in_netns(netns) as ns:
        with state.locked():
            record = state.read(ns, dev, target)
            copy = snapshot.read_loaded(ns, dev, target)
            if record is None or copy is None:
                raise LoadError(f"no policy of pfc's with a copy is loaded as {target} on "
                                f"{dev} (namespace {ns})", hint="pfc load or pfc apply it "
                                "first; `pfc status` shows what is loaded")
            key = set_file(copy, name)
            old = copy_contents(copy, key, name)
            new = new_contents(op, old, entries)
            started = time.perf_counter()
            marker = state.path(ns, dev, target, PENDING)
            interrupted = marker.exists()
            state.write_json(marker, {"set": name, "op": op})
            how = _in_place(record, copy, name, old, new, interrupted,
                            lambda: snapshot.write_loaded(ns, dev, target,
                                                          with_contents(copy, key, new)))
            if how is not None:
                state.remove_file(marker)
                return Change(target, dev, name, size(new), *counts(old, new), how,
                              time.perf_counter() - started)
        found = _reload(copy, key, name, old, new, dev, target, ns)
        with state.locked():
            state.remove_file(marker)
        return found


def _in_place(record: state.Record, copy: snapshot.Copy, name: str, old: Contents,
              new: Contents, interrupted: bool, commit) -> str | None:
    """The change made in place (``commit()`` writes pfc's copy), or None: reload.
    ``interrupted``: the last change did not finish, the kernel may hold ``old`` or
    the copy's new contents: every family the kernel holds a set of is rewritten."""
    from pfc.deploy.sets import ebpf, ipset, nft

    if record.target in ("xdp", "tc"):
        changes = ebpf.plan(record, copy.sources[copy.main], name, old, new, interrupted)
        return None if changes is None else ebpf.change(record, changes, commit)
    how = (nft if record.target == "nft" else ipset).change(
        record, name, old, new, interrupted) if record.target in ("nft", "iptables") \
        else None
    if how is not None:
        journal.point("set-changed")  # the kernel changed, pfc's copy not yet
        commit()
    return how


def _reload(copy: snapshot.Copy, key: str, name: str, old: Contents, new: Contents,
            dev: str, target: str, ns: str) -> Change:
    """The policy recompiled from the copy with the new contents, replaced atomically."""
    from pfc.deploy.preview import load_compiled
    from pfc.frontend.diagnostics import CompileError

    changed = with_contents(copy, key, new)
    started = time.perf_counter()
    o = changed.options
    try:
        load_compiled(snapshot.compile_copy(changed), target, dev, ns, False, o.get("mode"),
                      o.get("hook"), o.get("table") or "pfc")
    except CompileError as exc:
        raise LoadError(f"the policy with the new set does not compile: "
                        f"{exc.diagnostics[0].message}", hint="nothing was changed") \
            from None
    with in_netns(ns), state.locked():
        snapshot.write_loaded(ns, dev, target, changed)
    return Change(target, dev, name, size(new), *counts(old, new),
                  "policy replaced atomically (recompiled; counters restart)",
                  time.perf_counter() - started)
