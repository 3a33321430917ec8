"""``pfc load`` / ``unload`` / ``status``: put a compiled policy on a device, all or
nothing, replace it with no gap, take it off again, and read its counters.

This module is the dispatcher: it owns the table of targets, takes the lock, enters the
namespace (``--netns``), finds the device, runs each load as a transaction (the journal,
:mod:`pfc.deploy.journal`) and writes the state record (:mod:`pfc.deploy.state`); what
every loader shares is :mod:`pfc.deploy.base`, each target's attach, detach, inspect
and recovery its own module (bpf, tc, nft, iptables, firewall, modular.nfmod, modular.u32).

All or nothing: the policy is compiled (by the caller, through
:func:`pfc.build.build_artifact`) and every check is made before anything in the kernel
changes; the intent is written, the change is one atomic step per target (XDP
``XDP_FLAGS_REPLACE``, tc ``NLM_F_REPLACE`` on the same handle and priority, one nft
transaction, the iptables switch of both families), then the record is committed and
the intent cleared. A load that fails after it began is followed at once by the same
check the next command would make (:func:`recover`): the error says what the kernel
holds then, as checked, never what it should hold. Records are a cache: the kernel
is the source of truth (:class:`Loader`), and ``status`` says when the two disagree.

Errors the user can act on are :class:`LoadError` (a cause and a hint; exit 2), a
full or read-only state directory too (saying whether the new policy is in force)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pfc.backends.base import Artifact
from pfc.deploy import journal, snapshot, state
from pfc.deploy.base import (
    Inspection,
    Loader,
    LoadError,
    Plan,
    Recovery,
    check_dev_name,
    check_kernel,
    check_privileges,
    current_netns,
    current_netns_id,
    ifindex,
    in_netns,
    netns_alive,
    netns_path,
    unwritable,
)
from pfc.deploy.sets import pending as set_pending
from pfc.frontend import ir

TARGETS = ("xdp", "tc", "nft", "iptables", "nfmod", "u32")


def loader(target: str) -> Loader:
    if target == "xdp":
        from pfc.deploy import bpf as load_bpf
        return load_bpf.LOADERS[target]
    if target == "tc":
        from pfc.deploy import tc as load_tc
        return load_tc.LOADER
    if target == "nft":
        from pfc.deploy import nft as load_nft
        return load_nft.LOADER
    if target == "iptables":
        from pfc.deploy import iptables as load_ipt
        return load_ipt.LOADER
    if target == "nfmod":
        from pfc.deploy.modular import nfmod
        return nfmod.LOADER
    if target == "u32":
        from pfc.deploy.modular import u32
        return u32.LOADER
    if target == "firewall":  # a whole firewall (v2): pfc.deploy.firewall
        from pfc.deploy.firewall import loader as load_fw
        return load_fw.LOADER
    raise LoadError(f"`pfc load` cannot attach target `{target}`",
                    hint="loadable targets: " + ", ".join(TARGETS) +
                    "; socket filters are attached by the application "
                    "(pfc.attach_socket, docs/load.md)")


# ------------------------------------------------------------------------ recovery

def _what(intent: journal.Intent) -> str:
    return (f"the interrupted load of {intent.policy} ({intent.target} on {intent.dev}, "
            f"namespace {intent.netns}, started {intent.started} by pid {intent.pid})")


def settle(intent: journal.Intent, found: Recovery) -> list[str]:
    """Act on a loader's verdict about an unfinished load: commit the record and
    retire the old policy ("new"), or leave the record as it was ("old", "other");
    clear the intent. Returns what was done, for the user."""
    impl = loader(intent.target)
    where = (intent.netns, intent.dev, intent.target)
    if found.verdict == "new":
        record = state.Record.from_json(intent.record)
        record.attach = found.attach or {}
        state.write(record)
        snapshot.commit(*where, record.copy_digest)
        retired = impl.retire(intent.old, record.attach)
        journal.clear(*where)
        return [f"finished {_what(intent)}: {found.detail}; its record is written"] + retired
    snapshot.discard_pending(*where)
    journal.clear(*where)
    if found.verdict == "old":
        return [f"rolled back {_what(intent)}: {found.detail}"] + found.removed
    return [f"could not finish or roll back {_what(intent)}: {found.detail}; pfc's record "
            "was left as it was (`pfc status` shows the difference)"]


def recover(netns: str, dev: str, target: str) -> list[str]:
    """Finish or roll back an unfinished load of (netns, dev, target), then an
    unfinished ``pfc set`` (:mod:`pfc.deploy.sets.pending`), if there is one; remove
    what a process killed before it began left (a reserve, a new copy); call with the
    lock held, inside the namespace."""
    try:
        intent = journal.read(netns, dev, target)
    except state.Unreadable as exc:
        state.remove_file(exc.where)
        out = [f"warning: {exc}; removed it (`pfc status` shows what the kernel holds)"]
    else:
        out = [] if intent is None else settle(intent, loader(target).recover(intent))
    out += set_pending.settle(netns, dev, target)
    _stale(netns, dev, target)
    return out


def _stale(netns: str, dev: str, target: str) -> None:
    """A reserve or a new copy with no unfinished load or set of their own left."""
    reserve = state.path(netns, dev, target, journal.RESERVE)
    if reserve.exists() and not state.reserved(reserve):
        state.remove_file(reserve)
    if not set_pending.marker(netns, dev, target).exists() and \
            snapshot.pending_path(netns, dev, target).exists():
        snapshot.discard_pending(netns, dev, target)


def recover_all(netns: str | None) -> list[str]:
    """Every unfinished load or ``pfc set`` (of one namespace); one of a namespace
    that no longer exists is dropped (everything in it went with it)."""
    out = []
    places = sorted(set(journal.pending(netns)) | set(set_pending.places(netns)) |
                    set(state.places(netns, None, snapshot.PENDING)) |
                    set(state.places(netns, None, journal.RESERVE)))
    for ns, dev, target in places:
        if not netns_alive(ns, None):
            journal.clear(ns, dev, target)
            set_pending.clear(ns, dev, target)
            out.append(f"dropped an interrupted {target} load or set on {dev}: namespace "
                       f"{ns} no longer exists")
            continue
        with in_netns(ns):
            out += recover(ns, dev, target)
    return out


def _failed(txn: journal.Txn, exc: LoadError) -> LoadError:
    """The error of a load that failed after it began, with what the kernel holds
    now, as checked (the same verdict the next command would reach)."""
    intent = txn.intent
    if intent is None:
        return LoadError(exc.cause + "; nothing was changed: the new policy is not in "
                         "force", exc.hint)
    try:
        found = loader(intent.target).recover(intent)
    except Exception as err:  # noqa: BLE001 - the next command will retry
        return LoadError(f"{exc.cause}; could not check what the kernel holds now ({err}): "
                         "the next pfc command will finish or roll back this load", exc.hint)
    try:
        settle(intent, found)
    except state.Unwritable as err:
        why = "" if str(err) in exc.cause else f" ({err}: {err.need()})"
        return LoadError(f"{exc.cause}; {_unrecorded(found)}{why}", exc.hint or err.hint())
    txn.intent = None
    if found.verdict == "old":
        return LoadError(f"{exc.cause}; the new policy is not in force: the kernel holds "
                         f"what it held before (checked: {found.detail})", exc.hint)
    if found.verdict == "new":
        return LoadError(f"{exc.cause}; but the new policy IS in force (checked: "
                         f"{found.detail}) and recorded", exc.hint)
    return LoadError(f"{exc.cause}; the kernel now holds neither policy (checked: "
                     f"{found.detail})", exc.hint)


def _unrecorded(found: Recovery) -> str:
    """What a load whose settling could not be written leaves (the intent stays: the
    next pfc command with room writes it)."""
    if found.verdict == "new":
        return (f"the new policy IS in force (checked: {found.detail}) but pfc could not "
                "write its record: the next pfc command that can write there does")
    if found.verdict == "old":
        return (f"the new policy is not in force: the kernel holds what it held before "
                f"(checked: {found.detail})")
    return f"the kernel holds neither policy (checked: {found.detail})"


# ------------------------------------------------------------------------ commands

@dataclass
class Result:
    record: state.Record | None
    messages: list[str]


def rule_rows(policy: ir.Policy, lowered: ir.Policy,
              text_of: Callable[[ir.Rule], str]) -> list[state.RuleRow]:
    """The source rules, each with the lowered rule that counts it if a pass merged it
    into an earlier one (merged runs keep their first rule's index)."""
    kept = sorted(r.index for r in lowered.rules)
    audited = {r.index for r in lowered.rules if getattr(r.action, "audit", False)}
    rows = []
    for r in policy.rules:
        earlier = [i for i in kept if i <= r.index]
        merged = None if r.index in kept or not earlier else earlier[-1]
        action = "audit" if r.index in audited else r.action.name  # --audit: would drop
        rows.append(state.RuleRow(r.index, r.line, text_of(r), action, merged))
    return rows


def _previous(impl: Loader, netns: str, dev: str, target: str,
              messages: list[str]) -> state.Record | None:
    """The record of what pfc loaded there; for a corrupt one, what the kernel shows
    of pfc's (so a load replaces it as pfc's own), with a warning."""
    try:
        return state.read(netns, dev, target)
    except state.Unreadable as exc:
        found = impl.discover(dev)
        messages.append(f"warning: {exc}; " + ("the kernel shows pfc's policy there: "
                                               "replacing it" if found else "ignored it"))
        return _stand_in(netns, dev, target, found) if found else None


def _stand_in(netns: str, dev: str, target: str, attach: dict) -> state.Record:
    return state.Record(target, target, dev, netns, "?", "", "", [], "?", attach)


def load(artifact: Artifact, policy_path: str, source_text: str,
         rows: list[state.RuleRow], dev: str, netns: str | None = None,
         force: bool = False, mode: str | None = None, options: dict | None = None,
         copy: snapshot.Copy | None = None) -> Result:
    """Attach a compiled artifact to ``dev`` (in ``netns``), replacing what pfc loaded
    there before for the same target. LoadError when anything is in the way. ``copy``:
    the policy's sources, kept beside the record (:mod:`pfc.deploy.snapshot`)."""
    target = artifact.target
    check_privileges(target, netns)
    check_kernel(artifact)
    impl = loader(target)
    check_dev_name(dev)
    try:
        with in_netns(netns) as ns_name, state.locked():
            messages = recover(ns_name, dev, target)
            previous = _previous(impl, ns_name, dev, target, messages)
            plan = Plan(artifact, dev, ifindex(dev, ns_name), ns_name, force, mode,
                        dict(options or {}))
            record = state.Record(
                target=target, hook=artifact.hook, dev=dev, netns=ns_name,
                policy=str(Path(policy_path).resolve()),
                sha256=hashlib.sha256(source_text.encode()).hexdigest(),
                loaded_at=datetime.now(UTC).isoformat(timespec="seconds"),
                rules=rows, default="audit" if artifact.policy.default_audit else
                artifact.policy.default.value, netns_id=current_netns_id(),
                copy_digest=copy.digest if copy is not None else None)
            if copy is not None:
                snapshot.write_pending(ns_name, dev, target, copy)
                journal.point("prepared")
            messages += _transaction(impl, plan, previous, journal.Txn(record))
    except state.Unwritable as exc:  # before the kernel changed (else: _transaction)
        with contextlib.suppress(state.Unwritable, LoadError), in_netns(netns) as ns:
            snapshot.discard_pending(ns, dev, target)  # (the next command would)
        raise unwritable(exc, "nothing was changed: the new policy is not in force") \
            from None
    finally:
        state.release()
    return Result(record, messages)


def _transaction(impl: Loader, plan: Plan, previous: state.Record | None,
                 txn: journal.Txn) -> list[str]:
    where = (plan.netns, plan.dev, txn.record.target)
    try:
        info, messages = impl.attach(plan, previous, txn)
        txn.record.attach = info
        state.write(txn.record)
        journal.point("recorded")
        snapshot.commit(*where, txn.record.copy_digest)
        journal.point("copied")
        assert txn.intent is not None
        messages += impl.retire(txn.intent.old, info)
        journal.point("retired")
        txn.clear()
    except LoadError as exc:
        raise _failed(txn, exc) from None
    except state.Unwritable as exc:
        if txn.intent is None:
            raise
        raise _failed(txn, unwritable(exc, "")) from None
    except BaseException:
        if txn.intent is not None:  # Ctrl-C, a crash: settle it now if we can
            intent = txn.intent
            settle(intent, loader(intent.target).recover(intent))
        raise
    return messages


def unload(target: str, dev: str, netns: str | None = None, force: bool = False) -> Result:
    """Remove what pfc loaded for (netns, dev, target), as the kernel shows it;
    idempotent. ``force``: also what sits at pfc's place without pfc's record."""
    check_privileges(target, netns, "unload")
    impl = loader(target)
    check_dev_name(dev)
    ns_name = netns or current_netns()
    try:
        with state.locked():
            state.check_writable()  # before the kernel changes: the records must follow
            if not netns_alive(ns_name, None):
                return _unload_gone(ns_name, dev, target)
            with in_netns(ns_name):
                messages = recover(ns_name, dev, target)
                record, more = _unload_record(impl, ns_name, dev, target, force)
                messages += more
                if record is not None:
                    messages += impl.detach(record, force)
            state.remove_file(state.path(ns_name, dev, target))
            snapshot.remove_loaded(ns_name, dev, target)
            set_pending.clear(ns_name, dev, target)
    except state.Unwritable as exc:
        raise unwritable(exc, "nothing was unloaded") from None
    return Result(record, messages)


def _unload_record(impl: Loader, netns: str, dev: str, target: str,
                   force: bool) -> tuple[state.Record | None, list[str]]:
    """The record to unload: the state file's, or for a corrupt one (or none, with
    ``force``) what the kernel shows of pfc's."""
    try:
        record = state.read(netns, dev, target)
        if record is not None:
            return record, []
        warning = None
    except state.Unreadable as exc:
        warning = f"warning: {exc}; removing what the kernel shows of pfc's"
    found = impl.discover(dev)
    if warning is None and not force:
        hint = [f"but the kernel shows pfc's {target} policy on {dev} with no record of "
                "it: `pfc unload --force` removes it"] if found else []
        return None, [f"nothing loaded: no {target} policy of pfc on {dev} in namespace "
                      f"{netns}"] + hint
    if found is None:
        return None, [m for m in [warning] if m] + [f"nothing of pfc's {target} policy is "
                                                     f"on {dev} in namespace {netns}"]
    return _stand_in(netns, dev, target, found), [m for m in [warning] if m]


def _unload_gone(netns: str, dev: str, target: str) -> Result:
    p = state.path(netns, dev, target)
    if not p.exists():
        raise LoadError(f"network namespace `{netns}` does not exist",
                        hint="list namespaces with `ip netns list`")
    state.remove_file(p)
    snapshot.remove_loaded(netns, dev, target)
    journal.clear(netns, dev, target)
    set_pending.clear(netns, dev, target)
    return Result(None, [f"namespace {netns} is gone (with everything in it); removed "
                         "pfc's record of it"])


@dataclass
class Status:
    record: state.Record
    inspection: Inspection
    file_changed: bool | None  # the policy file's text differs from what was loaded


@dataclass
class Report:
    """``pfc status``: the records in scope with what the kernel says, and the rest."""

    entries: list[Status]
    warnings: list[str]  # unreadable state files, one line each
    messages: list[str]  # unfinished loads finished or rolled back just now
    gone: list[state.Record]  # records of namespaces that no longer exist
    pruned: bool = False  # ``gone`` were removed
    elsewhere: list[str] = field(default_factory=list)  # other namespaces with records
    every: bool = False  # every namespace's records (``--all``)


def status(dev: str | None = None, netns: str | None = None) -> list[Status]:
    """Every record of the current namespace (or ``netns``; of ``dev``) with what the
    kernel says about it now."""
    return report(dev, netns).entries


def report(dev: str | None = None, netns: str | None = None, every: bool = False,
           prune: bool = False) -> Report:
    """``pfc status``: the records of the current namespace (``netns``; ``every``: of
    every namespace), unfinished loads settled first; records of namespaces that no
    longer exist are listed apart and removed with ``prune``. CAP_BPF only when a
    record holds eBPF programs (nft and iptables alone: CAP_NET_ADMIN)."""
    check_privileges(None, netns, "status", bpf=False)  # eBPF: per record, below
    if netns is not None and netns_path(netns) is None:
        raise LoadError(f"network namespace `{netns}` does not exist",
                        hint="list namespaces with `ip netns list`; `pfc status --prune` "
                             "removes the records of namespaces that are gone")
    scope = None if every else (netns or current_netns())
    try:
        return _report(scope, dev, prune)
    except state.Unwritable as exc:
        raise unwritable(exc, "pfc could not settle the interrupted load or set (the "
                              "next command with room does)") from None


def _report(scope: str | None, dev: str | None, prune: bool) -> Report:
    with state.locked():
        if any(r.holds_bpf() for r in state.records(scope, dev)):
            check_privileges(None, None, "status", bpf=True)
        messages = recover_all(scope)
        problems: list[state.Unreadable] = []
        records = state.records(scope, dev, problems)
        every_record = state.records(None, dev)
        gone = [r for r in every_record if not netns_alive(r.netns, r.netns_id)]
        for r in gone if prune else []:
            state.remove(r)
            snapshot.remove_loaded(r.netns, r.dev, r.target)
            set_pending.clear(r.netns, r.dev, r.target)
        entries = [Status(r, inspect(r), _file_changed(r)) for r in records
                   if r not in gone]
        elsewhere = sorted({r.netns for r in every_record if r not in gone} -
                           ({scope} if scope else {r.netns for r in every_record}))
    warnings = [f"warning: {p}; `pfc unload --target {p.target} --dev {p.dev}"
                + (f" --netns {p.netns}" if p.netns != current_netns() else "")
                + "` removes what the kernel shows of it" for p in problems]
    return Report(entries, warnings, messages, gone, prune, elsewhere, scope is None)


def inspect(record: state.Record) -> Inspection:
    if not netns_alive(record.netns, record.netns_id):
        return Inspection("vanished", f"namespace {record.netns} no longer exists", None)
    with in_netns(record.netns):
        return loader(record.target).inspect(record)


def _file_changed(record: state.Record) -> bool | None:
    try:
        text = Path(record.policy).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest() != record.sha256
