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

A change is a transaction (:mod:`.pending`): the new copy and a marker are written
before the kernel changes, the record (naming the new copy) after; the next pfc command
finishes or rolls back one that was killed. A copy whose digest is not the record's is
refused: a set is never changed from another policy's sources.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pfc.deploy import journal, snapshot, state
from pfc.deploy.base import LoadError, check_privileges, in_netns, unwritable
from pfc.deploy.sets import pending
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
    notes: list[str] = field(default_factory=list)  # interrupted work settled first


def change(op: str, name: str, entries: Contents, dev: str, target: str,
           netns: str | None = None) -> Change:
    """``pfc set OP NAME ...`` on the policy pfc loaded at (netns, dev, target), as a
    transaction (:mod:`.pending`); an unfinished load or set there is settled first."""
    from pfc.deploy import load as deploying

    if op not in OPS:
        raise LoadError(f"unknown set operation `{op}`", hint="add, del or replace")
    check_privileges(target, netns, "set")
    try:
        with paused_gc(), in_netns(netns) as ns, state.locked():
            notes = deploying.recover(ns, dev, target)
            found = _change(op, name, entries, dev, target, ns)
    except state.Unwritable as exc:
        raise unwritable(exc, "nothing was changed: the set is as it was") from None
    finally:
        state.release()
    found.notes = notes
    return found


def _loaded(ns: str, dev: str, target: str) -> tuple[state.Record, snapshot.Copy]:
    """pfc's record there and its copy; LoadError when there is none, or the copy is
    not the one the record names (pfc never changes a set from another policy's)."""
    record = state.read(ns, dev, target)
    if record is None:
        raise LoadError(f"no policy of pfc's is loaded as {target} on {dev} (namespace "
                        f"{ns})", hint="pfc load or pfc apply it first; `pfc status` shows "
                        "what is loaded")
    copy, why = snapshot.checked(record)
    if copy is None:
        raise LoadError(f"{why}: pfc will not change a set from it",
                        hint="`pfc load` or `pfc apply` the policy again, then `pfc set`")
    return record, copy


def _change(op: str, name: str, entries: Contents, dev: str, target: str,
            ns: str) -> Change:
    record, copy = _loaded(ns, dev, target)
    key = set_file(copy, name)
    old = copy_contents(copy, key, name)
    new = new_contents(op, old, entries)
    changed = with_contents(copy, key, new)
    started = time.perf_counter()
    pending.begin(record, name, op, copy, changed)
    try:
        how = pending.rewrite(record, copy, name, old, new)
        if how is None:
            how = _reload(changed, dev, target, ns)
        else:
            journal.point("set-changed")
            try:
                pending.commit(record, changed.digest)
            except state.Unwritable as exc:
                raise unwritable(exc, "the new contents ARE in force, but pfc could not "
                                      "record them (the next pfc command with room "
                                      "does)") from None
    except BaseException:
        pending.settle_own(ns, dev, target)
        raise
    pending.clear(ns, dev, target)
    return Change(target, dev, name, size(new), *counts(old, new), how,
                  time.perf_counter() - started)


def _reload(changed: snapshot.Copy, dev: str, target: str, ns: str) -> str:
    """The policy recompiled from the copy with the new contents, replaced atomically
    (a load: its record and copy commit together)."""
    from pfc.deploy.preview import load_compiled
    from pfc.frontend.diagnostics import CompileError

    o = changed.options
    try:
        load_compiled(snapshot.compile_copy(changed), target, dev, ns, False, o.get("mode"),
                      o.get("hook"), o.get("table") or "pfc", origin=changed.origin)
    except CompileError as exc:
        raise LoadError(f"the policy with the new set does not compile: "
                        f"{exc.diagnostics[0].message}", hint="nothing was changed") \
            from None
    journal.point("set-reloaded")
    return "policy replaced atomically (recompiled; counters restart)"
