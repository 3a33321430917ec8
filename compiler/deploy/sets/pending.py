"""``pfc set`` as a transaction: the new contents are written before the kernel changes,
and an interrupted change is finished or rolled back by the next pfc command.

A change writes, before it touches the kernel, pfc's new copy of the sources
(``TARGET.sources.pending``, :mod:`pfc.deploy.snapshot`) and a marker
``TARGET.set-pending``: the set, the operation, and the digests of the copy before and
after. It then changes the kernel (:func:`rewrite`: an nft transaction, ipset swaps,
eBPF map swaps; or the caller reloads the policy, a load with its own journal),
writes the record naming the new copy, renames the copy into place and removes the
marker (:func:`commit`). Commit points, for the tests' kills
(:func:`pfc.deploy.journal.point`): ``set-begun``, the kernel's own (``set-filled``,
``set-prepared``, ``set-family``), ``set-changed``, ``set-recorded``, ``set-copied``.

The next load, unload, set, apply or status that finds a marker of a process that is
gone (:func:`settle`, under the state lock) reads the record: it names the new copy
(the change committed: the copy is put in place), or the old one; then the kernel's
sets decide: all hold the old contents (rolled back: the new copy is dropped), all the
new ones (finished: committed now), or a mix (an ipset or map swapped, the other not:
every family is rewritten with the new contents, then committed). A set compiled into
the rules changes only by a reload, whose record says whether it happened.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from pfc.deploy import journal, snapshot, state
from pfc.deploy.base import LoadError
from pfc.deploy.sets.contents import Contents, copy_contents, merge, set_file
from pfc.deploy.sets.drift import live

MARKER = ".set-pending"


def marker(netns: str, dev: str, target: str) -> Path:
    return state.path(netns, dev, target, MARKER)


def places(netns: str | None = None) -> list[tuple[str, str, str]]:
    """(netns, dev, target) of every unfinished ``pfc set``."""
    return state.places(netns, None, MARKER)


def clear(netns: str, dev: str, target: str) -> None:
    state.remove_file(marker(netns, dev, target))


def begin(record: state.Record, name: str, op: str, before: snapshot.Copy,
          after: snapshot.Copy) -> None:
    """The new copy and the marker written, room for the record reserved: before the
    kernel changes (:class:`pfc.deploy.state.Unwritable` then: nothing changed)."""
    where = (record.netns, record.dev, record.target)
    try:
        snapshot.write_pending(*where, after)
        state.write_json(marker(*where), {"set": name, "op": op, "before": before.digest,
                                          "after": after.digest, "token": journal.token()})
        size = state.path(*where).stat().st_size
        state.reserve(state.path(*where, journal.RESERVE), 2 * size + 16384)
    except OSError:
        with contextlib.suppress(OSError):
            _drop(*where, "")
        raise
    journal.point("set-begun")


def commit(record: state.Record, digest: str) -> None:
    """The kernel holds the new contents: the record names the new copy, the copy is
    put in place, the marker goes."""
    record.copy_digest = digest
    state.write(record)
    journal.point("set-recorded")
    snapshot.commit(record.netns, record.dev, record.target, digest)
    journal.point("set-copied")
    clear(record.netns, record.dev, record.target)
    state.release()


def rewrite(record: state.Record, copy: snapshot.Copy, name: str, old: Contents,
            new: Contents, interrupted: bool = False) -> str | None:
    """The change made in the kernel's sets, in place; None: the caller reloads (a
    family's entries are compiled into the rules, or the set is used otherwise).
    ``interrupted``: every family with a set is rewritten, whatever it holds."""
    from pfc.deploy.sets import ebpf, ipset, nft

    if record.target in ("xdp", "tc"):
        changes = ebpf.plan(record, copy.sources[copy.main], name, old, new, interrupted)
        return None if changes is None else ebpf.change(record, changes)
    if record.target == "nft":
        return nft.change(record, name, old, new, interrupted)
    if record.target == "iptables":
        return ipset.change(record, name, old, new, interrupted)
    return None


def _read(netns: str, dev: str, target: str) -> dict | None:
    try:
        data = json.loads(marker(netns, dev, target).read_text())
        return data if isinstance(data, dict) and {"set", "before", "after"} <= set(data) \
            else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def settle(netns: str, dev: str, target: str, ours: bool = False) -> list[str]:
    """Finish or roll back an unfinished ``pfc set`` of (netns, dev, target), if there
    is one (``ours``: also this process's own, after it failed); what was done, for the
    user. Call with the lock held, inside the namespace."""
    m = _read(netns, dev, target)
    if m is None or (m.get("token") == journal.token() and not ours):
        return []
    what = (f"the interrupted `pfc set {m.get('op', '?')} {m.get('set', '?')}` of {target} "
            f"on {dev} (namespace {netns})")
    if target == "iptables":
        from pfc.deploy.sets import ipset

        ipset.sweep()
    if not m:
        return _drop(netns, dev, target, f"dropped {what}: its marker is unreadable")
    try:
        record = state.read(netns, dev, target)
    except state.Unreadable:
        record = None
    if record is None or record.copy_digest not in (m["before"], m["after"]):
        return _drop(netns, dev, target, f"dropped {what}: the policy it changed is no "
                                         "longer loaded")
    if record.copy_digest == m["after"]:
        snapshot.commit(netns, dev, target, m["after"])
        clear(netns, dev, target)
        return [f"finished {what}: pfc's record names its new contents"]
    before, _ = snapshot.checked(record)
    after = snapshot.read_pending(netns, dev, target)
    if before is None or after is None or after.digest != m["after"]:
        return _drop(netns, dev, target, f"dropped {what}: pfc's copies of the contents "
                                         "before and after it are not both there")
    return _decide(record, m["set"], before, after, what)


def _drop(netns: str, dev: str, target: str, message: str) -> list[str]:
    snapshot.discard_pending(netns, dev, target)
    clear(netns, dev, target)
    return [message]


def _decide(record: state.Record, name: str, before: snapshot.Copy,
            after: snapshot.Copy, what: str) -> list[str]:
    """The kernel's sets decide: rolled back, finished, or finished now (a mix)."""
    old = copy_contents(before, set_file(before, name), name)
    new = copy_contents(after, set_file(after, name), name)
    found = which(record, name, old, new)
    where = (record.netns, record.dev, record.target)
    if found == "old":
        return _drop(*where, f"rolled back {what}: the kernel's sets hold the contents "
                             "before it (checked)")
    if found == "mix":
        try:
            rewrite(record, before, name, old, new, interrupted=True)
        except LoadError as exc:
            return _drop(*where, f"could not finish {what}: {exc.cause}; the kernel holds "
                                 "a mix (`pfc status` shows it; `pfc apply` or `pfc load` "
                                 "loads the policy again)")
    commit(record, after.digest)
    detail = "rewrote every family with its new contents" if found == "mix" else \
        "the kernel's sets hold its new contents (checked)"
    return [f"finished {what}: {detail}; pfc's record names them"]


def which(record: state.Record, name: str, old: Contents, new: Contents) -> str:
    """Whether the kernel's sets of ``name`` hold ``old`` ("old"), ``new`` ("new") in
    every family the change touches, or neither ("mix"). A family compiled into the
    rules holds ``old``: only a reload changes it, and its record says so."""
    votes = set()
    have = live(record, name)
    for v in (4, 6):
        if old[v] == new[v]:
            continue
        ranges = have.get(v)
        if ranges is None:
            votes.add("old")
            continue
        ranges = merge(ranges)
        votes.add("new" if ranges == new[v] else "old" if ranges == old[v] else "mix")
    return "new" if votes == {"new"} else "old" if votes <= {"old"} else "mix"


def settle_own(netns: str, dev: str, target: str) -> list[str]:
    """After this process's change failed: settle its marker at once (best effort)."""
    with contextlib.suppress(Exception):
        return settle(netns, dev, target, ours=True)
    return []
